# Sandwich-loop backbone of LoopMoE (Chen et al. 2026, arXiv:2606.04438, §3.2-3.3), its dense parts: 2 prefix
# layers, a shared body of 2 layers run K = 4 times with no re-injection, 2 suffix layers (12 effective, 6 unique);
# sandwich norm (an RMSNorm on every sublayer output before the residual add); IterAdaLN in the loop body (per-token
# and per-iteration gamma, beta for both pre-norms, alpha gating attention only; zero-initialised, so the body's
# attention starts off). The MoE and MLA parts (top-6 fine-grained experts + shared experts, sigmoid router with
# bias balancing, a dense first layer, MLA) are moe.py's keys: add them on the command line or with a second config
# file, e.g. --attn=mla --n_expert=... --moe_first_dense=1. The paper's widths and LRs (its Table 5) are not
# recoverable: the width and recipe below are placeholders [inferred]: AdamW, cosine with linear warmup.
n_prelude = 2
n_layer = 2
n_loop = 4
n_coda = 2
injection = "none"
sandwich_norm = True
norm_gain = True
loop_cond = "iteradaln"
n_embd = 1024  # [inferred]
head_dim = 64
mlp = "swiglu"
block_size = 2048  # [inferred]
mup = False
optimizer = "adamw"
lr = 3e-4  # [inferred]
schedule = "cosine"
warmup_iters = 2000  # [inferred]
min_lr_frac = 0.1
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
wd_independent = False
