# How far Wang et al. 2026's (arXiv:2606.18524, Fig. 5) LR-transfer result moves under a rounding-level
# perturbation (the evidence standard, records/README.md; as config/sweeps/rounding_cpu.py does for Chen et al.'s
# ladder): the one comparison the record reproduces, "without residual scaling the optimal LR moves at N=2", at seed
# 1337 on the shared grid (1e-3 ... 8e-3 in steps of sqrt 2), each run trained twice by the same code: with the CPU
# fast paths (cpu_kernels=True, the default) and with torch's plain operations (cpu_kernels=False), the same math in
# another order. 28 runs of config/sweeps/lr_transfer_cpu.py's recipe, about 25 core-minutes.
#     python scaling.py sweep config/sweeps/rounding_wang_cpu.py --parallel=2
#     python scaling.py fit records/wang2026/rounding_wang_cpu.jsonl --law=lr --panel=arch \
#         --group='("n_layer","n_loop")' --max_loss=4 --out=records/wang2026/rounding_wang_cpu_lr
import os
import runpy

name = "rounding_wang_cpu"
record = "records/wang2026"
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10
SEEDS = (1337,)
_lr = runpy.run_path(os.path.join(os.path.dirname(__file__), "lr_transfer_cpu.py"))
common = _lr["common"]
LRS = [lr for lr in _lr["LRS"] if lr <= 0.008 * (1 + 1e-9)]  # the grid every rule shares
KERNELS = {"fast": True, "plain": False}
# The decision rule, fixed before any of these runs: the shift of the optimal LR from N=1 to N=2 without residual
# scaling (shift_log2 of `fit --law=lr`, octaves, seed 1337) is measured in the fast and in the plain runs; it is
# rounding-sensitive when the two differ by more than half its size or in sign. The record reports the rounding
# difference beside the seed spread of the same shift (-0.65 / -0.69 octave at seeds 1337 / 7, committed rows) and
# says whether the verdict "moves at N=2" rests on a shift smaller than twice the rounding difference.
rule = dict(finding="Wang et al. Fig. 5: how far rounding alone moves the optimal-LR shift of 'none' from N=1 to N=2",
            test="shift_log2 (fit --law=lr) in the fast vs the plain runs at seed 1337; rounding-sensitive when they "
                 "differ by more than half the shift or in sign; reported beside the two-seed spread",
            seeds=SEEDS, margin=None)


def points():
    return [dict(name=f"none_{how}_N{N}_lr{lr:.3g}_s{seed}", arch=f"none_{how}", configs=["config/residual_cpu.py"],
                 overrides=dict(residual_scaling="none", n_layer=2, n_loop=N, lr=lr, seed=seed, cpu_kernels=on),
                 fields=dict(rule="none"))
            for seed in SEEDS for how, on in KERNELS.items() for N in (1, 2) for lr in LRS]
