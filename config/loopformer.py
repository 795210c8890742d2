# LoopFormer (3 (x) 8) of Jeddi, Ciccone, Taati 2026 (ICLR 2026, arXiv:2602.11451): 3 shared blocks looped 8 times,
# each pass conditioned on normalised time t and step size dt (adaLN-zero gates and scales, affine-free block
# norms), trained on the full trajectory plus one sampled shortcut trajectory: L_L + 0.1 L_S + 0.1 MSE(stopgrad(h_L),
# h_S) on the final-normed hidden state. Backbone: nanoGPT, d=2048, 32 heads, GELU MLP 5120, learned positions,
# tied embeddings, GPT-2 vocabulary padded to 50,304, context 1024. AdamW (0.9, 0.95), weight decay 0.2 (torch's
# lr-scaled decay), cosine 6e-4 -> 6e-5 after 4,000 warmup steps, 50,000 steps of 491,520 tokens, clip 1.0.
# Baselines of its Table 1 (same file plus):
#   Base-Loop         --loop_cond=none --elastic=none       TMLT          --loop_cond=index --elastic=none
#   Base-Loop-EE-Cons --loop_cond=none --elastic=early_exit TMLT-EE       --loop_cond=index --elastic=early_exit
#   Naive-Loop-EE     --loop_cond=none --elastic=random_depth
#   Base (24 (x) 1)   --n_layer=24 --n_loop=1 --loop_cond=none --elastic=none
# Elastic evaluation at budget M: model(idx, schedule=M) or a list of step sizes (early_exit.py).
# Init as the released code (the paper gives none): N(0, 0.02), attention and MLP c_proj N(0, 0.02^2/(2*n_layer))
# with n_layer the unique blocks (3 here; 24 for Base 24 (x) 1, as its released config), modulators zero (the paper).
n_layer = 3
n_loop = 8
n_embd = 2048
head_dim = 64  # 32 heads
mlp = "gelu"
d_ff = 5120
pos_emb = "learned"
tie_embeddings = True
norm_gain = True  # the final norm has a gain; the conditioned block norms are affine-free
vocab_size = 50257  # GPT-2
# Data: the paper trains on a deduplicated subset of The Pile (25B tokens), which cannot be had here; the substitution
# is FineWeb-Edu, in the paper's GPT-2 tokens, from its 100BT sample (the 24.6B tokens of 50,000 steps exceed the 10BT)
data_source = "fineweb-edu"
tokenizer = "gpt2"
hf_config = "sample-100BT"
vocab_pad_multiple = 64  # 50,304
block_size = 1024
mup = False
init = "normal"
init_std = 0.02
proj_init = "gpt2"  # c_proj N(0, 0.02^2/(2*3)): GPT-2's rule in the released code
loop_cond = "loopformer"
cond_init = "zero"  # the paper; "normal" = the released code's effective init
elastic = "shortcut"
shortcut_weight = 0.1
consistency_weight = 0.1
consistency_on = "hidden"
trajectory_sampler = "uniform"  # the paper's (§3.3: S ~ U{1..L-1}, then uniform over schedules); greedy = the code
# ---- recipe ----
optimizer = "adamw"
lr = 6e-4
schedule = "cosine"
warmup_iters = 4000  # the paper (the released train.py defaults to 2,000)
min_lr_frac = 0.1
max_iters = 50000
batch_size = 12
grad_accum = 40  # 12 * 1024 * 40 = 491,520 tokens per step
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.2
wd_independent = False
grad_clip = 1.0
