# Pilots for Jeddi et al.'s elastic depth at CPU scale (LoopFormer, arXiv:2602.11451): our LoopFormer 2x4 trains far
# worse than its plain-loop twin at full depth (config/sweeps/fidelity_cpu.py: validation loss 2.68 / 2.41 vs
# 1.84 / 1.82), which the paper's Table 1 contradicts. Which part costs the loss? Each arm changes one thing of
# config/loopformer_cpu.py at seed 7 and 800 steps (as in the fidelity sweep): the t/dt conditioning alone
# (lambda_1 = lambda_2 = 0: the objective is the plain loop's), the full objective at a third of the LR, and the
# released code's N(0, 0.02) init of the modulators instead of adaLN-zero. About 25 minutes of one core per round;
# records/jeddi2026.md compares them with the fidelity sweep's seed-7 runs.
#     python scaling.py sweep config/sweeps/loopformer_pilot_cpu.py
name = "loopformer_pilot_cpu"
record = "records/jeddi2026"
figures = {"arms": ["--law=compare", "--archs=('conditioning_only','lr1e-3','cond_init_normal',"
                    "'conditioning_only_condlr0.1','plain_loop_lr1e-3','plain_loop_M1_lr1e-3','loopformer_lr1e-3',"
                    "'plain_loop_1N','plain_loop_3200','plain_loop_M1_3200','loopformer_3200')"],
           "table1_3200": ["--law=compare", "--archs=('plain_loop_3200','plain_loop_M1_3200','plain_loop_M2_3200',"
                           "'plain_loop_M3_3200','loopformer_3200')", "--reference=plain_loop_3200"]}
common = dict(data_source="offline", sample_tokens=0, max_iters=800, eval_interval=200, seed=7)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10


# Second round (after the first found the conditioning itself at fault: its gates had grown to |alpha| ~ 10): the
# conditioning-only arm with a tenth of the LR on the conditioning (cond_lr_scale=0.1, now the preset's); and, since
# the plain loop trained at one pass beat the one trained at four at this LR (fidelity sweep: 1.72 vs 1.84), the
# plain loop at 1 and 4 passes and LoopFormer at a third of the LR (1e-3), where depth may help as the paper assumes.
# Third round: at both LRs the plain loop got worse with passes, so Table 1's premise (more loops, lower loss) fails
# at this recipe. Does it come with Wang et al.'s 1/N residual scaling, or with four times the training (3,200 steps)?
# (It came with the training: 1.338 at 4 passes vs 1.354 at one.) Then LoopFormer at 3,200 steps.
# Fourth round: Table 1 itself at 3,200 steps, where the premise holds: LoopFormer and the plain loop trained at each
# budget M = 1..4, seeds 7 and 1337 (about two core-hours for the seven runs the third round had not made);
# early_exit.py --mode=elastic scores each checkpoint at each budget (records/jeddi2026.md).
# Seed 42 of the fourth round (the full-depth gap to the twin, 2-4%, lay within twice the seed spread of a cell):
#     python scaling.py sweep config/sweeps/loopformer_pilot_cpu.py --parallel=2 --only='_3200_s42$'
PAPER_LR = dict(cond_lr_scale=1.0)  # the first round ran before the preset's cond_lr_scale=0.1
PLAIN = dict(loop_cond="none", elastic="none")


def points():
    cond_only = dict(shortcut_weight=0.0, consistency_weight=0.0)
    arms = {"conditioning_only": dict(cond_only, **PAPER_LR), "lr1e-3": dict(lr=1e-3, **PAPER_LR),
            "cond_init_normal": dict(cond_init="normal", **PAPER_LR),
            "conditioning_only_condlr0.1": cond_only, "plain_loop_lr1e-3": dict(PLAIN, lr=1e-3),
            "plain_loop_M1_lr1e-3": dict(PLAIN, n_loop=1, lr=1e-3), "loopformer_lr1e-3": dict(lr=1e-3),
            "plain_loop_1N": dict(PLAIN, residual_scaling="linear"),
            "plain_loop_3200": dict(PLAIN, max_iters=3200, eval_interval=800),
            **{f"plain_loop_M{m}_3200": dict(PLAIN, n_loop=m, max_iters=3200, eval_interval=800) for m in (1, 2, 3)},
            "loopformer_3200": dict(max_iters=3200, eval_interval=800)}
    return [dict(name=f"{arm}_s{seed}", arch=arm, configs=["config/loopformer_cpu.py"], overrides=dict(over, seed=seed))
            for arm, over in arms.items() for seed in ((7, 1337, 42) if arm.endswith("_3200") else (7,))]
