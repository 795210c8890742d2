# Jeddi et al. 2026 (arXiv:2602.11451, §4.3, Fig. 3-4) on the paper's own comparison: LoopFormer's representation
# keeps moving across its loop steps, while early-exit-trained loops "remain flat ... and high CKA". The record's
# earlier reading compared LoopFormer with the *plain* loop; the paper's baselines are trained for early exit. Here
# the baseline is Base-Loop-EE-Cons (the plain loop with the early-exit consistency objective: elastic="early_exit",
# loop_cond="none"), trained exactly as LoopFormer (config/loopformer_cpu.py, 3,200 steps x 2,048 tokens, where
# Table 1's premise holds: records/jeddi2026.md), three seeds. About 29 minutes per LoopFormer run and about 19 per
# early-exit loop on one core (the fourth round of loopformer_pilot_cpu.py), 2.4 core-hours for the six.
#     python scaling.py sweep config/sweeps/representation_cpu.py --parallel=2
#     D=out/sweeps/representation_cpu; for s in 7 1337 42; do python analyze.py representation \
#         --ckpt=$D/loopformer_3200_s$s,$D/ee_loop_3200_s$s --out_dir=out/repr_s$s; done
#     python fits.py representation out/repr_s{7,1337,42}/representation.json --model=loopformer --reference=ee_loop
name = "representation_cpu"
record = "records/jeddi2026"
common = dict(data_source="offline", sample_tokens=0, max_iters=3200, eval_interval=800)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10
SEEDS = (7, 1337, 42)
# The decision rule, fixed before any of these runs (records/README.md's standard): per metric, how far it moves
# across the loop steps (1 - CKA between the first and last step; the range, max - min over the steps, of anisotropy,
# curvature and normalised prompt entropy: fits.representation_evolution), LoopFormer minus the early-exit loop at
# each seed; a two-sided paired t-test over the three seeds, Holm over the four metrics. Reproduced for a metric
# when its Holm-adjusted p < 0.05 with a positive mean (LoopFormer moves more); not reproduced when p < 0.05 with a
# negative mean; else inconclusive. The finding is reproduced when CKA and at least one other metric are. The
# direction of each curve (the paper: curvature and entropy rise, alignment increases, then taper) is reported, not
# tested.
rule = dict(finding="Jeddi et al. Fig. 3-4: LoopFormer keeps evolving across loop steps, an early-exit loop stays flat",
            test="python fits.py representation <the three seeds' analyze.py representation JSONs> --model=loopformer "
                 "--reference=ee_loop: paired t over seeds per metric, Holm over the 4; reproduced when CKA and one "
                 "more metric pass with a positive mean",
            seeds=SEEDS, margin=None)
ARMS = {"loopformer_3200": {}, "ee_loop_3200": dict(loop_cond="none", elastic="early_exit")}


def points():
    return [dict(name=f"{arm}_s{seed}", arch=arm, configs=["config/loopformer_cpu.py"], overrides=dict(over, seed=seed))
            for seed in SEEDS for arm, over in ARMS.items()]
