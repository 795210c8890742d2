# CPU-scale probes on the iso-depth grid of isodepth_cpu.py (same results.jsonl, same widths and recipe), r in {2, 4}
# at its two lower budgets: Schwethelm et al. 2026's own (arXiv:2604.21106, §5: truncated BPTT through the last
# ceil(r/2) passes; hyper-connections, K=2) and, what no paper measured, the other papers' designs, each as the phi
# of its recurrences against the plain loop's (delta phi, scaling.py fit --law=delta_phi):
#     iteradaln_r  IterAdaLN (Chen et al. 2026, arXiv:2606.04438): per-token, per-iteration modulation; it changes
#                  the one-pass model too, so it runs r=1 itself
#     tdt_r        LoopFormer's time and step-size conditioning (Jeddi et al. 2026, arXiv:2602.11451), without the
#                  shortcut objective (it would cost 1.5x the FLOPs); at one pass a constant modulation
#     rscale_r     residual branches x 1/r (Wang et al. 2026, arXiv:2606.18524); the plain model at one pass
#     moe_r        every FFN a mixture of 8 experts, top 2, at the dense FFN's active size (Lee et al. 2026,
#                  arXiv:2605.09165: Looped-MoE); its own r=1 is the MoE model
# Every design trains with the grid's recipe (config/recur_cpu.py: MuonH, HyperP LR; expert stacks are MuonH
# matrices, one sphere per expert). The designs without their own r=1 reuse the grid's r=1 runs; they are fitted
# with the whole law held at the plain loop's (only phi free), the two with their own r=1 with its exponents held
# (records/schwethelm2026.md gives the power of each: 95% intervals on delta phi about 0.33 and 0.5-0.66 wide at
# two seeds). About 8 core-minutes per design, r and seed. Parts (seed 7: add _s7$ to the pattern; seed 1337: \d$;
# the third seed, 42, ran for the three designs whose effect lay within twice its interval: --only=
# '^(tdt_r[24]|rscale_r[24]|iteradaln_r[124])_C(3e11|1e12)_d\d+_s42$' with the grid's plain loop at seed 42; the
# fourth, 3, for the two whose pooled interval still reached 0 at three seeds: --only='_s3$' with the grid's plain
# loop at seed 3, isodepth_cpu.py --only='_C(3e11|1e12)_d\d+_s3$'; seed 42 for Schwethelm et al.'s own two probes
# later, --only='^(trunc|hc)_r[24]_.*_s42$'; a fifth, 5, for t/Δt, still at the edge at four: --only='^tdt_r[24]_.*_s5$'
# with isodepth_cpu.py --only='_C(3e11|1e12)_d\d+_s5$'):
#     python scaling.py sweep config/sweeps/isodepth_probes_cpu.py --only='^(moe|iteradaln)_'
#     python scaling.py sweep config/sweeps/isodepth_probes_cpu.py --only='^(tdt|rscale)_'
#     python scaling.py sweep config/sweeps/isodepth_probes_cpu.py --only='^(hc|trunc)_'
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=delta_phi --budgets='(3e11,1e12)' \
#         --designs='("trunc_r","hc_r","tdt_r","rscale_r")' --hold='("a","alpha","b","beta","e")'
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=delta_phi --budgets='(3e11,1e12)' \
#         --designs='("iteradaln_r","moe_r")' --hold='("alpha","beta")'
import math
import os
import runpy

_grid = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))
# points of the grid's study: its name, so its results.jsonl, record file and figures (delta phi among them)
name, record = "isodepth_cpu", "records/schwethelm2026"
common, env, flops_per_second, lr_for = (_grid[k] for k in ("common", "env", "flops_per_second", "lr_for"))

# arch prefix: (the overrides at r passes, the passes it runs)
DESIGNS = {
    "moe_r": (lambda r: dict(n_expert=8, top_k=2), (1, 2, 4)),
    "iteradaln_r": (lambda r: dict(loop_cond="iteradaln"), (1, 2, 4)),
    "tdt_r": (lambda r: dict(loop_cond="loopformer"), (2, 4)),
    "rscale_r": (lambda r: dict(residual_scaling="linear"), (2, 4)),
    "hc_r": (lambda r: dict(injection="none", hc_lanes=2), (2, 4)),
    "trunc_r": (lambda r: dict(bptt_loops=math.ceil(r / 2)), (2, 4)),
}


# seeds beyond the first two: a third where the effect (ours, or the paper's for hyper-connections) lay within twice
# its interval at two seeds, a fourth where the pooled interval still reached 0 at three, a fifth where it did at four
# (issue: 3 seeds where the effect is within 2x the spread)
EXTRA_SEEDS = {"iteradaln_r": 2, "tdt_r": 3, "rscale_r": 1, "trunc_r": 1, "hc_r": 1}


def points():
    low, seeds = (3e11, 1e12), _grid["SEEDS"]
    return [p for prefix, (extra, loops) in DESIGNS.items()
            for p in _grid["grid"](loops, low, prefix, extra, seeds[:2 + EXTRA_SEEDS.get(prefix, 0)])]
