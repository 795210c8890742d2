# CPU-scale learning-rate transfer after Wang et al. 2026 (arXiv:2606.18524, §5.3): LR sweeps for loop counts N in
# {1, 2, 4} under sqrt and linear residual scaling at L=2 unique blocks, and factorized at L=4 with L_ref=2 (so that
# factorized equals linear at L=2, as it does at the paper's L_ref=12); config/residual_cpu.py at d=64, context 64,
# 200 steps of 1,024 tokens. About an hour on 2 cores.
#     python scaling.py fit out/sweeps/lr_transfer_cpu/results.jsonl --law=lr --panel=arch \
#         --group='("n_layer","n_loop")' --max_loss=4
import os
import runpy

_paper = runpy.run_path(os.path.join(os.path.dirname(__file__), "lr_transfer_paper.py"))
name = "lr_transfer_cpu"
common = dict(data_source="offline", tokenizer="byte", n_embd=64, block_size=64, batch_size=16, max_iters=200,
              warmup_iters=20, decay_frac=0.2, residual_ref_layers=2, eval_interval=100000, eval_tokens=65536,
              sample_tokens=0)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 5e9  # one CPU core: 1.5e10 measured at d=64 alone, 2-4e9 on a busy machine


def points():
    return _paper["points"]({"sqrt": (2,), "linear": (2,), "factorized": (4,)}, (1, 2, 4),
                            [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2], "config/residual_cpu.py")
