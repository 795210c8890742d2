# LoopMoE = Loop Base + IterAdaLN + capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): MLA ranks raised
# and experts narrowed at fixed per-token FLOPs until rho = A_attn/A_ffn is the Vanilla MoE's rho*, then routed
# experts added until the total params match (moe.rebalance). CPU scale, trains in minutes: python train.py
# config/loopmoe_cpu.py (paper scale: config/loopmoe.py). Generated with moe.match_params / moe.rebalance
# (tests/test_moe.py checks the matching): stored params 2.086M, per-token params 1.165M, rho 0.398 (Vanilla rho*
# 0.398) at 7.60 unique routed experts per token over the 2 iterations (measured with moe.unique_experts_per_token
# on the trained CPU Loop Base + IterAdaLN).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_iteradaln_cpu.py")).read())
_unique_experts = 7.601  # the u that rebalance used (a private name: not a config key)
q_lora_rank = 72
kv_lora_rank = 36
n_expert = 25
moe_d_ff = 46  # hidden size of one expert
