# Loop Base (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): the Vanilla MoE's layers as a sandwich
# loop, 2 prefix + 2 shared layers x 4 iterations + 2 suffix (12 effective, 6 unique), no re-injection, no per-
# iteration conditioning; routed experts added (moe.match_params) so that the total params match the Vanilla MoE's
# at the same per-token FLOPs. Paper scale, 3B total: the paper's widths, ranks and expert counts (its Table 5) are
# not recoverable; the backbone numbers below are inferred [inferred], chosen for ~3.0B total / ~0.9B active params.
# Generated with moe.match_params / moe.rebalance (tests/test_moe.py checks the matching): stored params 3052.162M,
# per-token params 896.610M, rho 0.260 (Vanilla rho* 0.462).
n_prelude = 2
n_layer = 2
n_loop = 4
n_coda = 2
injection = 'none'
loop_cond = 'none'
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
n_expert = 128
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
vocab_size = 100278  # OLMo 3 tokenizer, for accounting; train.py takes the data's vocabulary
optimizer = 'adamw'
lr = 0.0003  # [inferred]
schedule = 'cosine'
warmup_iters = 2000  # [inferred]
min_lr_frac = 0.1  # [inferred]
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
wd_independent = False
