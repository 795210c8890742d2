# CPU-scale looped model with the factorized residual scaling and depth LR rule of Wang et al. 2026
# (arXiv:2606.18524); config/residual_scaling.py is the paper-scale file. 2 unique blocks looped 4 times:
# branch multiplier 1/4 * (2/12)^-1/2 = 0.61, hidden LR and eps x (2/12)^-1/2 = 2.45.
n_layer = 2
n_loop = 4
n_embd = 128
head_dim = 64
mlp = "swiglu"
norm_gain = True
tie_embeddings = True
block_size = 128
tokenizer = "byte"
mup = False
residual_scaling = "factorized"
optimizer = "adamw"
lr = 1.25e-3
schedule = "wsd_linear"
warmup_iters = 30
decay_frac = 0.2
min_lr_frac = 0.0
max_iters = 300
batch_size = 16
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
wd_independent = False
eval_interval = 100
eval_tokens = 32768
