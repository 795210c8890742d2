# Second pilot of the CPU isoFLOP grid (Lee et al. 2026, arXiv:2605.09165, §4). The grid's first runs
# (config/sweeps/isoflop_cpu.py, Base at 1e11 and 3e11 with 2,048-token batches) put the optimum at or below its
# smallest width, d=16: the wider models got too few optimizer steps (33 at d=64, 1e11) to use their parameters.
# This pilot trains Base at 3e11 FLOPs with 512-token batches (4x the steps for the same tokens) and the LR scaled by
# the square root of the batch (5.7e-3 / 2), to see whether the optimum moves inside the widths. About 10 minutes
# of one core.
#     python scaling.py sweep config/sweeps/isoflop_batch_pilot_cpu.py
name = "isoflop_batch_pilot_cpu"
record = "records/lee2026"
figures = {"isoflop": ["--law=isoflop"]}
archs = {"base_b4": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4, lr=2.85e-3))}
budgets = [3e11]
widths = [16, 24, 32, 48, 64]
seeds = [1337]
common = dict(
    data_source="offline", tokenizer="byte", head_dim=8, block_size=128, batch_size=4, grad_accum=1,
    mup_base_width=32, warmup_iters=20, eval_interval=100000, eval_tokens=131072, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 1e10
