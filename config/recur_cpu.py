# CPU-scale prelude / recur / coda model with the recipe of Schwethelm et al. 2026 (arXiv:2604.21106); see
# config/recur_r4.py for the paper-scale file and the probes (--bptt_loops=1, --injection=none --hc_lanes=2).
# Trains in a few minutes on 2 cores: python train.py config/recur_cpu.py
n_embd = 128
n_prelude = 1
n_layer = 2
n_loop = 2
n_coda = 1
injection = "linear"
loop_norm = True
head_dim = 64  # 128 in the paper; 64 keeps two heads at this width
mlp = "relu2"
qk_norm = True
norm_gain = True
logit_softcap = 15.0
init = "uniform"
init_std = 1.0  # embedding N(0, 1)
head_init_std = 1e-3  # head N(0, 1e-3) (Schwethelm et al. App. C.1): initial loss ln V
mup = False
block_size = 128
tokenizer = "byte"
flops_convention = "schwethelm"
optimizer = "muonh"
batch_size = 16
max_iters = 300
_D_ref = max_iters * batch_size * block_size  # HyperP's reference is this run itself: lr = 0.014 here
lr = 0.014 * (max_iters * batch_size * block_size / _D_ref) ** -0.32
schedule = "linear"
warmup_iters = 0
min_lr_frac = 0.1
weight_decay = 0.0
beta1 = 0.8
beta2 = 0.95
eval_interval = 100
eval_tokens = 32768
