# Input-injection ablation of Schwethelm et al. 2026 (arXiv:2604.21106, App. C.2, Table 5) at s=10, r=4, C=1e18:
# linear (the default; 955M tokens), additive (973M), passthrough (973M; fails to train in the paper) and
# hyper-connections K=2 (973M). Same results.jsonl as isodepth_paper.py.
import os
import runpy

_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_paper.py"))
name, out_dir = "injection_ablation_paper", "out/sweeps/isodepth_paper"
common, runner, flops_per_second, lr_for = (_grid[k] for k in ("common", "runner", "flops_per_second", "lr_for"))
KINDS = {"linear": dict(injection="linear"), "additive": dict(injection="additive"),
         "passthrough": dict(injection="none"), "hc": dict(injection="none", hc_lanes=2)}


def points():
    return [dict(name=f"inject_{kind}_r4_C1e18_s10", arch=f"inject_{kind}", configs=["config/recur_r4.py"],
                 overrides=dict(n_embd=640, n_loop=4, n_layer=4, **over), flops_budget=1e18, fields=dict(s=10))
            for kind, over in KINDS.items()]
