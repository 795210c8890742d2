# Loop Base + IterAdaLN (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): per-token, per-iteration
# modulation of the shared layers (loop.py, loop_cond='iteradaln'); experts re-matched so that the total params
# (IterAdaLN's included) match the Vanilla MoE's. CPU scale, trains in minutes: python train.py
# config/loopmoe_iteradaln_cpu.py (paper scale: config/loopmoe_iteradaln.py). Generated with moe.match_params /
# moe.rebalance (tests/test_moe.py checks the matching): stored params 2.073M, per-token params 1.166M, rho 0.357
# (Vanilla rho* 0.398).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_loop_base_cpu.py")).read())
loop_cond = 'iteradaln'
n_expert = 24
