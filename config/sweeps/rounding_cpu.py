# How far a result moves under a rounding-level perturbation (the evidence standard, records/README.md): Chen et al.
# 2026 (arXiv:2606.04438, Table 3) ablation ladder, the four strict rungs of config/sweeps/fidelity_cpu.py at seed
# 1337, each trained twice by the same code: with the CPU fast paths (cpu_kernels=True, the default: fused RMSNorm,
# in-place RoPE, chunked cross-entropy) and with torch's plain operations (cpu_kernels=False). The two compute the
# same math in another order (tests/test_kernels.py pins them within rounding), so any difference between the two
# runs of a rung is what rounding alone does to this ladder: the record found one such change (c14cf27) moving a
# rung by 0.16 nats, more than every effect and seed spread of the ladder. 8 runs of 800 steps x 1,024 tokens, about
# 35 core-minutes.
#     python scaling.py sweep config/sweeps/rounding_cpu.py --parallel=2
import os
import runpy

name = "rounding_cpu"
record = "records/chen2026"
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10
SEEDS = (1337,)
# The decision rule, fixed before any of these runs: the rounding spread of a rung is |val loss(plain) - val loss
# (fast)|; the ladder's rounding spread is the largest over the four rungs. Each step of the ladder the record
# reports (a rung minus Vanilla, and each rung minus the one below it, at seed 1337 in the fast runs) is called
# rounding-sensitive when the same step in the plain runs differs from it by more than half its size, or has the
# other sign. The record reports the rounding spread beside the seed spread of the same steps over its five seeds
# (records/chen2026/fidelity_cpu.jsonl), and says which of its verdicts rest on a step smaller than twice the
# rounding spread.
rule = dict(finding="Chen et al. Table 3 ladder: how far rounding alone moves each rung and each step (seed 1337)",
            test="|val_loss(cpu_kernels=False) - val_loss(cpu_kernels=True)| per rung, max over rungs; a step is "
                 "rounding-sensitive when its plain-run value differs from its fast-run value by more than half its "
                 "size or in sign; reported beside the five-seed spread of fidelity_cpu.jsonl",
            seeds=SEEDS, margin=None)
_fid = runpy.run_path(os.path.join(os.path.dirname(__file__), "fidelity_cpu.py"))
common = _fid["common"]
KERNELS = {"fast": True, "plain": False}


def points():
    return [dict(name=f"{arch}_{how}_s{seed}", arch=f"{arch}_{how}", configs=[f"config/{preset}.py"],
                 overrides=dict(max_iters=800, eval_interval=200, seed=seed, cpu_kernels=on))
            for seed in SEEDS for arch, preset in _fid["LADDER"].items() for how, on in KERNELS.items()]
