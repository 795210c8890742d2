# Residual scaling of looped transformers (Wang et al. 2026, arXiv:2606.18524): L = 12 unique Llama-style blocks
# looped N = 8 times, every attention and MLP branch of the shared blocks multiplied by lambda / N *
# (L/12)^-1/2 ("factorized"; = 1/N at L = 12), hidden LR and AdamW eps x (L/12)^-1/2, embedding / head / final norm
# unscaled, so one base LR (1.25e-3) transfers across N and L. Other rules: --residual_scaling=none | sqrt | linear.
# Grid: --n_loop=1|2|4|8, --n_layer=12|24|48. Model (Table 2): d=768, 12 heads of 64, SwiGLU 2048, RMSNorm gains,
# tied embeddings; Llama-3 vocabulary 128,256 (for accounting: training uses GPT-2's, see Data below).
# Recipe (Table 4): AdamW (0.9, 0.95), weight decay 0.1, eps 1e-8, WSD: 500 warmup steps, linear decay over the
# last 1,000 of 20,000 steps of 0.5M tokens (decay target not stated: 0 here [inferred]); init N(0, 0.02).
n_layer = 12
n_loop = 8
n_embd = 768
head_dim = 64
mlp = "swiglu"
d_ff = 2048
norm_gain = True
tie_embeddings = True
vocab_size = 128256  # Llama-3's, for accounting (Table 2's parameters); training uses the tokenizer below
# Data: FineWeb-Edu as in the paper, from its 100BT sample (20,000 steps of 0.5M tokens are 10.5B tokens, more than the
# 10BT sample holds); the Llama-3 tokenizer cannot be had here, so the substitution is GPT-2's (vocab_size 50,257;
# train.py says so)
data_source = "fineweb-edu"
tokenizer = "gpt2"  # substitution for Llama-3's
hf_config = "sample-100BT"
block_size = 1024  # not stated [inferred]
mup = False
init = "normal"
init_std = 0.02
residual_scaling = "factorized"
residual_lambda = 1.0
residual_ref_layers = 12
# ---- recipe ----
optimizer = "adamw"
lr = 1.25e-3
schedule = "wsd_linear"
warmup_iters = 500
decay_frac = 0.05  # the last 1,000 of 20,000 steps
min_lr_frac = 0.0
max_iters = 20000
batch_size = 32
grad_accum = 16  # 32 * 16 * 1024 = 524,288 tokens per step
beta1 = 0.9
beta2 = 0.95
adam_eps = 1e-8
weight_decay = 0.1
wd_independent = False
