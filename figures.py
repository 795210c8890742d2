"""
The figures of the sweeps' statistics (fits.py): a PNG next to a JSON of the numbers it shows, drawn as a lecturer
puts them on a slide (axis names with their units, readable names from one map, seed spread drawn; the checks are
tests/figure_checks.py). `python scaling.py fit ...` and `python scaling.py figures records/` call them;
early_exit.py and analyze.py name their runs with `readable`; `heatmap` draws the matrices between loop steps of
analyze.py and residual_growth.py.
"""
import json
import math

import numpy as np


# What a slide says for a field, an arch or a group key: ONE map (issue 30), axis names with their unit in brackets,
# group keys as a format. A name not in it (an arm of a sweep) is shown with spaces for its underscores.
NAMES = {"params_active": "active parameters N (count)", "params_unique_nonembed": "unique parameters N (count)",
         "val_loss": "validation loss (nats)", "lr": "peak learning rate (dimensionless)",
         "flops_budget": "training compute C (FLOPs)", "n_embd": "width {}", "n_layer": "{} layers",
         "n_loop": "loop count {}", "val_ppl": "validation perplexity (e^nats per token)", "arch": "{}"}
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def readable(name):
    return NAMES.get(str(name), str(name).replace("_", " "))


def group_name(keys, values):
    """('n_layer', 'n_loop'), (4, 2) -> '4 layers, loop count 2'."""
    values = values if isinstance(values, (list, tuple)) else [values]
    return ", ".join(NAMES.get(k, k.replace("_", " ") + " {}").format(v) for k, v in zip(keys, values))


def flops_name(C):
    """3e11 -> '3×10¹¹ FLOPs', as a slide writes a budget."""
    exponent = math.floor(math.log10(C) + 1e-9)
    mantissa = f"{C / 10 ** exponent:.3g}"
    return ("" if mantissa == "1" else mantissa + "×") + "10" + str(exponent).translate(SUPERSCRIPT) + " FLOPs"


def _figure(panels, width=5.0, height=4.0):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return fig, axes[0]


