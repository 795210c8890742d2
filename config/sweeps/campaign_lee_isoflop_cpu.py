# The campaign (issue 46; records/plan.md), Lee et al. 2026 (arXiv:2605.09165, §4, Fig. 1), finding
# lee-1-alpha-order of records/campaign/findings.json: sparse layers make looped models scale (alpha of Looped-MoE
# above Looped's, MoE's above Looped-MoE's). The plan adds 2 seeds (101, 102) to seeds 1337 and 7: Looped, MoE and
# Looped-MoE on config/sweeps/isoflop_cpu.py's grid at 3e11, 1e12 and 3e12 (75 runs, about 4.8 core-hours by the
# rows' process_s of the seeds that ran them all), from a worktree of this spec's commit:
#     python scaling.py sweep config/sweeps/campaign_lee_isoflop_cpu.py --at_rule_commit
# Then each new seed's own fit, as the earlier seeds' (records/lee2026.md):
#     python scaling.py fit records/lee2026/campaign_lee_isoflop_cpu.jsonl --law=isoflop --seeds='(101,)' --out=records/lee2026/campaign_isoflop_s101
import os
import runpy

name = "campaign_lee_isoflop_cpu"
record = "records/lee2026"
_iso = runpy.run_path(os.path.join(os.path.dirname(__file__), "isoflop_cpu.py"))
archs = {arch: _iso["archs"][arch] for arch in ("looped", "moe", "looped_moe")}
budgets = [3e11, 1e12, 3e12]
widths = {C: _iso["widths"][C] for C in budgets}
seeds = [101, 102]  # new: no earlier run used them
common, env, flops_per_second = (_iso[k] for k in ("common", "env", "flops_per_second"))

# The decision rule, fixed before any of these runs (records/README.md rules 2, 4, 5, 7, 12; records/plan.md). Per
# seed S, alpha of each architecture from that seed's rows alone (fit --law=isoflop --seeds='(S,)'); per seed the
# differences Looped-MoE - Looped and MoE - Looped-MoE (the paper's sign: both > 0), seeds 1337, 7 (their committed
# fits) and 101, 102: a sequential design, 2 looks (each p x 2), two-sided t over the 4 seeds, Holm over the family
# of 3 with Base - Looped (its seeds 1337 / 7 / 42 unchanged, 1 look). Reproduced when Holm p < 0.05 with the paper's
# sign, not reproduced with the other; absent at this scale when neither and the 90% interval lies inside +-delta
# (records/plan.md: 0.0057 and 0.0043). Powered (plan): 80% at the upper bound of the two seeds' sd for the effects
# observed (+0.044, +0.039).
rule = dict(finding="lee-1-alpha-order: sparse layers make looped models scale (Lee et al. Fig. 1)",
            test="per-seed alpha differences over seeds 1337, 7, 101, 102, 2 looks, two-sided t, Holm over 3 with "
                 "Base - Looped; absent by TOST inside +-delta",
            seeds=tuple(seeds), margin=None)
