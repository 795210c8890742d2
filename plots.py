"""
The slide conventions every figure of the project shares: one map of readable names (axis names with their units),
log ticks a slide can read, a figure saved as a PNG beside a JSON of the numbers it shows, and the heatmap of the
matrices between loop steps (analyze.py). The analyses (analyze.py, early_exit.py) and the lab's figures of the
sweeps' statistics (lab/figures.py) draw with these.
"""
import json
import math

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


def figure(panels, width=5.0, height=4.0):
    import matplotlib  # heavy: only when a figure is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (figures only)
    fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return fig, axes[0]


def _log_ticks(fig):
    """Log axes a slide can read: over two decades or more, labels at the powers of ten; over less, at 1, 2 and 5
    times each power, where matplotlib would label its minor ticks until they run into each other; where that leaves
    fewer than two labels inside the axis, at a few round values. Between 10⁻⁴ and 10⁴ the labels are plain numbers."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, MaxNLocator, NullFormatter, StrMethodFormatter  # (figures only)
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


def save(fig, numbers, path):
    layout(fig)
    fig.savefig(path + ".png", dpi=120)
    with open(path + ".json", "w") as f:
        json.dump(numbers, f, indent=1, default=float)
    import matplotlib.pyplot as plt  # (figures only)
    plt.close(fig)
    return [path + ".png", path + ".json"]


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