def _log_ticks(fig):
    """Log axes a slide can read: over two decades or more, labels at the powers of ten; over less, at 1, 2 and 5
    times each power, where matplotlib would label its minor ticks until they run into each other; where that leaves
    fewer than two labels inside the axis, at a few round values. Between 10⁻⁴ and 10⁴ the labels are plain numbers."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, MaxNLocator, NullFormatter, StrMethodFormatter
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if (axis.get_scale() != "log" or type(axis.get_major_locator()) is not LogLocator  # fixed ticks stay,
                    or axis.get_transform().base != 10):                                      # and base-2 axes
                continue
            lo, hi = sorted((lo, hi))
            subs = (1, 2, 5) if math.log10(hi / lo) < 2 else (1,)
            powers = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            inside = [m * 10.0 ** e for e in powers for m in subs if lo <= m * 10.0 ** e <= hi]
            axis.set_major_locator(LogLocator(subs=subs) if len(inside) >= 2 else MaxNLocator(4))
            plain = 1e-4 <= lo and hi <= 1e4  # 0.002 and 12 as a slide writes them; 2×10⁵ beyond
            axis.set_major_formatter(StrMethodFormatter("{x:g}") if plain else
                                     LogFormatterSciNotation(minor_thresholds=(math.inf, math.inf)))  # label each
            axis.set_minor_formatter(NullFormatter())


def layout(fig):
    """A figure laid out for a slide: readable log ticks, then nothing cut off or overlapping."""
    _log_ticks(fig)
    fig.tight_layout()


def _save(fig, numbers, path):
    layout(fig)
    fig.savefig(path + ".png", dpi=120)
    with open(path + ".json", "w") as f:
        json.dump(numbers, f, indent=1, default=float)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return [path + ".png", path + ".json"]


def plot_isoflop(result, path):
    """Lee et al. Fig. 3/4 style: isoFLOP parabolas with stars at the optima and the power law through them, one
    panel per architecture, then all power laws together. Each run is a dot (several seeds: several dots)."""
    archs = [a for a in result if "alpha" in result[a]] or list(result)
    fig, axes = _figure(len(archs) + 1)
    colors = _colors(max(len(v["budgets"]) for v in result.values()))
    n_label = readable(next((result[a]["n_key"] for a in archs if "n_key" in result[a]), "params_active"))
    for ax, arch in zip(axes, archs):
        for color, b in zip(colors, result[arch]["budgets"]):
            N, loss = np.array(b["N"]), np.array(b["loss"])
            ax.scatter(N, loss, color=color, s=14, label=flops_name(b["flops_budget"]))
            if "coef" in b:
                lo, hi = np.log([min(N.min(), b.get("N_opt", np.inf)), max(N.max(), b.get("N_opt", 0))])
                x = np.linspace(lo - 0.2, hi + 0.2, 100)
                ax.plot(np.exp(x), np.polyval(b["coef"], x), color=color, lw=1)
            if "N_opt" in b:  # a hollow star: the minimum lies outside the sampled widths (extrapolated)
                ax.scatter([b["N_opt"]], [b["loss_opt"]], marker="*", s=140, color=color if b["inside"] else "none",
                           edgecolor=color if not b["inside"] else "k", zorder=3)
        _power_line(ax, result[arch], "k", f"$L \\propto N^{{-{result[arch].get('alpha', float('nan')):.3f}}}$")
        ax.set(xscale="log", title=readable(arch), xlabel=n_label, ylabel=readable("val_loss"))
        _legend(ax)
    for color, arch in zip(_colors(len(archs)), archs):
        opt = [b for b in result[arch]["budgets"] if "N_opt" in b]
        axes[-1].scatter([b["N_opt"] for b in opt], [b["loss_opt"] for b in opt], marker="*", s=100, color=color)
        _power_line(axes[-1], result[arch], color, f"{readable(arch)}: α = {result[arch].get('alpha', math.nan):.3f}")
    axes[-1].set(xscale="log", title="compute-optimal points", xlabel=n_label, ylabel=readable("val_loss"))
    _legend(axes[-1])
    return _save(fig, result, path)


def _power_line(ax, res, color, label):
    if "alpha" not in res:
        return
    N = np.array([b["N_opt"] for b in res["budgets"] if "N_opt" in b])
    x = np.geomspace(N.min() / 1.5, N.max() * 1.5, 50)
    ax.plot(x, res["k"] * x ** -res["alpha"], "--", color=color, lw=1, label=label)


def _legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _colors(n):
    import matplotlib
    return [matplotlib.colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]


def plot_chinchilla(result, rows, path):
    """Per architecture the runs with the law's isoFLOP curves L(N, C/F(N)); then the compute-optimal N*(C) and
    D*(C) of every architecture (Schwethelm et al. Fig. 2 and 3)."""
    from fits import column, flops_curve, group_by, law_data, law_predict, run_flops  # the law it draws
    archs = list(result)
    fig, axes = _figure(len(archs) + 2)
    by_arch = group_by(rows, "arch")
    for ax, arch in zip(axes, archs):
        fit, arch_rows = result[arch], by_arch[arch]
        theta = np.array(fit["theta"])
        N = column(arch_rows, fit["n_key"])
        F_of = flops_curve(N, run_flops(arch_rows))
        for color, (C, cell) in zip(_colors(len(fit["budgets"])), group_by(arch_rows, "flops_budget").items()):
            ax.scatter(column(cell, fit["n_key"]), column(cell, "val_loss"), color=color, s=14, label=flops_name(C))
            n = np.geomspace(N.min() / 1.5, N.max() * 1.5, 100)
            ax.plot(n, law_predict(theta, law_data(n, 0 * n, 1 + 0 * n, C / F_of(n), 1 + 0 * n)), color=color, lw=1)
        ax.set(xscale="log", title=f"{readable(arch)}: α = {fit['alpha']:.3f}, β = {fit['beta']:.3f}, "
                                   f"R² = {fit['r2']:.4f}", xlabel=readable(fit["n_key"]), ylabel=readable("val_loss"))
        _legend(ax)
    for color, arch in zip(_colors(len(archs)), archs):
        co, fit = result[arch]["compute_optimal"], result[arch]
        axes[-2].plot(co["flops"], co["N"], color=color,
                      label=f"{readable(arch)}: $\\propto C^{{{fit.get('N_opt_exponent', 0):.2f}}}$")
        axes[-1].plot(co["flops"], co["D"], color=color,
                      label=f"{readable(arch)}: $\\propto C^{{{fit.get('D_opt_exponent', 0):.2f}}}$")
    axes[-2].set(xscale="log", yscale="log", title="compute-optimal N*", xlabel=readable("flops_budget"),
                 ylabel="compute-optimal N* (count)")
    axes[-1].set(xscale="log", yscale="log", title="compute-optimal D*", xlabel=readable("flops_budget"),
                 ylabel="compute-optimal D* (tokens)")
    _legend(axes[-2])
    _legend(axes[-1])
    return _save(fig, result, path)


def plot_joint(result, path):
    """Schwethelm et al. Fig. 1: N(r), F(r) and N_eff(r) relative to r=1 at matched width; compute-optimal loss
    per r against C with the free-phi fit (solid) and the phi=1 fit (dashed); the bootstrap distribution of phi."""
    fig, axes = _figure(3)
    eq, phi = result["equivalent_size"], result["free"]["phi"]
    r = [1] + [int(k) for k in eq]
    axes[0].plot(r, [1] + [eq[k]["N_ratio"] for k in eq], "o-", label="unique parameters N(r)")
    axes[0].plot(r, [1] + [eq[k]["train_flops_ratio"] for k in eq], "s-", label="training compute F(r)")
    axes[0].plot(r, [1] + [eq[k]["N_eff_ratio"] for k in eq], "^-", label=f"effective parameters, φ = {phi:.2f}")
    axes[0].set(xscale="log", xticks=r, xticklabels=[str(v) for v in r], xlabel="recurrences r (count)",
                ylabel="relative to r = 1 (ratio)", title="iso-depth accounting")
    axes[0].minorticks_off()
    _legend(axes[0])
    for color, (r_loop, fr) in zip(_colors(len(result["frontier"])), result["frontier"].items()):
        axes[1].plot(fr["flops"], fr["free"], "-", color=color, label=f"r = {r_loop}")
        axes[1].plot(fr["flops"], fr["phi=1"], "--", color=color, lw=0.8)
        axes[1].scatter([b["flops_budget"] for b in fr["best_runs"]], [b["loss"] for b in fr["best_runs"]],
                        marker="x", color=color)
    axes[1].set(xscale="log", xlabel=readable("flops_budget"), ylabel="compute-optimal loss (nats)",
                title=f"φ = {phi:.2f} (solid), φ = 1 (dashed)")
    _legend(axes[1])
    if "bootstrap" in result:
        axes[2].hist(result["bootstrap"]["phi_values"], bins=30, color="0.6")
        for v in result["bootstrap"]["phi_ci"]:
            axes[2].axvline(v, ls=":", color="k")
    axes[2].axvline(phi, color="r")
    axes[2].set(xlabel="φ (dimensionless)", ylabel="bootstrap resamples (count)", title="block bootstrap of φ")
    return _save(fig, result, path)


def plot_delta_phi(result, path):
    """Each design's delta phi against the reference with its paired 95% interval; 0 dotted."""
    fig, (ax,) = _figure(1, width=6.0, height=1.2 + 0.5 * len(result))
    for i, (name, e) in enumerate(result.items()):
        lo, hi = e.get("delta_phi_ci", (e["delta_phi"], e["delta_phi"]))
        ax.errorbar(e["delta_phi"], i, xerr=[[e["delta_phi"] - lo], [hi - e["delta_phi"]]], fmt="o", color="k",
                    capsize=3)
    ax.axvline(0.0, ls=":", color="k")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(5))  # a narrow panel: few enough ticks that their labels do not touch
    ax.set(yticks=range(len(result)), xlabel="Δφ against the reference (dimensionless; 95% paired bootstrap)",
           yticklabels=[f"{readable(n)} (φ {e['phi']:.2f} vs {e['phi_reference']:.2f})" for n, e in result.items()])
    return _save(fig, result, path)


