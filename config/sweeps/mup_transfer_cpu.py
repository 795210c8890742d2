# CPU-scale muP transfer test (Lee et al. 2026, arXiv:2605.09165, §3): LR sweeps at d in {32, 64, 128} (the paper:
# 128 ... 1024) for Base (4 layers) and Looped-MoE (2x2), byte tokenizer, 200 steps of 2,048 tokens; muP's base width
# is the smallest one, so the LR that is best at d=32 should transfer.
#     python scaling.py fit out/sweeps/mup_transfer_cpu/results.jsonl --law=lr --group='("n_embd",)' --panel=arch
name = "mup_transfer_cpu"
archs = {
    "base": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4)),
    "looped_moe": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2)),
}
widths = [32, 64, 128]
lrs = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
common = dict(
    data_source="offline", tokenizer="byte", head_dim=16, block_size=128, batch_size=16, max_iters=200,
    mup_base_width=32, warmup_iters=20, eval_interval=100000, eval_tokens=65536, sample_tokens=0,
)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 5e9  # one CPU core: 1.5e10 measured at d=64 alone, 2-4e9 on a busy machine
