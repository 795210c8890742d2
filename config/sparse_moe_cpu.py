# CPU-scale MoE of Lee et al. 2026 (arXiv:2605.09165): 4 layers whose FFNs are token-choice top-2 of 8 SwiGLU
# experts of hidden d_ff/2 (active FFN params = the dense FFN's), softmax router, load-balancing loss + z-loss.
# Trains in minutes on 2 cores: python train.py config/sparse_moe_cpu.py   (paper scale: config/sparse_moe.py)
n_layer = 4
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
