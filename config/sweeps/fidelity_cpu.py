# The CPU reproductions that the fidelity fixes changed, training seeds 1337 and 7, and 42 where an effect is
# within twice their spread:
# - Chen et al. 2026 (arXiv:2606.04438, Table 3) ablation ladder at matched params and per-token FLOPs (strict
#   reading: IterAdaLN's modulators count): Vanilla MoE -> Loop Base -> + IterAdaLN -> LoopMoE (+ balancing),
#   800 steps x 1,024 tokens each, compared by validation loss. The loose reading (the modulators do not count in F,
#   so the IterAdaLN and LoopMoE rungs keep the Loop Base's 48-wide experts and execute 40% more FLOPs per token):
#   iteradaln_loose and loopmoe_loose, fitted by scaling.match_flops / scaling.rebalance with count_conditioning=False.
# - Jeddi et al. 2026 (arXiv:2602.11451, Table 1) elastic depth: LoopFormer 2x4 with the paper's uniform trajectory
#   sampler and the released code's c_proj init, and its plain-loop twin (800 steps x 2,048 tokens); the preset's
#   tenth of the LR on the conditioning (loopformer) and the paper's one LR (loopformer_lr1, where our LoopFormer
#   stalled); the plain loop trained at each budget M = 1, 2, 3 passes (Table 1's fixed-depth rows).
# - Schwethelm et al. 2026 (arXiv:2604.21106, App. C.2/G.1) hyper-connections (increment lanes, mean pooling) vs
#   the passthrough loop at r=4, d=128, C=6e12 (ten times the injection ablation's budget: 340 steps).
#     python scaling.py sweep config/sweeps/fidelity_cpu.py
#     python early_exit.py --mode=elastic --ckpt=out/sweeps/fidelity_cpu/loopformer_s1337 --budget=4
import os
import runpy

name = "fidelity_cpu"
common = dict(data_source="offline", sample_tokens=0)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10
SEEDS = (1337, 7, 42)  # the third seed where an effect is within twice the spread (HC, the middle rungs)
# Chen et al.'s rungs, two more: after three seeds their steps (0.04-0.05 nats) were still within the looped rungs'
# seed noise; five give each paired difference a standard error of about 0.02 (about 50 core-minutes more)
LADDER_SEEDS = SEEDS + (1, 2)
record = {**dict.fromkeys(("vanilla", "loop_base", "iteradaln", "loopmoe", "iteradaln_loose", "loopmoe_loose"),
                         "records/chen2026"),
          **dict.fromkeys(("loopformer", "loopformer_lr1", "plain_loop", "plain_loop_M1", "plain_loop_M2",
                           "plain_loop_M3"), "records/jeddi2026"),
          **dict.fromkeys(("hc", "passthrough"), "records/schwethelm2026")}
figures = {  # python scaling.py figures records/
    "ladder": ["--law=compare", "--archs=('vanilla','loop_base','iteradaln','loopmoe')", "--reference=vanilla"],
    "ladder_loose": ["--law=compare", "--archs=('vanilla','loop_base','iteradaln_loose','loopmoe_loose')",
                     "--reference=vanilla"],
    "lanes": ["--law=compare", "--archs=('passthrough','hc')", "--reference=passthrough"],
    "depth": ["--law=compare", "--archs=('plain_loop','plain_loop_M1','plain_loop_M2','plain_loop_M3','loopformer',"
              "'loopformer_lr1')", "--reference=plain_loop"],
}
_iso = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))
LADDER = {"vanilla": "loopmoe_vanilla_cpu", "loop_base": "loopmoe_loop_base_cpu",
          "iteradaln": "loopmoe_iteradaln_cpu", "loopmoe": "loopmoe_cpu"}
PLAIN = dict(loop_cond="none", elastic="none")
# the loose reading's rungs over the Loop Base preset (tests/test_moe.py: these are what match_flops and rebalance
# give at the Vanilla MoE's N*, backbone F* and rho*, and FlopCounterMode measures them)
LOOSE = {"iteradaln_loose": dict(loop_cond="iteradaln", n_expert=24),
         "loopmoe_loose": dict(loop_cond="iteradaln", n_expert=27, moe_d_ff=42, q_lora_rank=90, kv_lora_rank=46)}
ELASTIC = {"loopformer": {}, "loopformer_lr1": dict(cond_lr_scale=1.0), "plain_loop": PLAIN,
           **{f"plain_loop_M{m}": dict(PLAIN, n_loop=m) for m in (1, 2, 3)}}
LANES = {"hc": dict(injection="none", hc_lanes=2), "passthrough": dict(injection="none")}


def points():
    out = []
    for seed in LADDER_SEEDS:
        for arch, preset in LADDER.items():
            out.append(dict(name=f"{arch}_s{seed}", arch=arch, configs=[f"config/{preset}.py"],
                            overrides=dict(max_iters=800, eval_interval=200, seed=seed)))
        for arch, over in LOOSE.items():
            out.append(dict(name=f"{arch}_s{seed}", arch=arch, configs=["config/loopmoe_loop_base_cpu.py"],
                            overrides=dict(max_iters=800, eval_interval=200, seed=seed, **over)))
    for seed in SEEDS:
        for arch, over in ELASTIC.items():
            out.append(dict(name=f"{arch}_s{seed}", arch=arch, configs=["config/loopformer_cpu.py"],
                            overrides=dict(max_iters=800, eval_interval=200, seed=seed, **over)))
        for arch, over in LANES.items():
            out.append(dict(name=f"{arch}_r4_s{seed}", arch=arch, configs=["config/recur_cpu.py"],
                            overrides=dict(_iso["common"], n_embd=128, n_loop=4, n_layer=1, seed=seed, **over),
                            flops_budget=6e12))
    return out
