"""
The figures of the sweeps' statistics (fits.py): a PNG next to a JSON of the numbers it shows, drawn as a lecturer
puts them on a slide (axis names with their units, readable names from one map, seed spread drawn; the checks are
tests/figure_checks.py), with the slide conventions of analyze.py. `python scaling.py fit ...` and
`python scaling.py figures records/` call them.
"""
import math

import numpy as np
import scipy.stats

from analyze import figure, flops_name, group_name, pyplot, readable, save  # the slide conventions (Agg)


def plot_isoflop(result, path):
    """Lee et al. Fig. 3/4 style: isoFLOP parabolas with stars at the optima and the power law through them, one
    panel per architecture, then all power laws together. Each run is a dot (several seeds: several dots)."""
    archs = [a for a in result if "alpha" in result[a]] or list(result)
    fig, axes = figure(len(archs) + 1)
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
    return save(fig, result, path)


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
    import matplotlib  # heavy: only when a figure is drawn
    return [matplotlib.colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]


def plot_chinchilla(result, curves, path):
    """Per architecture the runs with the law's isoFLOP curves L(N, C/F(N)) (lab.fits.chinchilla_curves computes
    them); then the compute-optimal N*(C) and D*(C) of every architecture (Schwethelm et al. Fig. 2 and 3)."""
    archs = list(result)
    fig, axes = figure(len(archs) + 2)
    for ax, arch in zip(axes, archs):
        fit, budgets = result[arch], curves[arch]
        for color, (C, n_runs, loss_runs, n, loss) in zip(_colors(len(budgets)), budgets):
            ax.scatter(n_runs, loss_runs, color=color, s=14, label=flops_name(C))
            ax.plot(n, loss, color=color, lw=1)
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
    return save(fig, result, path)


def plot_joint(result, path):
    """Schwethelm et al. Fig. 1: N(r), F(r) and N_eff(r) relative to r=1 at matched width; compute-optimal loss
    per r against C with the free-phi fit (solid) and the phi=1 fit (dashed); the bootstrap distribution of phi."""
    fig, axes = figure(3)
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
    return save(fig, result, path)


def plot_delta_phi(result, path):
    """Each design's delta phi against the reference with its paired 95% bootstrap interval (runs resampled: a
    description, records/README.md rule 1; the verdict's figure is the per-seed family's); 0 dotted."""
    fig, (ax,) = figure(1, width=8.0, height=1.5 + 0.5 * len(result))
    for i, (name, e) in enumerate(result.items()):
        lo, hi = e.get("delta_phi_ci", (e["delta_phi"], e["delta_phi"]))
        ax.errorbar(e["delta_phi"], i, xerr=[[e["delta_phi"] - lo], [hi - e["delta_phi"]]], fmt="o", color="k",
                    capsize=3)
    ax.axvline(0.0, ls=":", color="k")
    from matplotlib.ticker import MaxNLocator  # (figures only)
    ax.xaxis.set_major_locator(MaxNLocator(5))  # a narrow panel: few enough ticks that their labels do not touch
    ax.set(yticks=range(len(result)), xlabel="Δφ against the reference (dimensionless)",
           title="95% paired bootstrap of runs: a description",
           yticklabels=[f"{readable(n)} (φ {e['phi']:.2f} vs {e['phi_reference']:.2f})" for n, e in result.items()])
    return save(fig, result, path)


