# CPU-scale LoopFormer (2 (x) 4) with the shortcut-consistency objective (Jeddi et al. 2026, arXiv:2602.11451);
# config/loopformer.py lists the paper-scale file and the baselines' overrides (TMLT, *-EE, Naive-Loop-EE).
n_layer = 2
n_loop = 4
n_embd = 128
head_dim = 64
mlp = "gelu"
d_ff = 512
pos_emb = "learned"
tie_embeddings = True
norm_gain = True
block_size = 128
tokenizer = "byte"
mup = False
proj_init = "gpt2"  # c_proj N(0, 0.02^2/(2*n_layer)), as the released code
loop_cond = "loopformer"
# The paper trains every parameter at one LR (6e-4 at d=2048). At this preset's 3e-3 the adaLN gates and scales grow
# large within a few hundred steps and the model stalls: a pass's conditioning is one vector for every token, so Adam
# moves the modulator outputs far faster than a norm gain. A tenth of the LR on the conditioning keeps the gates small
# and the model training (records/jeddi2026.md, the diagnostic config/sweeps/cond_lr_cpu.py); --cond_lr_scale=1 is
# the paper's.
cond_lr_scale = 0.1
elastic = "shortcut"
trajectory_sampler = "uniform"  # the paper's (§3.3); the README's CPU checkpoints were trained with "greedy"
optimizer = "adamw"
lr = 3e-3
schedule = "cosine"
warmup_iters = 30
min_lr_frac = 0.1
max_iters = 300
batch_size = 16
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.2
wd_independent = False
grad_clip = 1.0
eval_interval = 100
eval_tokens = 32768
