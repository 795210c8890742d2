# CPU-scale checkpoints for Lee et al.'s early-exit perplexity table (arXiv:2605.09165): the paper's six models at
# 16 effective layers (Base 16, MoE 16, Looped 8x2, Looped-MoE 8x2, 4x4, 2x8; top-2 of 8 experts), width 128,
# byte-level tokenizer on the offline corpus, 400 steps of 4,096 tokens each (1.6M tokens; the paper: compute-optimal
# 1e18-FLOP models). About 40 minutes on 2 cores (two runs at once, one thread each; 74 on a busy machine). Then:
#     python scaling.py sweep config/sweeps/early_exit_cpu.py --parallel=2 --only='_d128$'   # seed 1337 (_s7$, _s42$)
#     python early_exit.py --ckpt=out/sweeps/early_exit_cpu/base16_d128,... --names=Base,... --out=out/early_exit/cpu16
# Finding 3 (more loops lose less) at equal perplexity: --only='^looped_moe(8x2|8x2_it\d+|4x4|2x8)_d128$'
# (seed 1337; _s7$, _s42$), then one early_exit.py over the six Looped-MoE checkpoints (records/lee2026.md, part 3).
name = "early_exit_cpu"
archs = {
    "base16": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=16)),
    "moe16": dict(configs=["config/sparse_moe.py"], overrides=dict(n_layer=16)),
    "looped8x2": dict(configs=["config/sparse_looped.py"], overrides=dict(n_layer=8, n_loop=2)),
    "looped_moe8x2": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=8, n_loop=2)),
    "looped_moe4x4": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=4, n_loop=4)),
    "looped_moe2x8": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=8)),
    # finding 3 at equal quality: 4x4 and 2x8 end 400 steps at a higher perplexity than 8x2, so 8x2 also trains
    # for fewer steps (each run a whole schedule, its decay included) to trace its exit penalty against
    # perplexity through theirs
    **{f"looped_moe8x2_it{n}": dict(configs=["config/sparse_looped_moe.py"],
                                     overrides=dict(n_layer=8, n_loop=2, max_iters=n)) for n in (150, 200, 300)},
}
widths = [128]
seeds = [None, 7, 42]  # None: train.py's default 1337 (names without a suffix); the early-exit table's three seeds
record = "records/lee2026"
common = dict(
    data_source="offline", tokenizer="byte", head_dim=32, block_size=256, batch_size=16, grad_accum=1,
    max_iters=400, warmup_iters=30, eval_interval=100, eval_tokens=65536, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")  # one core per run: run two at once with --parallel=2
flops_per_second = 6e10  # one core, fp32, 16 layers at d=128: ~3,000 tok/s measured for Base 16
