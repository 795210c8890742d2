# Loop Base + IterAdaLN (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): per-token, per-iteration
# modulation of the shared layers (loop.py, loop_cond='iteradaln'). Paper scale, 3B total: the paper's widths, ranks and
# expert counts (its Table 5) are not recoverable; the backbone numbers below are inferred [inferred], chosen for ~3.0B
# total / ~0.9B active params. Matched under the strict reading of §3.4 (Chen et al. do not say whether conditioning
# counts in F): a token's FLOPs are everything it executes, IterAdaLN's modulators included (analyze.capacity_report;
# count_conditioning=False gives the loose F of the backbone only). The modulators execute 7d^2 params per token per
# shared layer and pass (235M of F*): the experts pay for them, narrowed from 640 to 112 at the Vanilla MoE's F*
# (analyze.match_flops), then more of them restore N*. Stored params 3059.236M, per-token params 895.042M (Vanilla:
# 3057.676M, 894.988M; 660.079M without the modulators), rho 1.004 at the LoopMoE rung's 23.70 unique experts per token
# (Vanilla rho* 0.462): the narrow experts overshoot rho*.
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_loop_base.py")).read())
loop_cond = 'iteradaln'
n_expert = 718
moe_d_ff = 112  # hidden size of one expert
