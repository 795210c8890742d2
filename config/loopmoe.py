# LoopMoE = Loop Base + IterAdaLN + capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): MLA ranks scaled and
# experts refitted at fixed per-token FLOPs until rho = A_attn/A_ffn is the Vanilla MoE's rho*, then routed experts
# added until the total params match (analyze.rebalance). Paper scale, 3B total: the paper's widths, ranks and expert
# counts (its Table 5) are not recoverable; the backbone numbers below are inferred [inferred], chosen for ~3.0B total /
# ~0.9B active params. Matched under the strict reading of §3.4 (Chen et al. do not say whether conditioning counts in
# F): a token's FLOPs are everything it executes, IterAdaLN's modulators included (analyze.capacity_report;
# count_conditioning=False gives the loose F of the backbone only). With the modulators paid by narrow experts the
# IterAdaLN rung's rho is above rho*, so balancing lowers the ranks here (q 1024 -> 608, kv 512 -> 304) and widens the
# experts (112 -> 216): the reverse of the paper's direction. Stored params 3056.408M, per-token params 895.614M
# (Vanilla: 3057.676M, 894.988M), rho 0.462 (Vanilla rho* 0.462) at 23.70 unique routed experts per token over the 4
# iterations (independent-routing estimate E(1-(1-k/E)^K) at the IterAdaLN rung's E = 718, an upper bound [inferred];
# measure it with analyze.unique_experts_per_token on a trained IterAdaLN rung and rerun analyze.rebalance).
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_iteradaln.py")).read())
_unique_experts = 23.701  # the u that rebalance used (a private name: not a config key)
q_lora_rank = 608
kv_lora_rank = 304
n_expert = 375
moe_d_ff = 216  # hidden size of one expert
