# CPU-scale input-injection ablation (Schwethelm et al. 2026, arXiv:2604.21106, App. C.2) at d=128, r=4, C=6e11:
# linear, additive, passthrough, hyper-connections K=2. Same results.jsonl as isodepth_cpu.py.
import os
import runpy

_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))
name, out_dir = "injection_ablation_cpu", "out/sweeps/isodepth_cpu"
common, env, flops_per_second, lr_for = (_grid[k] for k in ("common", "env", "flops_per_second", "lr_for"))
KINDS = {"linear": dict(injection="linear"), "additive": dict(injection="additive"),
         "passthrough": dict(injection="none"), "hc": dict(injection="none", hc_lanes=2)}


def points():
    return [dict(name=f"inject_{kind}_r4_C6e11_d128", arch=f"inject_{kind}", configs=["config/recur_cpu.py"],
                 overrides=dict(n_embd=128, n_loop=4, n_layer=1, **over), flops_budget=6e11)
            for kind, over in KINDS.items()]
