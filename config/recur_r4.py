# Prelude / recur / coda looped model with the full training recipe of Schwethelm, Rueckert, Kaissis 2026 ("How
# Much Is One Recurrence Worth?", arXiv:2604.21106) at s=10 (d=640), r=4: 2 + 4*4 + 2 = 20 effective layers.
# Architecture (§3, App. C; config/isodepth.py): linear input injection u = W[e||h] (W = [I|0] at init), RMSNorms
# after the embedding, at the end of every pass and before the head; head size 128, squared-ReLU MLP 4d, QK-norm,
# RMSNorm gains, untied, softcap 15, uniform init, head N(0, 1e-3). Recipe (§4.2): MuonH (hypersphere Muon) for
# matrices at 0.014, AdamW for embedding / head / norms at 0.3 / 0.004 / 0.005 (train.py --optimizer=muonh keeps
# these ratios to --lr), weight decay 0, linear decay to 10%, HyperP LR = 0.014 * (D/D_ref)^-0.32 (D = training
# tokens), batch 262,144 tokens.
# Other r: --n_loop=2 --n_layer=8 | --n_loop=8 --n_layer=2 | r=1: --n_loop=1 --n_layer=16 (20 unshared layers).
# Probes (§5): truncated BPTT --bptt_loops=2 (ceil(r/2)); hyper-connections --injection=none --hc_lanes=2.
# Injection ablation (App. C.2): --injection=additive | --injection=none (passthrough).
# Data: FineWeb-Edu in GPT-2 tokens, substituted for the paper's Llama-2 tokens (config/isodepth.py);
# scaling.py count config/recur_r4.py keeps the paper's vocabulary (32,008 -> 32,064).
import os

exec(open(os.path.join(os.path.dirname(__file__), "isodepth.py")).read())  # the architecture, init, FLOP convention
# ---- recipe ----
optimizer = "muonh"
batch_size = 16
grad_accum = 8  # 16 * 8 * 2048 = 262,144 tokens per step
max_iters = 3643  # ~955M tokens: the paper's s=10, r=4 run at C = 1e18 FLOPs (App. C.2)
_D_ref = 1e9  # tokens of the tuning run (s=10 at ~10 tokens/parameter) [inferred; the paper gives no number]
lr = 0.014 * (max_iters * batch_size * grad_accum * block_size / _D_ref) ** -0.32  # HyperP data correction
schedule = "linear"
warmup_iters = 0  # [inferred: not stated]
min_lr_frac = 0.1
weight_decay = 0.0
beta1 = 0.8  # AdamW betas: not stated; nanochat's (the authors' code base) [inferred]
beta2 = 0.95
