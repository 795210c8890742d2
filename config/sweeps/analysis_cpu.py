# CPU-scale checkpoints for analyze.py's checkpoint figures beyond Lee et al.'s (those use
# config/sweeps/early_exit_cpu.py's models): the LoopMoE model and its Loop Base + IterAdaLN ablation (Chen et al.
# 2026, arXiv:2606.04438: routing dynamics, IterAdaLN statistics, active parameters) and a LoopFormer 2x4 with its
# plain-loop twin (Jeddi et al. 2026, arXiv:2602.11451: representation metrics), each trained 4x (LoopMoE) or ~2.7x
# (LoopFormer) longer than its preset, at training seeds 1337 and 7. About an hour of one core per seed.
#     python scaling.py sweep config/sweeps/analysis_cpu.py --only='^(loopmoe|iteradaln|loopmoe_k4)_s'
#     python analyze.py iteradaln --ckpt=out/sweeps/analysis_cpu/iteradaln_s1337 --out_dir=out/analysis
name = "analysis_cpu"
archs = {
    "loopmoe": dict(configs=["config/loopmoe_cpu.py"], overrides=dict(max_iters=1200)),
    "iteradaln": dict(configs=["config/loopmoe_iteradaln_cpu.py"], overrides=dict(max_iters=1200)),
    # four iterations, as the paper's routing-dynamics figure (entry / recurrent core / exit phases need K >= 3)
    "loopmoe_k4": dict(configs=["config/loopmoe_cpu.py"], overrides=dict(max_iters=1200, n_loop=4)),
    # the preset samples shortcut trajectories as the paper does (uniform); the checkpoint behind the README's
    # LoopFormer rows was trained with the released code's greedy sampler: add trajectory_sampler="greedy" for it
    "loopformer": dict(configs=["config/loopformer_cpu.py"], overrides=dict(max_iters=800)),
    "plain_loop": dict(configs=["config/loopformer_cpu.py"],
                       overrides=dict(max_iters=800, loop_cond="none", elastic="none")),
}
seeds = [1337, 7]
common = dict(data_source="offline", eval_interval=200, sample_tokens=0)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 4e10
