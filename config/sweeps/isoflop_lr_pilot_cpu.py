# Pilot of the CPU isoFLOP grid (Lee et al. 2026, arXiv:2605.09165, §4): the base LR of muP at its base width
# d=32 for Base 4 and Looped-MoE 2x2 at the grid's middle budget 3e11 FLOPs (about 0.8M tokens), two seeds.
# muP carries the LR found here to every width. About 10 minutes of one core for the 2,048-token batches of the
# width pilot (config/sweeps/isoflop_width_pilot_cpu.py); the _b4 arms repeat it with the 512-token batches of the
# grid that replaced it (config/sweeps/isoflop_cpu.py), at LRs 1e-3 ... 8e-3, about 15 more minutes:
#     python scaling.py sweep config/sweeps/isoflop_lr_pilot_cpu.py --only='^(base|looped_moe)_C'
#     python scaling.py sweep config/sweeps/isoflop_lr_pilot_cpu.py --only='_b4_.*_lr0.00[1248]_' --parallel=2
#     python scaling.py figures records/
name = "isoflop_lr_pilot_cpu"
record = "records/lee2026"
figures = {"lr": ["--law=lr", "--panel=arch", '--group=("n_embd",)']}
archs = {
    "base": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4)),
    "looped_moe": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2)),
    "base_b4": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4, batch_size=4)),
    "looped_moe_b4": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2, batch_size=4)),
}
budgets = [3e11]
widths = [32]
lrs = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2]
seeds = [1337, 7]
common = dict(
    data_source="offline", tokenizer="byte", head_dim=8, block_size=128, batch_size=16, grad_accum=1,
    mup_base_width=32, warmup_iters=20, eval_interval=100000, eval_tokens=131072, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 3e10  # one core at d=32 (measured/estimated about 0.5 at 1.5e10 on the LR-transfer sweep)
