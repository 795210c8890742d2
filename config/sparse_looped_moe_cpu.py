# CPU-scale Looped-MoE of Lee et al. 2026 (arXiv:2605.09165): 2 unique MoE layers (top-2 of 8 SwiGLU experts of
# hidden d_ff/2) passed twice, the same 4 effective layers and active params as config/sparse_moe_cpu.py.
# Trains in minutes on 2 cores: python train.py config/sparse_looped_moe_cpu.py   (paper scale: sparse_looped_moe.py)
n_layer = 2
n_loop = 2
n_expert = 8
top_k = 2
moe_lb_coef = 0.01  # not given in the paper [inferred: Switch]
moe_z_coef = 0.001  # not given in the paper [inferred: ST-MoE]
n_embd = 128
head_dim = 32
mlp = "swiglu"
norm_gain = False
mup = True
mup_base_width = 128
block_size = 128
tokenizer = "byte"
batch_size = 8
max_iters = 300
eval_interval = 100
eval_tokens = 32768
