# How far Lee et al. 2026's (arXiv:2605.09165, Table 7) early-exit comparison moves under a rounding-level
# perturbation (the evidence standard, records/README.md; as config/sweeps/rounding_cpu.py does for Chen et al.'s
# ladder): Looped 8x2 against Base 16 at seed 1337, config/sweeps/early_exit_cpu.py's recipe (d=128, 400 steps of
# 4,096 tokens), each model trained twice by the same code: with the CPU fast paths (cpu_kernels=True, the default)
# and with torch's plain operations (cpu_kernels=False), the same math in another order. 4 runs, about 50
# core-minutes; then one exit study per variant:
#     python scaling.py sweep config/sweeps/rounding_lee_cpu.py --parallel=2
#     D=out/sweeps/rounding_lee_cpu
#     python early_exit.py --ckpt=$D/base16_fast_d128,$D/looped8x2_fast_d128 --names=Base,Looped --out_dir=out/rlf
#     python early_exit.py --ckpt=$D/base16_plain_d128,$D/looped8x2_plain_d128 --names=Base,Looped --out_dir=out/rlp
import os
import runpy

name = "rounding_lee_cpu"
record = "records/lee2026"
env = dict(OMP_NUM_THREADS="1")
_ee = runpy.run_path(os.path.join(os.path.dirname(__file__), "early_exit_cpu.py"))
flops_per_second = _ee["flops_per_second"]
common = _ee["common"]
widths = [128]
seeds = [None]  # train.py's default 1337, as the early-exit table's first seed
archs = {f"{arch}_{how}": dict(configs=_ee["archs"][arch]["configs"],
                               overrides=dict(_ee["archs"][arch]["overrides"], cpu_kernels=on))
         for arch in ("base16", "looped8x2") for how, on in (("fast", True), ("plain", False))}
# The decision rule, fixed before any of these runs: at each share of the depth saved (5, 10, 20, 30%), the
# difference ln ppl(Looped) - ln ppl(Base) at seed 1337 (the measure of fits.py exits) is computed from the fast and
# from the plain runs; a difference is rounding-sensitive when the two differ by more than half its size or in sign.
# The record reports the rounding difference beside the three-seed spread of the same differences
# (records/lee2026/early_exit_absolute.json) and says which verdicts rest on a difference smaller than twice it.
rule = dict(finding="Lee et al. Table 7, Looped < Base at equal depth saved: how far rounding alone moves it",
            test="ln ppl(Looped) - ln ppl(Base) per share saved, fast vs plain runs; rounding-sensitive when they "
                 "differ by more than half its size or in sign; reported beside the three-seed spread",
            seeds=(1337,), margin=None)
