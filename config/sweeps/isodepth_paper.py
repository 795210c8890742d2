# Iso-depth grid of Schwethelm, Rueckert, Kaissis 2026 (arXiv:2604.21106, §4, Table 6): r in {1, 2, 4, 8} with 2
# prelude + 16/r recur (looped r times) + 2 coda layers = 20 effective layers, widths d = 64 s per budget as in
# Table 6, budgets 4.64e17 ... 2.15e19 FLOPs under their accounting (6 (N_once + r N_rec) + 6 d V + 12 d T per
# layer), their recipe (config/recur_r4.py: MuonH, HyperP LR 0.014 (D/D_ref)^-0.32, batch 262,144 tokens) on
# FineWeb-Edu with the GPT-2 tokenizer (Llama-2's is not available offline). 116 runs.
# The probes (isodepth_probes_paper.py) and the injection ablation (injection_ablation_paper.py) write to the same
# results.jsonl, so their fits reuse these r=1 runs:
#     python scaling.py fit out/sweeps/isodepth_paper/results.jsonl --law=chinchilla --archs='("r1","r2","r4","r8")'
#     python scaling.py fit out/sweeps/isodepth_paper/results.jsonl --law=joint --archs='("r1","r2","r4","r8")'
name = "isodepth_paper"
WIDTHS = {4.64e17: (6, 8, 10, 12), 1e18: (6, 8, 10, 12, 14), 2.15e18: (8, 10, 12, 14, 16),
          4.64e18: (10, 12, 14, 16, 18, 20), 1e19: (12, 16, 18, 20, 24), 2.15e19: (18, 24, 28, 34)}
common = dict(data_source="fineweb-edu", tokenizer="gpt2", eval_interval=2000, eval_tokens=4194304, sample_tokens=0,
              compile=True)
runner = ["torchrun", "--standalone", "--nproc_per_node=8", "train.py"]
flops_per_second = 8 * 300e12


def lr_for(tokens, model, train):
    """HyperP's data correction of the MuonH LR (Schwethelm et al. §4.2): 0.014 (D / D_ref)^-0.32, D_ref = 1e9
    tokens (the s=10 tuning run at ~10 tokens per parameter [inferred])."""
    return 0.014 * (tokens / 1e9) ** -0.32


def grid(loops=(1, 2, 4, 8), budgets=tuple(WIDTHS), prefix="r", extra=None):
    """Points of the grid; `extra(r)` gives a probe's overrides."""
    points = []
    for r in loops:
        for C in budgets:
            for s in WIDTHS[C]:
                over = dict(n_embd=64 * s, n_loop=r, n_layer=16 // r, **(extra(r) if extra else {}))
                points.append(dict(name=f"{prefix}{r}_C{C:.3g}_s{s}".replace("+", ""), arch=f"{prefix}{r}",
                                   configs=["config/recur_r4.py"], overrides=over, flops_budget=C,
                                   fields=dict(s=s)))
    return points


def points():
    return grid()
