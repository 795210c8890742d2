# A third training seed (42) for the checkpoint findings that two seeds left undecided under records/README.md's
# standard: Lee et al. 2026 (arXiv:2605.09165) findings 4-5, the logit-lens JSD and the routing between loop passes
# (config/sweeps/early_exit_cpu.py's Base 16, MoE 16, Looped 8x2 and Looped-MoE 8x2, whose seed-42 checkpoints are
# not kept), and Chen et al. 2026 (arXiv:2606.04438) findings 2-4, routing dynamics, IterAdaLN's gate and unique
# experts (config/sweeps/analysis_cpu.py's LoopMoE, IterAdaLN rung and LoopMoE at K=4). Each model trained as its
# sweep trains it, at seed 42, from one commit: 7 runs, about 80 core-minutes by the earlier seeds' time. Then the
# analyses of the records' commands on the seed-42 checkpoints, copied into the records:
#     python scaling.py sweep config/sweeps/third_seed_checkpoints_cpu.py --parallel=2
#     D=out/sweeps/third_seed_checkpoints_cpu
#     python analyze.py jsd --ckpt=$D/base16_d128_s42,$D/moe16_d128_s42,$D/looped8x2_d128_s42,$D/looped_moe8x2_d128_s42 --out_dir=out/jsd_s42
#     python analyze.py routing --ckpt=$D/looped_moe8x2_d128_s42 --out_dir=out/routing_s42
#     python analyze.py routing_dynamics --ckpt=$D/loopmoe_k4_s42 --out_dir=out/routing_dynamics_s42
#     python analyze.py iteradaln --ckpt=$D/iteradaln_s42 --out_dir=out/iteradaln_s42
#     python analyze.py iteradaln --ckpt=$D/loopmoe_s42 --out_dir=out/iteradaln_loopmoe_s42
#     python analyze.py active_params --ckpt=$D/loopmoe_k4_s42 --out_dir=out/active_params_s42
#     (each JSON copied to records/lee2026/{jsd,routing}_s42.json and records/chen2026/{routing_dynamics,iteradaln,
#     iteradaln_loopmoe,active_params}_s42.json)
import os
import runpy

name = "third_seed_checkpoints_cpu"
_here = os.path.dirname(__file__)
_lee = runpy.run_path(os.path.join(_here, "early_exit_cpu.py"))
_chen = runpy.run_path(os.path.join(_here, "analysis_cpu.py"))
LEE, CHEN = ("base16", "moe16", "looped8x2", "looped_moe8x2"), ("loopmoe", "iteradaln", "loopmoe_k4")
record = {**{arch: "records/lee2026" for arch in LEE}, **{arch: "records/chen2026" for arch in CHEN}}
env = dict(OMP_NUM_THREADS="1")
flops_per_second = _lee["flops_per_second"]
SEED = 42


def points():
    lee = [dict(name=f"{arch}_d128_s{SEED}", arch=arch, configs=_lee["archs"][arch]["configs"],
                overrides=dict(_lee["common"], **_lee["archs"][arch]["overrides"], n_embd=128, seed=SEED))
           for arch in LEE]
    chen = [dict(name=f"{arch}_s{SEED}", arch=arch, configs=_chen["archs"][arch]["configs"],
                 overrides=dict(_chen["common"], **_chen["archs"][arch]["overrides"], seed=SEED)) for arch in CHEN]
    return lee + chen


# The decision rule, fixed before any of these runs. Each finding's comparisons are one family of
# `python fits.py family` over the three seeds 1337 / 7 / 42, each seed's number read from its analysis JSON (the
# commands stand in the records): a two-sided t-test over the seeds, each comparison a sequential design of 3 looks
# (verdicts were written at two seeds and possibly at one: counted as two earlier looks either way), its p times 3
# into Holm over the finding's family; a comparison is reproduced when its Holm-adjusted p < 0.05 with the paper's
# sign, not reproduced when < 0.05 with the other, else inconclusive. The families (paper's sign in brackets):
# Lee et al. finding 4 (m = 4): JSD at depth 8 of 16, Looped 8x2 minus Base 16 and Looped-MoE 8x2 minus MoE 16 (< 0);
#   the drop at the first pass's last layer minus the mean drop per layer elsewhere, Looped and Looped-MoE (> 0).
# Lee et al. finding 5 (m = 8): per loop layer of Looped-MoE 8x2, the share of tokens whose two passes pick the
#   identical top-2 pair, minus one half (< 0: mostly partial or disjoint).
# Chen et al. finding 2 (m = 3; LoopMoE K=4, each seed's mean over the two loop layers): entry, cosine(0,1) minus
#   cosine(1,2) (< 0); recurrent core, Jaccard(1,2) minus Jaccard(2,3) (> 0); exit, the change from pair 1-2 to
#   pair 2-3 of the cosine minus that of the Jaccard (> 0: the state holds while the expert set moves).
# Chen et al. finding 3 (m = 6): the per-token range of the attention gate at iteration 1 minus iteration 0, IterAdaLN
#   rung and LoopMoE, loop layers 1 and 2 (> 0); the mean gate of loop layer 2 at its last iteration minus the
#   paper's 1.61, both models (a difference from the paper's number: not reproduced when p < 0.05).
# Chen et al. finding 4 (m = 3; K=4, top-6 of 68): unique experts after 4 iterations minus 24 (linear growth) and
#   minus 21.006 (independent draws, 68 (1 - (62/68)^4)) (< 0); rho at K=4 minus rho at K=1 (< 0).
rule = dict(finding="Lee et al. findings 4-5 (JSD, routing between passes) and Chen et al. findings 2-4 (routing "
                    "phases, IterAdaLN's gate, unique experts): a third seed for checkpoint findings two seeds leave "
                    "undecided",
            test="fits.py family over seeds 1337 / 7 / 42 per finding, each comparison at 3 looks (p x 3 into "
                 "Holm over the finding's family); reproduced when Holm p < 0.05 with the paper's sign",
            seeds=(SEED,), margin=None)
