# The two probes of Schwethelm et al. 2026 (arXiv:2604.21106, §5, Table 3): truncated BPTT (gradients through the last
# ceil(r/2) passes) and hyper-connections (K=2 lanes instead of the linear injection), r in {2, 4, 8} at the four
# lower budgets; the r=1 runs of isodepth_paper.py are the baseline (same results.jsonl).
#     python scaling.py fit out/sweeps/isodepth_paper/results.jsonl --law=joint --baseline_arch=r1 \
#         --archs='("trunc_r2","trunc_r4","trunc_r8")' --budgets='(4.64e17,1e18,2.15e18,4.64e18)'
#     (hyper-connections: --archs='("hc_r2","hc_r4","hc_r8")'; the baseline refit: --archs='("r2","r4","r8")')
# And Looped-MoE (Lee et al. 2026, arXiv:2605.09165: every FFN 8 experts, top 2, at the dense FFN's active size), with
# its own r=1, whose delta phi the CPU grid cannot decide (records/schwethelm2026.md: its interval there is 1.0 wide):
#     python scaling.py sweep config/sweeps/isodepth_probes_paper.py --only='^moe_r' --dry_run
#     python scaling.py fit out/sweeps/isodepth_paper/results.jsonl --law=delta_phi --designs='("moe_r",)' \
#         --hold='("alpha","beta")' --budgets='(4.64e17,1e18,2.15e18,4.64e18)'
import math
import os
import runpy

_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_paper.py"))
name, out_dir = "isodepth_probes_paper", "out/sweeps/isodepth_paper"
common, runner, flops_per_second, lr_for = (_grid[k] for k in ("common", "runner", "flops_per_second", "lr_for"))


def points():
    low = (4.64e17, 1e18, 2.15e18, 4.64e18)
    return (_grid["grid"]((2, 4, 8), low, "trunc_r", lambda r: dict(bptt_loops=math.ceil(r / 2)))
            + _grid["grid"]((2, 4, 8), low, "hc_r", lambda r: dict(injection="none", hc_lanes=2))
            + _grid["grid"]((1, 2, 4, 8), low, "moe_r", lambda r: dict(n_expert=8, top_k=2)))
