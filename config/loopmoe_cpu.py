# LoopMoE = Loop Base + IterAdaLN + capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): MLA ranks raised
# and experts narrowed at fixed per-token FLOPs until rho = A_attn/A_ffn is the Vanilla MoE's rho*, then routed
# experts added until the total params match (moe.rebalance). CPU scale, trains in minutes: python train.py
# config/loopmoe_cpu.py (paper scale: config/loopmoe.py). Generated with moe.match_params / moe.rebalance
# (tests/test_moe.py checks the matching): stored params 2.086M, per-token params 1.165M, rho 0.398 (Vanilla rho*
# 0.398) at 7.60 unique routed experts per token over the 2 iterations (measured with moe.unique_experts_per_token
# on the trained CPU Loop Base + IterAdaLN).
_unique_experts = 7.601  # the u that rebalance used (a private name: not a config key)
n_prelude = 1
n_layer = 2
n_loop = 2
n_coda = 1
injection = 'none'
loop_cond = 'iteradaln'
sandwich_norm = True
norm_gain = True
n_embd = 128
head_dim = 32  # content (non-rotary) dims per head
n_head = 4
attn = 'mla'
q_lora_rank = 72
kv_lora_rank = 36
rope_head_dim = 16
v_head_dim = 32
n_expert = 25
top_k = 6  # the paper's k = 6
n_shared_expert = 1  # not stated [inferred: DeepSeek-V3 uses 1]
moe_d_ff = 46  # hidden size of one expert
moe_first_dense = 1  # the first post-embedding layer is dense
d_ff = 336  # that dense layer: the FLOPs of (top_k + shared) experts
moe_router = 'sigmoid'
moe_bias_rate = 0.001  # DeepSeek-V3's gamma
moe_seq_coef = 0.0001  # DeepSeek-V3's sequence-wise balance loss
moe_lb_coef = 0.0
moe_z_coef = 0.0
mlp = 'swiglu'
mup = False
block_size = 128
tokenizer = 'byte'
optimizer = 'adamw'
lr = 0.002
schedule = 'cosine'
warmup_iters = 30
min_lr_frac = 0.1
batch_size = 8
max_iters = 300
eval_interval = 100
eval_tokens = 32768
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
wd_independent = False
