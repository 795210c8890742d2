# CPU-scale version of Lee et al.'s isoFLOP study (arXiv:2605.09165, §4): the four architectures at 4 effective
# layers (Base 4, Looped 2x2, MoE 4, Looped-MoE 2x2 with top-2 of 8 experts), byte tokenizer on the offline corpus,
# heads of 8, context 128, C = 6 N_active D as the paper. Designed from three pilots (records/lee2026.md): the first
# grid (config/sweeps/isoflop_width_pilot_cpu.py) put the optimum at or below its smallest width at 1e11-3e11 FLOPs
# (more than 80 tokens per parameter, not Chinchilla's 20), and 512-token batches (4x the optimizer steps) helped
# every width without moving the optimum. So the budgets span 3e11 ... 1e13 (33x; the paper's span is 20x),
# each budget's widths bracket N* ~ (C/600)^(1/2) (about 100 tokens per parameter: d* ~ 12, 20, 28, 40), d=8 (one
# head) reaching below it at 3e11, and the batches hold 512 tokens. muP at base width 32; the LRs are the optima of
# the batch-4 arms of config/sweeps/isoflop_lr_pilot_cpu.py (4.0e-3 Base, 3.0e-3 Looped-MoE, two seeds) taken a
# factor sqrt(2) lower, as the first grid did; Looped and MoE take their dense or sparse sibling's.
# Parts of about two hours on 2 cores (seed 7: end the pattern with _s7$); MoE runs cost about twice the dense ones:
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --dry_run
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --parallel=2 --only='^(base|looped_moe)_C(3e11|1e12|3e12)_.*_s1337$'   # part 1
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --parallel=2 --only='^(base|looped_moe)_C1e13_.*_s1337$'   # part 2
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --parallel=2 --only='^(looped|moe)_C(3e11|1e12|3e12)_'  # 4 archs
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --parallel=2 --only='^(base|looped)_C(3e11|1e12|3e12)_.*_s42$'  # part 3
#     python scaling.py figures records/
# Run so far (records/lee2026.md): the four architectures at 3e11-3e12, seeds 1337 and 7, 120 runs, about 6
# core-hours; seed 42 for Base and Looped only (part 3: their difference in alpha lay within the seed spread);
# 1e13 (part 2) not run: the order of the exponents it was kept for was decided without it.
name = "isoflop_cpu"
record = "records/lee2026"
figures = {"isoflop": ["--law=isoflop"]}
archs = {
    "base": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4, lr=2.85e-3)),
    "looped": dict(configs=["config/sparse_looped.py"], overrides=dict(n_layer=2, n_loop=2, lr=2.85e-3)),
    "moe": dict(configs=["config/sparse_moe.py"], overrides=dict(n_layer=4, lr=2.1e-3)),
    "looped_moe": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2, lr=2.1e-3)),
}
budgets = [3e11, 1e12, 3e12, 1e13]
widths = {3e11: [8, 16, 24, 32, 48], 1e12: [16, 24, 32, 48, 64], 3e12: [16, 24, 32, 48, 64],
          1e13: [24, 32, 48, 64, 96]}
seeds = [1337, 7, 42]
common = dict(
    data_source="offline", tokenizer="byte", head_dim=8, block_size=128, batch_size=4, grad_accum=1,
    mup_base_width=32, warmup_iters=20, eval_interval=100000, eval_tokens=131072, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 8e9  # one core, 512-token batches: Base 0.4-2.0e10 at d=8-64 in the first runs, Looped-MoE 0.6x
