"""
Elastic depth (Jeddi et al. 2026, arXiv:2602.11451, §3.2 and §4.4), run by `python early_exit.py --mode=elastic`:
evaluate a looped model at every budget M <= L with the uniform schedule (or a given one) and enumerate every
schedule of a budget: the compositions of L into M parts, step sizes k/L (C(L-1, M-1) of them); report the spread
and the winners. loop.py runs a schedule (its elastic depth); this file chooses and scores them.
"""
import itertools
import math
import sys

import numpy as np
import torch

from configurator import ConfigError
from figures import layout, readable


def compositions(L, M):
    """Every ordered way to write L as M positive integers (a schedule of M steps of sizes k/L summing to 1);
    C(L-1, M-1) of them, in lexicographic order of the cut points."""
    if not 1 <= M <= L:
        raise ValueError(f"a budget M must satisfy 1 <= M <= L, got M={M}, L={L}")
    out = []
    for cuts in itertools.combinations(range(1, L), M - 1):
        edges = (0,) + cuts + (L,)
        out.append(tuple(b - a for a, b in zip(edges, edges[1:])))
    return out


def schedule_steps(text):
    """'4,2,1,1' -> (4, 2, 1, 1): positive integers, or one line saying what a schedule is."""
    try:
        steps = tuple(int(s) for s in text.replace(" ", "").split(",") if s)
    except ValueError:
        steps = ()
    if not steps or any(s <= 0 for s in steps):
        raise ConfigError(f"config error: --schedule={text!r} must be positive integers, comma-separated (steps in "
                          "units of 1/n_loop), e.g. 4,2,1,1")
    return steps


def parse_schedule(text, L):
    """'4,2,1,1' (units of 1/L) -> (4, 2, 1, 1), checked to sum to L."""
    steps = schedule_steps(text)
    if sum(steps) != L:
        raise ConfigError(f"--schedule={text!r} must be positive integers (units of 1/{L}) summing to "
                          f"n_loop={L}")
    return steps


@torch.no_grad()
def schedule_loss(model, batches, schedule):
    """Mean validation NLL of the model run with `schedule` (step sizes summing to 1, one pass each; loop.py's
    elastic depth). A one-pass model has the one schedule [1.0]: it is the fixed-depth baseline at M = 1."""
    total, n = 0.0, 0
    dev = next(model.parameters()).device
    for x, y in batches:
        total += model(x.to(dev), y.to(dev), schedule=list(schedule))[1].item() * x.numel()
        n += x.numel()
    return total / n


def elastic_study(model, batches, budget=0, schedule=None, progress=True):
    """Perplexity at every budget M <= L (uniform steps 1/M, or the given schedule for its own length) and, for
    `budget`, at every composition of L into that many steps: spread and the best and worst schedules."""
    L = model.config.n_loop
    batches = list(batches)
    result = dict(L=L, budgets={})
    for M in range(1, L + 1):
        sched = [1.0 / M] * M
        result["budgets"][M] = math.exp(schedule_loss(model, batches, sched))
        if progress:
            print(f"  M={M}: ppl {result['budgets'][M]:.3f}", file=sys.stderr)
    if schedule:
        result["schedule"] = dict(steps=schedule, ppl=math.exp(schedule_loss(model, batches,
                                                                         [s / L for s in schedule])))
    if budget:
        rows = []
        for comp in compositions(L, budget):
            rows.append(dict(steps=comp, ppl=math.exp(schedule_loss(model, batches, [s / L for s in comp]))))
        rows.sort(key=lambda r: r["ppl"])
        result["all_schedules"] = rows
        result["spread"] = rows[-1]["ppl"] - rows[0]["ppl"]
        result["best"], result["worst"] = rows[:5], rows[-5:]
        # do winners take larger steps early? (Jeddi et al.: coarse early, fine late) mean first-half minus
        # second-half step size over the top fifth
        top = rows[:max(1, len(rows) // 5)]
        result["front_loading_of_best"] = float(np.mean([np.mean(r["steps"][:budget // 2 or 1]) -
                                                         np.mean(r["steps"][budget // 2:]) for r in top]))
    return result


def draw_elastic(results):
    """Perplexity at each budget M (uniform steps), one line per model; and for a model studied at one budget, every
    schedule of that budget, best to worst (dots: the spread is small against the perplexity, so no bars cut short)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with_schedules = [(n, r) for n, r in results.items() if "all_schedules" in r]
    fig, axes = plt.subplots(1, 1 + len(with_schedules), figsize=(5.5 * (1 + len(with_schedules)), 4.2),
                             squeeze=False)
    ax = axes[0][0]
    for name, r in results.items():
        Ms = sorted(r["budgets"], key=int)
        ax.plot([int(m) for m in Ms], [r["budgets"][m] for m in Ms], "o-", label=readable(name))
    ax.set_xticks(sorted({int(m) for r in results.values() for m in r["budgets"]}))
    ax.set_xlabel("budget M (loop steps, uniform schedule)")
    ax.set_ylabel(readable("val_ppl"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    for ax, (name, r) in zip(axes[0][1:], with_schedules):
        rows = sorted(r["all_schedules"], key=lambda row: row["ppl"])
        ax.plot(range(1, len(rows) + 1), [row["ppl"] for row in rows], "o", color="C0")
        if len(rows) <= 12:  # few enough to name each schedule by its steps (units of 1/L)
            for k, row in enumerate(rows, 1):
                ax.annotate("+".join(map(str, row["steps"])), (k, row["ppl"]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_title(f"{readable(name)}: every schedule of {len(rows[0]['steps'])} steps (in 1/{r['L']})",
                     fontsize=9)
        ax.set_xlabel("schedule, best to worst (rank)")
        ax.set_ylabel(readable("val_ppl"))
        ax.grid(alpha=0.3)
    layout(fig)
    return fig
