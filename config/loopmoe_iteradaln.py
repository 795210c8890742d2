# Loop Base + IterAdaLN (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): per-token, per-iteration
# modulation of the shared layers (loop.py, loop_cond='iteradaln'); experts re-matched so that the total params
# (IterAdaLN's included) match the Vanilla MoE's. Paper scale, 3B total: the paper's widths, ranks and expert counts
# (its Table 5) are not recoverable; the backbone numbers below are inferred [inferred], chosen for ~3.0B total /
# ~0.9B active params. Generated with moe.match_params / moe.rebalance (tests/test_moe.py checks the matching):
# stored params 3056.604M, per-token params 896.543M, rho 0.260 (Vanilla rho* 0.462).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_loop_base.py")).read())
loop_cond = 'iteradaln'
n_expert = 125