def plot_differences(family, path, unit):
    """A finding's comparisons as its verdict reads them (records/README.md rules 1-5), a panel each (their scales
    differ: a change of 0.1 beside a distance of 1.6 from the paper): each training seed's difference a dot, their
    mean, and the interval the test draws its line with: a TOST's (1 - 2 alpha) interval between its margins
    (dashed), else the t-interval over the family at level 1 - 0.05 / (m x looks), which excludes 0 only where Holm
    rejects too (it is Holm's first step), so no comparison the verdict leaves inconclusive looks decided; 0 dotted.
    A panel spans three times its seeds' reach (and its margins): an interval of two seeds over a family can be a
    hundred times wider; it is cut at the edge, its end written. family: a `python -m lab.fits family` result; unit:
    the x axis, "what (unit)"."""
    names = [n for n, e in family.items() if isinstance(e, dict) and "per_seed" in e]
    fig, axes = pyplot().subplots(len(names), 1, figsize=(7.0, 0.4 + 1.5 * len(names)), squeeze=False)
    shown = {}
    for ax, n in zip(axes[:, 0], names):
        e = family[n]
        edge = 3 * max(abs(v) for v in e["per_seed"] + [e.get("margin", 0)])
        if "interval" in e:  # a TOST: its interval and its margins
            (lo, hi), level = e["interval"], e["level"]
            for m in (-e["margin"], e["margin"]):
                ax.axvline(m, ls="--", color="0.5")
        else:
            level = 1 - 0.05 / (len(names) * e.get("looks", 1))
            half = float(scipy.stats.t.ppf(1 - (1 - level) / 2, e["df"])) * e["se"]
            lo, hi = e["mean"] - half, e["mean"] + half
        cut_lo, cut_hi = max(lo, -edge), min(hi, edge)
        ax.errorbar(e["mean"], 0, xerr=[[e["mean"] - cut_lo], [cut_hi - e["mean"]]], fmt="D", color="k", capsize=4)
        for end, cut, side in ((lo, cut_lo, "left"), (hi, cut_hi, "right")):
            if end != cut:
                ax.annotate(f"{end:+.3g} →" if side == "right" else f"← {end:+.3g}", (cut, 0), xytext=(0, 6),
                            textcoords="offset points", ha=side, fontsize=8)
        ax.scatter(e["per_seed"], [0] * len(e["per_seed"]), s=16, color="C0", zorder=3)
        ax.axvline(0.0, ls=":", color="k")
        ax.yaxis.set_visible(False)
        ax.set(xlim=(-1.1 * edge, 1.1 * edge), ylim=(-1, 1), xlabel=unit)
        ax.set_title(f"{readable(n)}\nHolm p {'< 0.001' if e['holm_p'] < 0.001 else format(e['holm_p'], '.2g')}, "
                     f"{len(e['per_seed'])} seeds, {100 * level:.3g}% interval", fontsize=9)
        shown[n] = dict(per_seed=e["per_seed"], mean=e["mean"], interval=[lo, hi], level=level,
                        holm_p=e["holm_p"], verdict=e.get("verdict"))
    return save(fig, shown, path)


def plot_compare(result, path):
    """Left: each arm's metric, one dot per training seed, a bar at the mean from zero, mean ± sd over seeds.
    Right: the comparison a verdict tests, each seed's difference from the reference arm at that seed."""
    arms, ref = result["arms"], result["reference"]
    fig, axes = figure(2, width=1.6 + 0.6 * len(arms), height=4.5)
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
    return save(fig, result, path)


def plot_lr(result, path):
    """Loss against learning rate per group, one panel per panel value: the mean over training seeds with a band of
    ± one sd over seeds, stars at the optima, the transferred LR dotted (Lee et al. Fig. 2; Wang et al. Fig. 5)."""
    fig, axes = figure(len(result))
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
    return save(fig, result, path)


def plot_elastic_curves(curves, path):
    """Perplexity against the budget M: each arm's mean over seeds, a band from its lowest to its highest seed, and
    every seed as a dot."""
    fig, (ax,) = figure(1, width=6.0, height=4.5)
    for i, (arm, per_m) in enumerate(curves.items()):
        Ms = sorted(per_m)
        ax.plot(Ms, [np.mean(per_m[M]) for M in Ms], "o-", color=f"C{i}", label=arm)
        ax.fill_between(Ms, [min(per_m[M]) for M in Ms], [max(per_m[M]) for M in Ms], color=f"C{i}", alpha=0.2)
        ax.scatter([M for M in Ms for _ in per_m[M]], [p for M in Ms for p in per_m[M]], color=f"C{i}", s=10)
    ax.set(xlabel="budget M (loop steps, uniform schedule)", ylabel="validation perplexity (e^nats per token)",
           xticks=sorted({M for per_m in curves.values() for M in per_m}),
           title=f"mean over {len(next(iter(next(iter(curves.values())).values())))} seeds, band: lowest to highest")
    ax.legend(fontsize=8)
    return save(fig, {arm: {str(M): v for M, v in per_m.items()} for arm, per_m in curves.items()}, path)