def plot_compare(result, path):
    """Left: each arm's metric, one dot per training seed, a bar at the mean from zero, mean ± sd over seeds.
    Right: the comparison a verdict tests, each seed's difference from the reference arm at that seed."""
    arms, ref = result["arms"], result["reference"]
    fig, axes = _figure(2, width=1.6 + 0.6 * len(arms), height=4.5)
    names = [readable(a) for a in arms]
    for i, a in enumerate(arms.values()):
        axes[0].bar(i, a["mean"], color="0.85", width=0.6, yerr=a["sd"] or 0, capsize=3)
        axes[0].scatter([i] * len(a["values"]), list(a["values"].values()), color="k", s=14, zorder=3)
        d = list(a["diff_per_seed"].values())
        axes[1].errorbar(i, np.mean(d), yerr=np.std(d, ddof=1) if len(d) > 1 else 0, fmt="_", color="k", capsize=3)
        axes[1].scatter([i] * len(d), d, color="k", s=14, zorder=3)
    axes[1].axhline(0.0, ls=":", color="k")
    unit = readable(result["metric"]).rpartition(" (")[2].rstrip(")")
    axes[0].set(ylabel=readable(result["metric"]), ylim=(0, None), title="mean ± sd over seeds")
    axes[1].set(ylabel=f"difference ({unit})", title=f"each seed minus {readable(ref)} at that seed")
    for ax in axes:
        ax.set_xticks(range(len(arms)), names, rotation=0 if max(map(len, names)) <= 8 else 90)
    return _save(fig, result, path)


