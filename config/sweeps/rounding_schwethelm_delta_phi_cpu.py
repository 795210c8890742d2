# How far rounding alone moves the per-seed delta phi of Schwethelm et al. 2026 (arXiv:2604.21106, §5: what one
# recurrence is worth under a design, against the plain loop; records/schwethelm2026.md, finding 2). Seed 1337's
# runs behind the record's per-seed fits (the plain loop r = 1, 2, 4 and five designs' r = 2, 4, IterAdaLN's own
# r = 1, at 3e11 and 1e12 FLOPs: config/sweeps/isodepth_cpu.py's grid, widths and recipe, isodepth_probes_cpu.py's
# designs), trained again with torch's plain operations (cpu_kernels=False) on this machine; the committed rows ran
# with the CPU fast paths on another (two rounding-level changes, measured together). Looped-MoE is left out: its
# own law is not pinned at two budgets (its two seeds' delta phi already differ in sign), and it would add about
# 45 core-minutes. 126 runs, about 2 core-hours by the rows' process_s; then one per-seed fit per design, as the
# record's (20 s each):
#     python scaling.py sweep config/sweeps/rounding_schwethelm_delta_phi_cpu.py --parallel=2
#     python scaling.py fit records/schwethelm2026/rounding_schwethelm_delta_phi_cpu.jsonl --law=delta_phi \
#         --budgets='(3e11,1e12)' --restarts=200 --bootstrap=0 --designs='("tdt_r",)' \
#         --hold='("a","alpha","b","beta","e")' --seeds='(1337,)' --out=records/schwethelm2026/rounding_delta_phi/tdt_r
#     (trunc_r, hc_r, rscale_r alike; iteradaln_r with --hold='("alpha","beta")', as the record fits it)
import os
import runpy

name = "rounding_schwethelm_delta_phi_cpu"
record = "records/schwethelm2026"
_here = os.path.dirname(__file__)
_grid = runpy.run_path(os.path.join(_here, "isodepth_cpu.py"))
_probes = runpy.run_path(os.path.join(_here, "isodepth_probes_cpu.py"))
common, env, flops_per_second, lr_for = (_grid[k] for k in ("common", "env", "flops_per_second", "lr_for"))
DESIGNS = ("trunc_r", "hc_r", "tdt_r", "rscale_r", "iteradaln_r")


def points():
    low, seed_1337 = (3e11, 1e12), (None,)
    plain = _grid["grid"]((1, 2, 4), low, "r", None, seed_1337)
    designs = [p for prefix in DESIGNS
               for p in _grid["grid"](_probes["DESIGNS"][prefix][1], low, prefix, _probes["DESIGNS"][prefix][0],
                                      seed_1337)]
    return [dict(p, overrides=dict(p["overrides"], cpu_kernels=False)) for p in plain + designs]


# The decision rule, fixed before any of these runs. The measure is the record's per-seed delta phi (each design and
# the plain loop fitted on seed 1337's runs alone, the law held as the record holds it; records/schwethelm2026/
# delta_phi_seeds/<design>_s1337.json): trunc_r +0.0036, hc_r +0.1738, tdt_r -0.0991, rscale_r -0.1710,
# iteradaln_r +0.3008 in the rows. Per design, the change from the rows' value to the plain runs' value is reported
# beside the standard deviation of its per-seed delta phi over the seeds it ran (delta_phi_per_seed.json); a design
# is rounding-sensitive when the change is at least as large as its seeds' mean delta phi (the effect: trunc_r
# -0.101, hc_r +0.018, tdt_r -0.127, rscale_r -0.256, iteradaln_r +0.244). The plain loop's own phi on these two
# budgets (phi_reference) is reported with its change too. The verdicts stay judged on the rows (all inconclusive
# by the standard); where a design is rounding-sensitive, the record says so beside it.
rule = dict(finding="Schwethelm et al. §5, delta phi of each design against the plain loop: how far rounding alone "
                    "moves seed 1337's per-seed value",
            test="per-seed delta phi at seed 1337, rows (fast paths) vs plain operations; rounding-sensitive when the "
                 "change is at least its seeds' mean delta phi in size (trunc_r 0.101, hc_r 0.018, tdt_r 0.127, "
                 "rscale_r 0.256, iteradaln_r 0.244)",
            seeds=(None,), margin=None)
