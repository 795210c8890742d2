# IsoFLOP study of Lee, Biloki, Hu, May 2026 (arXiv:2605.09165, §4): Base, Looped (8x2), MoE and Looped-MoE (8x2, top-2
# of 8) at C in {5e16, 2e17, 5e17, 1e18} FLOPs with C = 6 N_active D, widths from the paper's configuration table
# around each budget's optimum (which widths each budget used is not stated [inferred]), GPT-2 tokenizer on
# FineWeb-Edu, the peak LR transferred by muP from the d=128 proxy (config/sweeps/mup_transfer_paper.py).
#     python scaling.py sweep config/sweeps/isoflop_paper.py --dry_run
#     python scaling.py fit out/sweeps/isoflop_paper/results.jsonl --law=isoflop
# The keys of a sweep spec are listed at the top of sweep.py.
name = "isoflop_paper"
archs = {
    "base": ["config/sparse_base.py"],
    "looped": ["config/sparse_looped.py"],
    "moe": ["config/sparse_moe.py"],
    "looped_moe": ["config/sparse_looped_moe.py"],
}
budgets = [5e16, 2e17, 5e17, 1e18]
widths = {5e16: [128, 256, 384, 512, 640], 2e17: [256, 384, 512, 640, 768], 5e17: [384, 512, 640, 768, 896],
          1e18: [512, 640, 768, 896, 1024]}
lrs = [3e-3]  # replace by the optimum of the muP transfer sweep at d=128 (the paper does not state it)
common = dict(
    data_source="fineweb-edu", tokenizer="gpt2", vocab_pad_multiple=64,
    block_size=1024, batch_size=16, grad_accum=16,  # 262,144 tokens per step [inferred: not stated]
    warmup_iters=100, eval_interval=1000, eval_tokens=1048576, sample_tokens=0, compile=True,
)
runner = ["torchrun", "--standalone", "--nproc_per_node=8", "train.py"]
flops_per_second = 8 * 300e12  # eight H100s at ~30% of their dense bf16 peak
