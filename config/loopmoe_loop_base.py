# Loop Base (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): the Vanilla MoE's layers as a sandwich
# loop, 2 prefix + 2 shared layers x 4 iterations + 2 suffix (12 effective, 6 unique), no re-injection, no per-
# iteration conditioning; routed experts added (moe.match_params) so that the total params match the Vanilla MoE's
# at the same per-token FLOPs. Paper scale, 3B total: the paper's widths, ranks and expert counts (its Table 5) are
# not recoverable; the backbone numbers below are inferred [inferred], chosen for ~3.0B total / ~0.9B active params.
# Generated with moe.match_params / moe.rebalance (tests/test_moe.py checks the matching): stored params 3052.162M,
# per-token params 896.610M, rho 0.260 (Vanilla rho* 0.462).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_vanilla.py")).read())
n_prelude = 2
n_layer = 2
n_loop = 4
n_coda = 2
injection = 'none'
loop_cond = 'none'
n_expert = 128
