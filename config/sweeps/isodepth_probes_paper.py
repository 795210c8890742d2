# The two probes of Schwethelm et al. 2026 (arXiv:2604.21106, §5, Table 3): truncated BPTT (gradients through the last
# ceil(r/2) passes) and hyper-connections (K=2 lanes instead of the linear injection), r in {2, 4, 8} at the four
# lower budgets; the r=1 runs of isodepth_paper.py are the baseline (same results.jsonl).
#     python scaling.py fit out/sweeps/isodepth_paper/results.jsonl --law=joint --baseline_arch=r1 \
#         --archs='("trunc_r2","trunc_r4","trunc_r8")' --budgets='(4.64e17,1e18,2.15e18,4.64e18)'
#     (hyper-connections: --archs='("hc_r2","hc_r4","hc_r8")'; the baseline refit: --archs='("r2","r4","r8")')
import math
import os
import runpy

_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_paper.py"))
name, out_dir = "isodepth_probes_paper", "out/sweeps/isodepth_paper"
common, runner, flops_per_second, lr_for = (_grid[k] for k in ("common", "runner", "flops_per_second", "lr_for"))


def points():
    low = (4.64e17, 1e18, 2.15e18, 4.64e18)
    return (_grid["grid"]((2, 4, 8), low, "trunc_r", lambda r: dict(bptt_loops=math.ceil(r / 2)))
            + _grid["grid"]((2, 4, 8), low, "hc_r", lambda r: dict(injection="none", hc_lanes=2)))
