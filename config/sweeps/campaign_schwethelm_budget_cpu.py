# The campaign (issue 46; records/plan.md), Schwethelm et al. 2026 (arXiv:2604.21106), finding
# schwethelm-1-phi-budget of records/campaign/findings.json: each seed's phi on the upper budgets (3e12, 1e13)
# below its phi on the lower ones (3e11, 1e12). The plan adds 2 seeds (101, 102) to seeds 1337 and 7: r = 1, 2, 4
# at all four budgets of config/sweeps/isodepth_cpu.py (57 runs, about 8.1 core-hours), from a worktree of this
# spec's commit:
#     python scaling.py sweep config/sweeps/campaign_schwethelm_budget_cpu.py --at_rule_commit
# Then each new seed's joint fits of the two halves, as seeds 1337 and 7 (records/schwethelm2026.md).
import os
import runpy

name = "campaign_schwethelm_budget_cpu"
record = "records/schwethelm2026"
_iso = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))
common, env, flops_per_second, lr_for = (_iso[k] for k in ("common", "env", "flops_per_second", "lr_for"))
SEEDS = (101, 102)  # new: no earlier run used them


def points():
    return _iso["grid"](seeds=SEEDS)


# The decision rule, fixed before any of these runs (records/README.md rules 2, 5, 7, 12; records/plan.md). Per
# seed, phi of the joint law fitted on that seed's rows at 3e12-1e13 minus phi fitted at 3e11-1e12 (the paper's
# sign: < 0 as our two seeds drift); seeds 1337, 7 (their committed fits) and 101, 102: a sequential design,
# 3 looks (the two earlier looks of the list, and this one: p x 3), two-sided t over the 4 seeds, a family of one.
# Reproduced when p x 3 < 0.05 and negative, not reproduced when positive; absent at this scale when neither and the
# interval lies inside +-delta (records/plan.md: 0.0564). Powered (plan): 80% at the upper bound for -0.32.
rule = dict(finding="schwethelm-1-phi-budget: phi falls from the lower to the upper budgets",
            test="per-seed phi(upper) - phi(lower) over seeds 1337, 7, 101, 102, 3 looks, two-sided t; absent by TOST "
                 "inside +-delta",
            seeds=SEEDS, margin=None)
