# Loop Base + IterAdaLN (LoopMoE ablation, Chen et al. 2026, arXiv:2606.04438, Table 3): per-token, per-iteration
# modulation of the shared layers (loop.py, loop_cond='iteradaln'). CPU scale, trains in minutes: python train.py
# config/loopmoe_iteradaln_cpu.py (paper scale: config/loopmoe_iteradaln.py). Matched under the strict reading of §3.4
# (Chen et al. do not say whether conditioning counts in F): a token's FLOPs are everything it executes, IterAdaLN's
# modulators included (analyze.capacity_report; count_conditioning=False gives the loose F of the backbone only). The
# modulators execute 7d^2 params per token per shared layer and pass (461K of F*): the experts pay for them, narrowed
# from 48 to 8 at the Vanilla MoE's F* (analyze.match_flops), then more of them restore N*. Stored params 2.083M,
# per-token params 1.166M (Vanilla: 2.083M, 1.161M; 0.705M without the modulators), rho 0.896 at the LoopMoE rung's
# 11.75 unique experts per token (Vanilla rho* 0.398): the narrow experts overshoot rho*.
import os

# the rung below, then what this rung changes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_loop_base_cpu.py")).read())
loop_cond = 'iteradaln'
n_expert = 145
moe_d_ff = 8  # hidden size of one expert
