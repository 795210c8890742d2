# CPU-scale version of Lee et al.'s isoFLOP study (arXiv:2605.09165, §4): the same four architectures at 4
# effective layers (Base 4, Looped 2x2, MoE 4, Looped-MoE 2x2 with top-2 of 8 experts), byte-level tokenizer on the
# offline corpus, heads of 8, context 128, four budgets 1e11 ... 3e12 FLOPs (C = 6 N_active D, as the paper).
# Each budget's widths span about 4x below and above the Chinchilla-optimal size N* = (C/120)^(1/2) in parameters
# (the previous grid, d >= 32 at 1e11, sat wholly above it); muP at base width 32 with LRs from the pilot
# config/sweeps/isoflop_lr_pilot_cpu.py: optima 7.5e-3 (Base) and 4.2e-3 (Looped-MoE), taken a factor sqrt(2) lower,
# where the curves are flat but the seeds agree better (Looped-MoE's two seeds differ by 0.13 nats at 4e-3, 0.03 at
# 2e-3); Looped and MoE take their dense or sparse sibling's. records/lee2026.md holds the design, the power
# estimate and the parts:
# Its first runs (Base at 1e11 and 3e11, seed 1337) found the optimum at or below d=16 at those budgets (more than
# 80 tokens per parameter): records/lee2026.md gives the numbers and the grid that replaces this one's budgets.
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --dry_run
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --only='_C(1e11|3e11)_.*_s1337'   # part 1
#     python scaling.py figures records/
name = "isoflop_cpu"
record = "records/lee2026"
figures = {"isoflop": ["--law=isoflop"]}
archs = {
    "base": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4, lr=5.7e-3)),
    "looped": dict(configs=["config/sparse_looped.py"], overrides=dict(n_layer=2, n_loop=2, lr=5.7e-3)),
    "moe": dict(configs=["config/sparse_moe.py"], overrides=dict(n_layer=4, lr=2.8e-3)),
    "looped_moe": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2, lr=2.8e-3)),
}
budgets = [1e11, 3e11, 1e12, 3e12]
widths = {1e11: [16, 24, 32, 48, 64], 3e11: [16, 24, 32, 48, 64, 96], 1e12: [24, 32, 48, 64, 96],
          3e12: [32, 48, 64, 96, 128]}
seeds = [1337, 7]
common = dict(
    data_source="offline", tokenizer="byte", head_dim=8, block_size=128, batch_size=16, grad_accum=1,
    mup_base_width=32, warmup_iters=20, eval_interval=100000, eval_tokens=131072, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 1e10  # one core at d=16-32: 0.9-1.0e10 achieved in the pilots (start-up and evaluation included)
