"""Checks of a figure as a lecturer would put it on a slide, run on the Matplotlib objects themselves (the evidence
issue's standard): readable names and units, no overlapping tick labels, bar axes from zero, every number of the
figure's JSON drawn, the seed spread drawn. Used by the tests of fits.py, early_exit.py and analyze.py figures."""
import itertools
import re

import numpy as np


def figure_problems(fig):
    """What a slide may not show: an axis label without its unit in brackets (a categorical axis needs none), a
    field name, 'C=3e+11' or a bare tuple as a name, a bar axis without zero, tick labels that overlap, layers or
    passes numbered from 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.container import BarContainer
    from matplotlib.ticker import FixedFormatter, FuncFormatter
    fig.set_dpi(40)  # a small raster: the layout, text sizes included, scales with dpi, so overlaps do not change
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer, problems = canvas.get_renderer(), []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>" or not ax.axison:  # a heatmap's scale (its title says what it
            continue                                            # measures), or an empty grid cell turned off
        legend = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            if not axis.get_visible():  # a twin axes' shared x axis: drawn by its partner
                continue
            named_ticks = isinstance(axis.get_major_formatter(), (FixedFormatter, FuncFormatter))  # categories
            if not re.search(r"\([^()]+\)$", label) and not (named_ticks and not label):
                problems.append(f"axis label without a unit: {label!r}")
            if re.match(r"([a-z]+ )?(layer|pass) \(", label):  # "pass (...)", "effective layer (...)": counted from 1
                lo, hi = sorted(axis.get_view_interval())
                ticks = [float(t.get_text().replace("\u2212", "-"))  # the labels as drawn (a heatmap's are not its
                         for x, t in zip(axis.get_majorticklocs(), axis.get_majorticklabels())  # tick locations)
                         if lo <= x <= hi and re.fullmatch(r"[\u2212-]?\d+(\.\d+)?", t.get_text())]
                if not label.endswith("(counted from 1)") or any(t < 1 or not t.is_integer() for t in ticks):
                    problems.append(f"layers or passes not counted from 1 (whole numbers) on the axis {label!r}: "
                                    f"ticks {ticks}")
            boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels(which="both")  # a log axis within
                     if t.get_visible() and t.get_text()]                                     # a decade: minor labels
            if any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2)):
                problems.append(f"tick labels overlap on the axis {label!r}")
        for name in legend + [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]:
            if re.search(r"_|\bC=|\de[+-]?\d|^[(\[]", name):
                problems.append(f"unreadable name {name!r}")
        problems += [f"a field name as a tick label: {t.get_text()!r}" for t in ax.get_xticklabels() +
                     ax.get_yticklabels() if "_" in t.get_text()]
        if any(isinstance(c, BarContainer) for c in ax.containers) and ax.get_ylim()[0] > 0:
            problems.append(f"a bar axis without zero: {ax.get_ylim()}")
    return problems


def plotted(fig):
    """Every (x, y) a figure draws: line vertices, scatter and error bar points, the tops of the bars."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    points = [[(0.0, 0.0)]]
    for ax in fig.axes:
        points += [line.get_xydata() for line in ax.lines]
        points += [c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)]
        points += [[(b.get_x() + b.get_width() / 2, b.get_height()) for b in c] for c in ax.containers
                   if isinstance(c, BarContainer)]
    return np.concatenate([np.asarray(p, dtype=float).reshape(-1, 2) for p in points])


def assert_drawn(fig, points):
    drawn_points = plotted(fig)
    missing = [p for p in points if not np.isclose(drawn_points, p, rtol=1e-9, atol=0).all(1).any()]
    assert not missing, f"{len(missing)} of {len(points)} numbers of the JSON are not drawn, e.g. {missing[:3]}"


def seed_spread_drawn(fig):
    """Every panel draws error bars or a band."""
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer
    return all(any(isinstance(c, ErrorbarContainer) for c in ax.containers) or any(
        isinstance(c, PolyCollection) for c in ax.collections) for ax in fig.axes)
