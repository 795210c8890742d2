# Loop Base (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): the Vanilla MoE's layers as a sandwich
# loop, 1 prefix + 2 shared layers x 2 iterations + 1 suffix (6 effective, 4 unique), no re-injection, no per-
# iteration conditioning; routed experts added (moe.match_params) so that the total params match the Vanilla MoE's
# at the same per-token FLOPs. CPU scale, trains in minutes: python train.py config/loopmoe_loop_base_cpu.py (paper
# scale: config/loopmoe_loop_base.py). Generated with moe.match_params / moe.rebalance (tests/test_moe.py checks the
# matching): stored params 2.072M, per-token params 1.169M, rho 0.357 (Vanilla rho* 0.398).
n_prelude = 1
n_layer = 2
n_loop = 2
n_coda = 1
injection = 'none'
loop_cond = 'none'
sandwich_norm = True
norm_gain = True
n_embd = 128
head_dim = 32  # content (non-rotary) dims per head
n_head = 4
attn = 'mla'
q_lora_rank = 64
kv_lora_rank = 32
rope_head_dim = 16
v_head_dim = 32
n_expert = 29
top_k = 6  # the paper's k = 6
n_shared_expert = 1  # not stated [inferred: DeepSeek-V3 uses 1]
moe_d_ff = 48  # hidden size of one expert
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
