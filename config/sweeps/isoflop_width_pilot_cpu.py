# First CPU isoFLOP grid of Lee et al. 2026 (arXiv:2605.09165, §4), kept as the width pilot it became: the four
# architectures at 4 effective layers (Base 4, Looped 2x2, MoE 4, Looped-MoE 2x2 with top-2 of 8 experts), byte
# tokenizer on the offline corpus, heads of 8, context 128, 2,048-token batches, budgets 1e11 ... 3e12 FLOPs with
# widths about 4x below and above the Chinchilla-optimal N* = (C/120)^(1/2); muP at base width 32 with the LRs of
# config/sweeps/isoflop_lr_pilot_cpu.py taken a factor sqrt(2) lower. Its first 8 runs (Base at 1e11 and 3e11, seed
# 1337) found the optimum at or below d=16 (more than 80 tokens per parameter), so the grid moved:
# config/sweeps/isoflop_cpu.py holds the one that replaced it, records/lee2026.md the numbers.
#     python scaling.py sweep config/sweeps/isoflop_width_pilot_cpu.py --only='^base_C(1e11|3e11)_.*_s1337$'
name = "isoflop_width_pilot_cpu"
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
