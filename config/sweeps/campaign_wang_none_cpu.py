# The campaign (issue 46; records/plan.md), Wang et al. 2026 (arXiv:2606.18524, §5.2-5.3, Fig. 5), finding
# wang-1-none-moves of records/campaign/findings.json: without residual scaling the optimal LR moves with the loop
# count N. A fresh set of 11 training seeds (the plan's 80%-power count at the upper bound of the two earlier seeds'
# sd), config/sweeps/lr_transfer_cpu.py's recipe unchanged: rule none, L=2, N = 1, 2, 4, on the shared grid
# 1e-3 ... 8e-3 in steps of sqrt 2 (7 LRs): 231 runs, about 3.4 core-hours by the rows' process_s. Run from a snapshot
# of this spec's commit, one core, resumable across sessions (each finished run's row is committed):
#     python scaling.py sweep config/sweeps/campaign_wang_none_cpu.py --at_rule_commit
# Then each seed's shifts, and the family:
#     python scaling.py fit records/wang2026/campaign_wang_none_cpu.jsonl --law=lr --panel=arch \
#         --group='("n_layer","n_loop")' --max_loss=4 --max_lr=0.008 --out=records/wang2026/campaign_wang_none_cpu_lr
#     python -m lab.campaign judge wang-1-none-moves
import os
import runpy

name = "campaign_wang_none_cpu"
record = "records/wang2026"
_lr = runpy.run_path(os.path.join(os.path.dirname(__file__), "lr_transfer_cpu.py"))
common, env, flops_per_second = (_lr[k] for k in ("common", "env", "flops_per_second"))
SEEDS = tuple(range(101, 112))  # fresh: no earlier run used them
SHARED = [lr for lr in _lr["LRS"] if lr <= 0.008 * (1 + 1e-9)]


def points():
    return [p for p in _lr["points"](SHARED, SEEDS) if p["arch"] == "none" and p["overrides"]["seed"] in SEEDS]


# The decision rule, fixed before any of these runs (records/README.md, rules 2, 4, 10 and 12; records/plan.md).
# Per seed S: shift_log2 of none at N=2 and at N=4, log2 of the optimal LR at N over that at N=1 (fit --law=lr
# --max_lr=0.008, the parabola in log LR through each seed's own curve). Over the 11 fresh seeds only (one look):
# two-sided one-sample t-test of each shift against 0, Holm over the two. Reproduced when a shift's Holm p < 0.05
# and it is negative (the optimum moves down, as the paper's Fig. 5 shows), not reproduced when < 0.05 and
# positive; absent at this scale when neither and the 90% interval lies inside +-0.117 octave (delta = half the sd
# over seeds 1337 / 7 of none's log2 optimal LR at N=1, frozen in records/plan.md), each side of TOST at 5%, Holm
# over the two TOST p-values. The finding moves when both comparisons reach the same verdict; else inconclusive.
# Powered (plan): 80% at the upper 80% bound of the earlier seeds' sd for the effects observed (-0.80, -0.94 octave).
rule = dict(finding="wang-1-none-moves: without residual scaling the optimal LR moves with N (Wang et al. Fig. 5)",
            test="one-sample two-sided t over the 11 fresh seeds of shift_log2 at N=2 and N=4, Holm over 2, one look; "
                 "absent at this scale by TOST inside +-0.117 octave",
            seeds=SEEDS, margin=0.117)
