# CPU-scale iso-depth grid after Schwethelm et al. 2026 (arXiv:2604.21106, §4): 1 prelude + 4/r recur (looped r
# times) + 1 coda layers = 6 effective layers for r in {1, 2, 4}, heads of 32, their recipe at CPU scale
# (config/recur_cpu.py: MuonH, HyperP LR 0.014 (D/D_ref)^-0.32 with D_ref = that preset's 614,400 tokens), byte
# tokenizer, three budgets with three or four widths each. About an hour on 2 cores. The probes and the injection
# ablation (isodepth_probes_cpu.py, injection_ablation_cpu.py) add to the same results.jsonl.
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=chinchilla --archs='("r1","r2","r4")'
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=joint --archs='("r1","r2","r4")'
name = "isodepth_cpu"
WIDTHS = {2e11: (64, 96, 128), 6e11: (64, 96, 128, 160), 2e12: (96, 128, 160, 192)}
common = dict(data_source="offline", tokenizer="byte", head_dim=32, n_prelude=1, n_coda=1, eval_interval=100000,
              eval_tokens=65536, sample_tokens=0)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 5e9  # one CPU core: 1.5e10 measured at d=64 alone, 2-4e9 on a busy machine


def lr_for(tokens, model, train):
    return 0.014 * (tokens / 614400) ** -0.32  # HyperP data correction (Schwethelm et al. §4.2)


def grid(loops=(1, 2, 4), budgets=tuple(WIDTHS), prefix="r", extra=None):
    points = []
    for r in loops:
        for C in budgets:
            for d in WIDTHS[C]:
                over = dict(n_embd=d, n_loop=r, n_layer=4 // r, **(extra(r) if extra else {}))
                points.append(dict(name=f"{prefix}{r}_C{C:.3g}_d{d}".replace("+", ""), arch=f"{prefix}{r}",
                                   configs=["config/recur_cpu.py"], overrides=over, flops_budget=C))
    return points


def points():
    return grid()
