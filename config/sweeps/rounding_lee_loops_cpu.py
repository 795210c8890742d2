# How far Lee et al. 2026's (arXiv:2605.09165, Table 7) finding 3, more loops lose less under early exit, moves under
# a rounding-level perturbation (the evidence standard, records/README.md; as config/sweeps/rounding_lee_cpu.py does
# for finding 2): Looped-MoE 8x2, 4x4 and 2x8 at seed 1337, config/sweeps/early_exit_cpu.py's recipe (d=128, 400
# steps of 4,096 tokens), each trained twice by the same code: with the CPU fast paths (cpu_kernels=True, the
# default) and with torch's plain operations (cpu_kernels=False), the same math in another order. 6 runs, about 80
# core-minutes; then one exit study per variant and the two readings of finding 3:
#     python scaling.py sweep config/sweeps/rounding_lee_loops_cpu.py --parallel=2
#     D=out/sweeps/rounding_lee_loops_cpu
#     python early_exit.py --ckpt=$D/looped_moe8x2_fast_d128,$D/looped_moe4x4_fast_d128,$D/looped_moe2x8_fast_d128 --names=8x2@400,4x4,2x8 --out_dir=out/rllf
#     python early_exit.py --ckpt=$D/looped_moe8x2_plain_d128,$D/looped_moe4x4_plain_d128,$D/looped_moe2x8_plain_d128 --names=8x2@400,4x4,2x8 --out_dir=out/rllp
import os
import runpy

name = "rounding_lee_loops_cpu"
record = "records/lee2026"
env = dict(OMP_NUM_THREADS="1")
_ee = runpy.run_path(os.path.join(os.path.dirname(__file__), "early_exit_cpu.py"))
flops_per_second = _ee["flops_per_second"]
common = _ee["common"]
widths = [128]
seeds = [None]  # train.py's default 1337, as the early-exit table's first seed
archs = {f"{arch}_{how}": dict(configs=_ee["archs"][arch]["configs"],
                               overrides=dict(_ee["archs"][arch]["overrides"], cpu_kernels=on))
         for arch in ("looped_moe8x2", "looped_moe4x4", "looped_moe2x8")
         for how, on in (("fast", True), ("plain", False))}
# The decision rule, fixed before any of these runs: finding 3's comparisons at seed 1337 are computed from the fast
# and from the plain runs, each with the measure its verdict reads: the excess relative penalty over 8x2 at 30% of
# the depth saved (4x4 and 2x8 against 8x2, fits.py exits --measure=relative --saved=0.30, in percentage points) and
# the absolute differences ln ppl at each share saved (4x4 < 8x2, 2x8 < 8x2, 2x8 < 4x4, fits.py exits). A comparison
# is rounding-sensitive when its plain value differs from its fast value by more than half its size or in sign. The
# record reports each rounding difference beside the three-seed standard error of the same comparison
# (records/lee2026/early_exit_loops_relative.json and early_exit_loops_absolute.json) and says which verdicts rest on
# a difference smaller than twice it.
rule = dict(finding="Lee et al. Table 7, finding 3 (more loops lose less): how far rounding alone moves it",
            test="finding 3's comparisons (relative excess over 8x2 at 30% saved; absolute ln ppl differences per "
                 "share saved), fast vs plain runs; rounding-sensitive when they differ by more than half its size or "
                 "in sign; reported beside the three-seed standard error",
            seeds=(1337,), margin=None)