def plot_lr(result, path):
    """Loss against learning rate per group, one panel per panel value: the mean over training seeds with a band of
    ± one sd over seeds, stars at the optima, the transferred LR dotted (Lee et al. Fig. 2; Wang et al. Fig. 5)."""
    fig, axes = _figure(len(result))
    for ax, (p, res) in zip(axes, result.items()):
        for color, g in zip(_colors(len(res["groups"])), res["groups"].values()):
            order = np.argsort(g["lr"])
            lr, loss, sd = (np.array(g[k], dtype=float)[order] for k in ("lr", "loss", "seed_sd"))
            ax.plot(lr, loss, "o-", color=color, ms=3, label=f"{group_name(res['group_keys'], g['group'])}: "
                                                               f"regret {g['regret']:.3f} nats")
            ax.fill_between(lr, loss - sd, loss + sd, where=np.isfinite(sd), color=color, alpha=0.2, lw=0)
            ax.scatter([g["lr_opt"]], [g["loss_opt"]], marker="*", s=120, color=color, edgecolor="k", zorder=3)
        ax.axvline(res["transferred_lr"], ls=":", color="k")
        panel = readable(p) if res.get("panel_key", "arch") == "arch" else group_name((res["panel_key"],), p)
        ax.set(xscale="log", xlabel=readable("lr"), ylabel=readable("val_loss"),
               title=f"{panel}: largest regret {res['max_regret']:.3f} nats")
        _legend(ax)
    return _save(fig, result, path)


def plot_elastic_curves(curves, path):
    """Perplexity against the budget M: each arm's mean over seeds, a band from its lowest to its highest seed, and
    every seed as a dot."""
    fig, (ax,) = _figure(1, width=6.0, height=4.5)
    for i, (arm, per_m) in enumerate(curves.items()):
        Ms = sorted(per_m)
        ax.plot(Ms, [np.mean(per_m[M]) for M in Ms], "o-", color=f"C{i}", label=arm)
        ax.fill_between(Ms, [min(per_m[M]) for M in Ms], [max(per_m[M]) for M in Ms], color=f"C{i}", alpha=0.2)
        ax.scatter([M for M in Ms for _ in per_m[M]], [p for M in Ms for p in per_m[M]], color=f"C{i}", s=10)
    ax.set(xlabel="budget M (loop steps, uniform schedule)", ylabel="validation perplexity (e^nats per token)",
           xticks=sorted({M for per_m in curves.values() for M in per_m}),
           title=f"mean over {len(next(iter(next(iter(curves.values())).values())))} seeds, band: lowest to highest")
    ax.legend(fontsize=8)
    return _save(fig, {arm: {str(M): v for M, v in per_m.items()} for arm, per_m in curves.items()}, path)


def heatmap(ax, matrix, title, axis_label, vmin=None, vmax=None, first=1):
    """A square matrix (cosines or CKA between loop steps) with its values written in when it is small enough to
    read; the steps numbered from `first`."""
    im = ax.imshow(matrix, cmap="viridis", vmin=vmin, vmax=vmax)
    n = len(matrix)
    if n <= 12:
        for i in range(n):
            for j in range(n):
                light = im.norm(matrix[i, j]) > 0.6  # dark text on the yellow end of viridis
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=6, color="k" if light else "w")
    ticks = range(0, n, max(1, n // 8))
    ax.set(title=title, xlabel=axis_label, ylabel=axis_label, xticks=ticks, yticks=ticks,
           xticklabels=[t + first for t in ticks], yticklabels=[t + first for t in ticks])
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
