# Loop Base (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): the Vanilla MoE's layers as a sandwich
# loop, 1 prefix + 2 shared layers x 2 iterations + 1 suffix (6 effective, 4 unique), no re-injection, no per-iteration
# conditioning; routed experts added (analyze.match_flops: expert width for F, expert count for N) so that the total
# params match the Vanilla MoE's at the same per-token FLOPs. CPU scale, trains in minutes: python train.py
# config/loopmoe_loop_base_cpu.py (paper scale: config/loopmoe_loop_base.py). Matched under the strict reading of §3.4
# (Chen et al. do not say whether conditioning counts in F): a token's FLOPs are everything it executes, IterAdaLN's
# modulators included (analyze.capacity_report; count_conditioning=False gives the loose F of the backbone only). Stored
# params 2.072M, per-token params 1.169M (Vanilla: 2.083M, 1.161M), rho 0.282 at the LoopMoE rung's 11.75 unique experts
# per token (Vanilla rho* 0.398); tests/test_moe.py measures the matching.
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_vanilla_cpu.py")).read())
n_prelude = 1
n_layer = 2
n_loop = 2
n_coda = 1
injection = 'none'
loop_cond = 'none'
n_expert = 29
