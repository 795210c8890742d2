# Why the CPU LoopFormer preset trains its conditioning at a tenth of the LR (cond_lr_scale=0.1; records/jeddi2026.md,
# "The defect: the conditioning's effective learning rate"). Jeddi et al. 2026 (arXiv:2602.11451) train every
# parameter at one LR; at config/loopformer_cpu.py's LR the t/dt conditioning alone (no shortcut objective) stalls.
# 300-step diagnostic runs at seed 7: the conditioning alone at cond_lr_scale 1 / 0.3 / 0.1 / 0.01, at 0.1 without
# weight decay, the plain loop (with and without weight decay), TMLT's loop-index conditioning at the one LR; and
# Chen et al. 2026's IterAdaLN rung (arXiv:2606.04438; config/loopmoe_iteradaln_cpu.py, 400 steps) at 1 and 0.1,
# whose gates read the tokens. 10 runs, about 25 core-minutes.
#     python scaling.py sweep config/sweeps/cond_lr_cpu.py --parallel=2
name = "cond_lr_cpu"
record = "records/jeddi2026"
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10
SEEDS = (7,)
# No verdict rests on these runs: they are the diagnostic behind a default (rule 2 of records/README.md still asks
# for a rule before any run that writes to a record). The record prints each run's validation loss.
rule = dict(finding="diagnostic behind cond_lr_scale=0.1 of config/loopformer_cpu.py: no verdict",
            test="none: the validation loss of each run after 300 steps (IterAdaLN: 400) is printed beside the "
                 "plain loop's", seeds=SEEDS, margin=None)
common = dict(data_source="offline", sample_tokens=0, eval_interval=100)
COND_ONLY = dict(shortcut_weight=0.0, consistency_weight=0.0)
PLAIN = dict(loop_cond="none", elastic="none")
ARMS = {**{f"cond_lr{s}": dict(COND_ONLY, cond_lr_scale=s) for s in (1.0, 0.3, 0.1, 0.01)},
        "cond_lr0.1_wd0": dict(COND_ONLY, cond_lr_scale=0.1, weight_decay=0.0),
        "plain_loop": PLAIN, "plain_loop_wd0": dict(PLAIN, weight_decay=0.0),
        "index_lr1": dict(loop_cond="index", elastic="none", cond_lr_scale=1.0)}
ITERADALN = {"iteradaln_lr1": dict(cond_lr_scale=1.0), "iteradaln_lr0.1": dict(cond_lr_scale=0.1)}


def points():
    out = [dict(name=f"{arm}_s{seed}", arch=arm, configs=["config/loopformer_cpu.py"],
                overrides=dict(common, max_iters=300, seed=seed, **over))
           for arm, over in ARMS.items() for seed in SEEDS]
    out += [dict(name=f"{arm}_s{seed}", arch=arm, configs=["config/loopmoe_iteradaln_cpu.py"],
                 overrides=dict(common, max_iters=400, seed=seed, **over)) for arm, over in ITERADALN.items()
            for seed in SEEDS]
    return out
