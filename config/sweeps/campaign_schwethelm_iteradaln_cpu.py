# The campaign (issue 46; records/plan.md), finding schwethelm-2-iteradaln of records/campaign/findings.json: on
# Schwethelm et al. 2026's iso-depth grid (arXiv:2604.21106), IterAdaLN (Chen et al. 2026, arXiv:2606.04438) raises
# the recurrence-equivalence exponent phi against the plain loop (delta phi > 0, the direction the record first
# claimed). The plan adds 7 seeds (101-107) to seeds 1337, 7, 42, 3: the plain loop r = 1, 2, 4 and IterAdaLN
# r = 1, 2, 4 at 3e11 and 1e12, config/sweeps/isodepth_probes_cpu.py's recipe unchanged (each seed's delta phi needs
# its own plain loop), about 0.8 core-hours a seed by the rows' process_s, from a worktree of this spec's commit:
#     python scaling.py sweep config/sweeps/campaign_schwethelm_iteradaln_cpu.py --at_rule_commit
# Then each new seed's own fit, as the earlier seeds' (records/schwethelm2026/delta_phi_seeds/):
#     python scaling.py fit records/schwethelm2026/campaign_schwethelm_iteradaln_cpu.jsonl --law=delta_phi \
#         --budgets='(3e11,1e12)' --restarts=200 --bootstrap=0 --designs='("iteradaln_r",)' --hold='("alpha","beta")' \
#         --seeds='(101,)' --out=records/schwethelm2026/campaign_iteradaln_s101
import os
import runpy

name = "campaign_schwethelm_iteradaln_cpu"
record = "records/schwethelm2026"
_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))
_probes = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_probes_cpu.py"))
common, env, flops_per_second, lr_for = (_grid[k] for k in ("common", "env", "flops_per_second", "lr_for"))
SEEDS = tuple(range(101, 108))  # new: no earlier run used them


def points():
    low, (extra, loops) = (3e11, 1e12), _probes["DESIGNS"]["iteradaln_r"]
    return _grid["grid"]((1, 2, 4), low, seeds=SEEDS) + _grid["grid"](loops, low, "iteradaln_r", extra, SEEDS)


# The decision rule, fixed before any of these runs (records/README.md rules 2, 4, 5, 7, 12; records/plan.md). Per
# seed, delta phi of IterAdaLN: the joint law fitted on that seed's rows with IterAdaLN's own exponents held as the
# record holds them (--hold alpha, beta), seeds 1337, 7, 42, 3 (their committed fits) and 101-107: a sequential
# design of 5 looks (the 4 of the record and this one: p x 5), two-sided t over the 11 seeds, Holm over the family
# of the six designs (the other five at their committed seeds and looks). Reproduced when Holm p < 0.05 and delta phi
# > 0, not reproduced when < 0; absent at this scale when neither and the interval lies inside +-delta
# (records/plan.md: 0.0335). Powered (plan): 80% at the upper bound of the four seeds' sd for the effect observed
# (+0.24).
rule = dict(finding="schwethelm-2-iteradaln: IterAdaLN raises phi against the plain loop on the iso-depth grid",
            test="per-seed delta phi over seeds 1337, 7, 42, 3, 101-107, 5 looks, two-sided t, Holm over the six "
                 "designs; absent by TOST inside +-delta",
            seeds=SEEDS, margin=None)
