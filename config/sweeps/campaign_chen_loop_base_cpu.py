# The campaign (issue 46; records/plan.md), Chen et al. 2026 (arXiv:2606.04438, Table 3), finding chen-1-loop-base
# of records/campaign/findings.json: the Loop Base rung improves on the Vanilla MoE at matched parameters and FLOPs
# (validation loss lower). The plan's design: a fresh set of 40 seeds (401-440; its 80%-power count at the upper 80%
# bound of the five earlier seeds' sd, 0.0342 nats, with alpha 0.05 / 5), config/sweeps/fidelity_cpu.py's two rungs
# unchanged (loopmoe_vanilla_cpu and loopmoe_loop_base_cpu, 800 steps): 80 runs, about 5.9 core-hours by the earlier
# rows' process_s, more on a slower machine. Beyond the issue's 20 core-hours: the campaign's 8th move by new rows
# (records/campaign/README.md says why this design), from a worktree of this spec's commit, resumable across
# sessions (each finished run's row is committed):
#     python scaling.py sweep config/sweeps/campaign_chen_loop_base_cpu.py --at_rule_commit
# Then each seed's difference, and the test:
#     python -m lab.fits table rows records/chen2026/campaign_chen_loop_base_cpu.jsonl --row=arch --value=val_loss \
#         --seeds=401,...,440 --reference=vanilla --out=records/chen2026/campaign_loop_base_table.json
#     python -m lab.fits family 'loop_base@5±0.0132=D401,...,D440' --out=records/chen2026/campaign_loop_base.json
import os
import runpy

name = "campaign_chen_loop_base_cpu"
record = "records/chen2026"
_fidelity = runpy.run_path(os.path.join(os.path.dirname(__file__), "fidelity_cpu.py"))
common, env, flops_per_second = (_fidelity[k] for k in ("common", "env", "flops_per_second"))
SEEDS = tuple(range(401, 441))  # fresh: no earlier run used them
RUNGS = ("vanilla", "loop_base")


def points():
    return [dict(name=f"{arch}_s{seed}", arch=arch, configs=[f"config/{_fidelity['LADDER'][arch]}.py"],
                 overrides=dict(max_iters=800, eval_interval=200, seed=seed)) for seed in SEEDS for arch in RUNGS]


# The decision rule, fixed before any of these runs (records/README.md rules 2, 4, 10 and 12; records/plan.md). Per
# seed S: d = val_loss(loop_base_sS) - val_loss(vanilla_sS), the two runs of one seed paired as records/chen2026.md
# pairs the ladder. Over the 40 fresh seeds only (one look): two-sided one-sample t-test of d against 0, its p-value
# times 5 (Holm's first step over the record's family of five rungs, the alpha the plan's power assumed; the family
# command's @5 does that arithmetic). Reproduced when that p < 0.05 and the mean d < 0 (Loop Base lower, as Table 3);
# not reproduced when < 0.05 and d > 0; absent at this scale when neither and the 90% interval of the mean lies
# inside +-0.0132 nats (delta = half the sd of Vanilla's loss over the earlier seeds, frozen in records/plan.md),
# each side of TOST at 5% after the same factor 5. Else inconclusive.
# Powered (plan): 80% at the upper bound of the earlier seeds' sd (0.0342) for an effect of delta; the five earlier
# seeds' mean d was +0.0195 (the other sign).
rule = dict(finding="chen-1-loop-base: Loop Base below Vanilla MoE in validation loss (Chen et al. Table 3)",
            test="one-sample two-sided t over the 40 fresh seeds of loop_base - vanilla val_loss, p x 5 (Holm's "
                 "first step over the ladder's five rungs), one look; absent at this scale by TOST inside +-0.0132",
            seeds=SEEDS, margin=0.0132)
