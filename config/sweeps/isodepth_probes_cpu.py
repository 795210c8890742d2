# CPU-scale probes of Schwethelm et al. 2026 (arXiv:2604.21106, §5): truncated BPTT (last ceil(r/2) passes) and
# hyper-connections (K=2) for r in {2, 4} at the two lower budgets of isodepth_cpu.py, whose r=1 runs are the
# baseline (same results.jsonl).
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=joint --baseline_arch=r1 \
#         --archs='("trunc_r2","trunc_r4")' --budgets='(3e11,1e12)'
import math
import os
import runpy

_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))
name, out_dir = "isodepth_probes_cpu", "out/sweeps/isodepth_cpu"
common, env, flops_per_second, lr_for = (_grid[k] for k in ("common", "env", "flops_per_second", "lr_for"))


def points():
    low = (3e11, 1e12)
    return (_grid["grid"]((2, 4), low, "trunc_r", lambda r: dict(bptt_loops=math.ceil(r / 2)))
            + _grid["grid"]((2, 4), low, "hc_r", lambda r: dict(injection="none", hc_lanes=2)))
