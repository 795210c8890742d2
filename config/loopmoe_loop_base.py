# Loop Base (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): the Vanilla MoE's layers as a sandwich
# loop, 2 prefix + 2 shared layers x 4 iterations + 2 suffix (12 effective, 6 unique), no re-injection, no per-iteration
# conditioning; routed experts added (analyze.match_flops: expert width for F, expert count for N) so that the total
# params match the Vanilla MoE's at the same per-token FLOPs. Paper scale, 3B total: the paper's widths, ranks and
# expert counts (its Table 5) are not recoverable; the backbone numbers below are inferred [inferred], chosen for ~3.0B
# total / ~0.9B active params. Matched under the strict reading of §3.4 (Chen et al. do not say whether conditioning
# counts in F): a token's FLOPs are everything it executes, IterAdaLN's modulators included (analyze.capacity_report;
# count_conditioning=False gives the loose F of the backbone only). Stored params 3052.162M, per-token params 896.610M
# (Vanilla: 3057.676M, 894.988M), rho 0.251 at the LoopMoE rung's 23.70 unique experts per token (Vanilla rho* 0.462);
# tests/test_moe.py measures the matching.
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
