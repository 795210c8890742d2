# LoopMoE = Loop Base + IterAdaLN + capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): MLA ranks scaled and
# experts refitted at fixed per-token FLOPs until rho = A_attn/A_ffn is the Vanilla MoE's rho*, then routed experts
# added until the total params match (analyze.rebalance). CPU scale, trains in minutes: python train.py
# config/loopmoe_cpu.py (paper scale: config/loopmoe.py). Matched under the strict reading of §3.4 (Chen et al. do not
# say whether conditioning counts in F): a token's FLOPs are everything it executes, IterAdaLN's modulators included
# (analyze.capacity_report; count_conditioning=False gives the loose F of the backbone only). With the modulators paid
# by narrow experts the IterAdaLN rung's rho is above rho*, so balancing lowers the ranks here (q 64 -> 32, kv 32 -> 16)
# and widens the experts (8 -> 18): the reverse of the paper's direction. Stored params 2.073M, per-token params 1.153M
# (Vanilla: 2.083M, 1.161M), rho 0.394 (Vanilla rho* 0.398) at 11.75 unique routed experts per token over the 2
# iterations (independent-routing estimate E(1-(1-k/E)^K) at the IterAdaLN rung's E = 145, an upper bound; measure it
# with analyze.unique_experts_per_token on the trained CPU IterAdaLN rung and rerun analyze.rebalance).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_iteradaln_cpu.py")).read())
_unique_experts = 11.752  # the u that rebalance used (a private name: not a config key)
q_lora_rank = 32
kv_lora_rank = 16
n_expert = 68
moe_d_ff = 18  # hidden size of one expert
