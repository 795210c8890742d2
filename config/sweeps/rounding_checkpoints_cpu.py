# How far rounding alone moves the checkpoint findings that a third seed decided (records/README.md, rule 3 of issue
# 30's evidence: a rounding-level perturbation beside the seed spread): Lee et al. 2026 (arXiv:2605.09165) findings
# 4-5 and Chen et al. 2026 (arXiv:2606.04438) findings 2-4. Seed 42's seven models of
# config/sweeps/third_seed_checkpoints_cpu.py trained again with torch's plain operations (cpu_kernels=False) instead
# of the CPU fast paths, on the same machine (the 2-core EPYC) and the same training code: one rounding-level change,
# the same math in another order. 7 runs, about 75 core-minutes; then the analyses of the records' commands on
# the _plain checkpoints, copied beside seed 42's as records/<paper>/<analysis>_s42_plain.json:
#     python scaling.py sweep config/sweeps/rounding_checkpoints_cpu.py --parallel=2
import os
import runpy

name = "rounding_checkpoints_cpu"
_third = runpy.run_path(os.path.join(os.path.dirname(__file__), "third_seed_checkpoints_cpu.py"))
record, env, flops_per_second, SEED = (_third[k] for k in ("record", "env", "flops_per_second", "SEED"))


def points():
    return [dict(p, name=p["name"] + "_plain", overrides=dict(p["overrides"], cpu_kernels=False))
            for p in _third["points"]()]


# The decision rule, fixed before any of these runs: each family of third_seed_checkpoints_cpu.py's rule is tested
# again with seed 42's plain-operations model in place of its fast-path one (seeds 1337 and 7 as committed; the
# same looks and Holm). A comparison is rounding-sensitive when that changes its verdict, or moves seed 42's value by
# at least the three seeds' mean (the effect) in size. The verdicts stay those of the fast-path runs; the record
# reports each change beside the three seeds' standard deviation and says which verdicts are rounding-sensitive.
rule = dict(finding="Lee et al. findings 4-5 and Chen et al. findings 2-4 with a third seed: how far rounding alone "
                    "(CPU fast paths off) moves them",
            test="each family again with seed 42's plain-operations model; rounding-sensitive when its verdict "
                 "changes or seed 42's value moves by at least the three seeds' mean in size",
            seeds=(SEED,), margin=None)
