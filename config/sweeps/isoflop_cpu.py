# CPU-scale version of Lee et al.'s isoFLOP study (arXiv:2605.09165, §4): the same four architectures at 4
# effective layers (Base 4, Looped 2x2, MoE 4, Looped-MoE 2x2 with top-2 of 8 experts), byte-level tokenizer on the
# offline corpus, heads of 16, context 128, budgets about 1e-6 of the paper's. About an hour on 2 cores.
#     python scaling.py sweep config/sweeps/isoflop_cpu.py --dry_run
#     python scaling.py fit out/sweeps/isoflop_cpu/results.jsonl --law=isoflop
name = "isoflop_cpu"
archs = {
    "base": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4)),
    "looped": dict(configs=["config/sparse_looped.py"], overrides=dict(n_layer=2, n_loop=2)),
    "moe": dict(configs=["config/sparse_moe.py"], overrides=dict(n_layer=4)),
    "looped_moe": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2)),
}
budgets = [1e11, 3e11, 1e12]
widths = {1e11: [32, 48, 64, 96], 3e11: [48, 64, 96, 128], 1e12: [64, 96, 128, 192]}
lrs = [3e-3]  # the muP-transferred LR: replace by the optimum of config/sweeps/mup_transfer_cpu.py at d=32
common = dict(
    data_source="offline", tokenizer="byte", head_dim=16, block_size=128, batch_size=16, grad_accum=1,
    mup_base_width=32, warmup_iters=5, eval_interval=100000, eval_tokens=65536, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 5e9  # one CPU core at these widths: 1.5e10 measured at d=64, 2-4e9 on a busy machine
