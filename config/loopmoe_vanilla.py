# Vanilla MoE: the matched non-looped reference of LoopMoE's ablation (Chen et al. 2026, arXiv:2606.04438, §3.4, Table
# 3): 12 layers of MLA + fine-grained MoE (top-6 routed + 1 shared expert, sigmoid router with bias balancing and the
# sequence-wise loss, DeepSeek-V3 style), the first layer dense, sandwich norm. Paper scale, 3B total: the paper's
# widths, ranks and expert counts (its Table 5) are not recoverable; the backbone numbers below are inferred [inferred],
# chosen for ~3.0B total / ~0.9B active params. The rungs above it match its stored params N* = 3057.676M and per-token
# executed params F* = 894.988M (strict: everything a token executes; 2F* FLOPs forward) at the same top_k; rho* = 0.462
# (tests/test_moe.py measures the matching).
n_layer = 12
sandwich_norm = True
norm_gain = True
n_embd = 2048
head_dim = 128  # content (non-rotary) dims per head
n_head = 16
attn = 'mla'
q_lora_rank = 1024
kv_lora_rank = 512
rope_head_dim = 64
v_head_dim = 128
n_expert = 56
top_k = 6  # the paper's k = 6
n_shared_expert = 1  # not stated [inferred: DeepSeek-V3 uses 1]
moe_d_ff = 640  # hidden size of one expert
moe_first_dense = 1  # the first post-embedding layer is dense
d_ff = 4480  # that dense layer: (top_k + shared) x 640-wide experts' FLOPs
moe_router = 'sigmoid'
moe_bias_rate = 0.001  # DeepSeek-V3's gamma
moe_seq_coef = 0.0001  # DeepSeek-V3's sequence-wise balance loss
moe_lb_coef = 0.0
moe_z_coef = 0.0
mlp = 'swiglu'
mup = False
block_size = 2048  # [inferred]
vocab_size = 100278  # OLMo 3 tokenizer, for accounting (the matching above); training uses the tokenizer below
# Data: Chen et al. train on a 200B-token subset of OLMo 3's Dolma3Mix in OLMo 3 tokens (100,278); neither can be had
# here, so the substitution is FineWeb-Edu in GPT-2 tokens: training uses vocab_size 50,257 (train.py says so), which
# stores 205M fewer embedding and head parameters than the matched model (LoopMoE: 2,852M stored, 691M per token).
# For the paper's 200B tokens: --hf_config=sample-350BT.
data_source = "fineweb-edu"
tokenizer = "gpt2"  # substitution for OLMo 3's
hf_config = "sample-10BT"
optimizer = 'adamw'
lr = 0.0003  # [inferred]
schedule = 'cosine'
warmup_iters = 2000  # [inferred]
min_lr_frac = 0.1  # [inferred]
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
wd_independent = False
