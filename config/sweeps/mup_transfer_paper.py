# muP transfer test of Lee et al. 2026 (arXiv:2605.09165, §3, Fig. 2): learning-rate sweeps at d in {128, 256, 512,
# 1024} on 4-effective-layer models of each architecture (Base 4, Looped 2x2, MoE 4, Looped-MoE 2x2); the LR that is
# best at d=128 should stay within 0.8% of the best loss at every width. Training length is not stated [inferred:
# 2,000 steps of 262,144 tokens].
#     python scaling.py fit out/sweeps/mup_transfer_paper/results.jsonl --law=lr --group='("n_embd",)' --panel=arch
name = "mup_transfer_paper"
archs = {
    "base": dict(configs=["config/sparse_base.py"], overrides=dict(n_layer=4)),
    "looped": dict(configs=["config/sparse_looped.py"], overrides=dict(n_layer=2, n_loop=2)),
    "moe": dict(configs=["config/sparse_moe.py"], overrides=dict(n_layer=4)),
    "looped_moe": dict(configs=["config/sparse_looped_moe.py"], overrides=dict(n_layer=2, n_loop=2)),
}
widths = [128, 256, 512, 1024]
lrs = [3e-4, 6e-4, 1e-3, 2e-3, 3e-3, 6e-3, 1e-2, 2e-2]
common = dict(
    data_source="fineweb-edu", tokenizer="gpt2", vocab_pad_multiple=64, block_size=1024, batch_size=16,
    grad_accum=16, max_iters=2000, warmup_iters=100, eval_interval=1000, eval_tokens=1048576, sample_tokens=0,
    compile=True,
)
runner = ["torchrun", "--standalone", "--nproc_per_node=8", "train.py"]
flops_per_second = 8 * 300e12
