# How far rounding alone moves the sparse-layer comparisons of Lee et al. 2026's (arXiv:2605.09165, §4) isoFLOP
# exponents: config/sweeps/rounding_lee_isoflop_cpu.py's measurement (Base and Looped, done) for MoE and Looped-MoE.
# Both at seed 1337 on config/sweeps/isoflop_cpu.py's grid (3e11, 1e12, 3e12 FLOPs, five widths each, its recipe and
# LRs), trained again with torch's plain operations (cpu_kernels=False) on this machine; the committed rows ran with
# the CPU fast paths on another. 30 runs, about 1.8 core-hours by the rows' process_s; then one fit of the new rows:
#     python scaling.py sweep config/sweeps/rounding_lee_isoflop_sparse_cpu.py --parallel=2
#     python scaling.py fit records/lee2026/rounding_lee_isoflop_sparse_cpu.jsonl --law=isoflop --bootstrap=0 \
#         --out=records/lee2026/rounding_lee_isoflop_sparse_cpu
import os
import runpy

name = "rounding_lee_isoflop_sparse_cpu"
record = "records/lee2026"
env = dict(OMP_NUM_THREADS="1")
_iso = runpy.run_path(os.path.join(os.path.dirname(__file__), "isoflop_cpu.py"))
flops_per_second = _iso["flops_per_second"]
common = _iso["common"]
archs = {f"{arch}_plain": dict(configs=_iso["archs"][arch]["configs"],
                               overrides=dict(_iso["archs"][arch]["overrides"], cpu_kernels=False))
         for arch in ("moe", "looped_moe")}
budgets = [3e11, 1e12, 3e12]
widths = {C: _iso["widths"][C] for C in budgets}
seeds = [1337]
# The decision rule, fixed before any of these runs. The measure is the record's: each architecture's alpha from
# `scaling.py fit --law=isoflop` over its 15 runs, and the two differences of finding 1's "sparse layers make looped
# models scale" (records/lee2026/alpha_order.json): alpha(Looped-MoE) - alpha(Looped), +0.0416 at seed 1337 in the
# rows, and alpha(MoE) - alpha(Looped-MoE), +0.0377. From the plain runs each difference is taken with the plain
# runs' alphas (Looped's from records/lee2026/rounding_lee_isoflop_cpu.json). A difference is rounding-sensitive when
# it moves from the rows' by as much as its two seeds' mean difference (+0.0436 and +0.0391) or changes sign; each
# alpha's change is reported beside its two seeds' values. The verdict stays judged on the rows; where a comparison
# is rounding-sensitive, the record says so beside it.
rule = dict(finding="Lee et al. §4, sparse layers make looped models scale (alpha: MoE > Looped-MoE > Looped): how "
                    "far rounding alone moves it",
            test="alpha(Looped-MoE) - alpha(Looped) and alpha(MoE) - alpha(Looped-MoE) at seed 1337, rows (fast paths) "
                 "vs plain operations; rounding-sensitive when a difference moves by its two seeds' mean (+0.0436, "
                 "+0.0391) or flips sign",
            seeds=(1337,), margin=None)
