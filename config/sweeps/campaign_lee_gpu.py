# The campaign's GPU design (issue 46; records/plan.md, records/campaign/README.md): Lee et al. 2026
# (arXiv:2605.09165) findings 2, 4 and 5 on checkpoints (lee-2-exit, lee-4-looped-drop, lee-4-earlier,
# lee-5-routing of records/campaign/findings.json). The four models of config/sweeps/early_exit_cpu.py (Base 16,
# MoE 16, Looped 8x2, Looped-MoE 8x2 at width 128, 400 steps of 4,096 tokens), each seed's four trained at once on
# one GPU in bf16, then the records' analyses of that seed's checkpoints on the same machine (the checkpoints do not
# outlast a lent machine). 11 fresh seeds (the plan's count for lee-4-looped-drop; 44 runs). One batch:
#     bash .ci/gpu-campaign OUT        # rows, the analyses (a tar.gz) and what the batch measured, into OUT
import os
import runpy
import sys

name = "campaign_lee_gpu"
record = "records/lee2026"
_ee = runpy.run_path(os.path.join(os.path.dirname(__file__), "early_exit_cpu.py"))
MODELS = ("base16", "moe16", "looped8x2", "looped_moe8x2")
NAMES = ("Base", "MoE", "Looped", "Looped-MoE")  # early_exit.py's names, as the records' tables print them
SEEDS = tuple(range(201, 212))  # fresh: no earlier run used them
common = dict(_ee["common"], device="cuda", dtype="bfloat16")
flops_per_second = 2e12  # a first guess for one run of four sharing an H100; the first batch measures it


def points():
    return [dict(name=f"{arch}_d128_s{seed}", arch=arch, configs=_ee["archs"][arch]["configs"],
                 overrides=dict(_ee["archs"][arch]["overrides"], n_embd=128, seed=seed))
            for seed in SEEDS for arch in MODELS]


def analyses(seed, run_dir, out):
    """The records' analyses of one seed's four checkpoints (records/lee2026.md's commands), written under out."""
    ckpts = ",".join(run_dir(f"{arch}_d128_s{seed}") for arch in MODELS)
    return [[sys.executable, "analyze.py", "jsd", f"--ckpt={ckpts}", f"--out_dir={out}/jsd_s{seed}"],
            [sys.executable, "analyze.py", "routing", f"--ckpt={run_dir(f'looped_moe8x2_d128_s{seed}')}",
             f"--out_dir={out}/routing_s{seed}"],
            [sys.executable, "early_exit.py", f"--ckpt={ckpts}", f"--names={','.join(NAMES)}",
             f"--out_dir={out}/early_exit_s{seed}"]]


# The decision rule, fixed before any of these runs. GPU rows (bf16 on CUDA) are judged on their own: never paired
# with the CPU rows of seeds 1337 / 7 / 42, and for these four findings this design decides (the plan runs no CPU
# design for them within its budget). Over the fresh seeds whose analyses came back (one look per batch that adds
# seeds: each verdict written after a batch counts, rule 5): the comparisons of records/campaign/findings.json for
# lee-2-exit (16, Holm over 16), lee-4-looped-drop and lee-4-earlier (Holm over their family of 4) and
# lee-5-routing (8 layers, Holm over 8), each seed's number read from its analysis JSON as the records read seeds
# 1337 / 7 / 42 (python fits.py family / exits); reproduced when Holm p < 0.05 with the paper's sign, not reproduced
# with the other; absent at this scale when neither and the TOST interval lies inside +-delta of records/plan.md.
rule = dict(finding="lee-2-exit, lee-4-looped-drop, lee-4-earlier, lee-5-routing on GPU checkpoints (bf16)",
            test="t over the fresh GPU seeds per comparison, Holm within each finding's family, looks counted per "
                 "batch; absent by TOST inside +-delta (records/plan.md)",
            seeds=SEEDS, margin=None)
