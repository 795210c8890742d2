# LoopMoE = Loop Base + IterAdaLN + capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): MLA ranks raised
# and experts narrowed at fixed per-token FLOPs until rho = A_attn/A_ffn is the Vanilla MoE's rho*, then routed
# experts added until the total params match (moe.rebalance). Paper scale, 3B total: the paper's widths, ranks and
# expert counts (its Table 5) are not recoverable; the backbone numbers below are inferred [inferred], chosen for
# ~3.0B total / ~0.9B active params. Generated with moe.match_params / moe.rebalance (tests/test_moe.py checks the
# matching): stored params 3059.002M, per-token params 898.996M, rho 0.461 (Vanilla rho* 0.462) at 22.33 unique
# routed experts per token over the 4 iterations (independent-routing estimate E(1-(1-k/E)^K), an upper bound
# [inferred]; measure it with moe.unique_experts_per_token on a trained Loop Base and rerun moe.rebalance).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_iteradaln.py")).read())
_unique_experts = 22.327  # the u that rebalance used (a private name: not a config key)
q_lora_rank = 1696
kv_lora_rank = 848
n_expert = 157
moe_d_ff = 504  # hidden size of one expert
