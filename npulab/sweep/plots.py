"""The plots of a sweep: Pareto scatter, heatmap over two axes, sensitivity per axis.

Each takes the row dicts of one workload (:class:`~npulab.sweep.results.SweepResults` rows)
and returns a matplotlib Figure; matplotlib loads when the first plot is drawn.
"""

from __future__ import annotations

from npulab.sweep.points import _fmt_value
from npulab.sweep.spec import _canonical


def _figure(width: float, height: float):
    from npulab.plots import _figure as figure
    return figure(width, height)


def _done(rows, metric):
    return [r for r in rows if r["status"] == "done" and r["metrics"].get(metric) is not None]


def _pareto_plot(rows, objectives, title):
    (mx, dx), (my, dy) = objectives
    fig = _figure(7.0, 5.0)
    ax = fig.add_subplot()
    pts = [r for r in _done(rows, mx) if r["metrics"].get(my) is not None]
    groups = (("infeasible", [r for r in pts if not r["feasible"]], "#bbbbbb", "x"),
              ("feasible", [r for r in pts if r["feasible"] and not r["pareto"]], "#1f77b4", "o"),
              ("Pareto front", sorted([r for r in pts if r["pareto"]],
                                      key=lambda r: r["metrics"][mx]), "#d62728", "o"))
    for label, grp, color, marker in groups:
        if grp:
            xs = [r["metrics"][mx] for r in grp]
            ys = [r["metrics"][my] for r in grp]
            ax.scatter(xs, ys, c=color, marker=marker, s=28 if label != "Pareto front" else 44,
                       label=f"{label} ({len(grp)})", zorder=3 if label == "Pareto front" else 2)
            if label == "Pareto front":
                ax.plot(xs, ys, color=color, linewidth=1, drawstyle="steps-post" if dx == "min"
                        and dy == "min" else "default", zorder=2)
    _log_if_wide(ax, [r["metrics"][mx] for r in pts], "x")
    _log_if_wide(ax, [r["metrics"][my] for r in pts], "y")
    ax.set_xlabel(f"{mx} ({dx})")
    ax.set_ylabel(f"{my} ({dy})")
    ax.set_title(f"{title}: Pareto front", fontsize=10)
    ax.grid(True, alpha=0.3)
    if pts:
        ax.legend(fontsize=8)
    return fig


def _log_if_wide(ax, values, which):
    pos = [v for v in values if isinstance(v, (int, float)) and v > 0]
    if pos and len(pos) == len(values) and max(pos) / min(pos) > 100:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")


def _axis_values(rows, name):
    """The values of axis ``name`` in the order the spec lists them."""
    seen = {}
    for r in rows:
        seen.setdefault(_canonical(r["params"][name]), r["params"][name])
    return list(seen.values())      # rows are in index order: the spec's order


def _heatmap_plot(rows, axes, metric, direction, title):
    """The best value of ``metric`` (over the other axes) in each cell of two axes."""
    import numpy as np
    xname, yname = axes
    xs, ys = _axis_values(rows, xname), _axis_values(rows, yname)
    xi = {_canonical(v): i for i, v in enumerate(xs)}
    yi = {_canonical(v): i for i, v in enumerate(ys)}
    grid = np.full((len(ys), len(xs)), np.nan)
    pick = min if direction == "min" else max
    for r in _done(rows, metric):
        i, j = yi[_canonical(r["params"][yname])], xi[_canonical(r["params"][xname])]
        v = float(r["metrics"][metric])
        grid[i, j] = v if np.isnan(grid[i, j]) else pick(grid[i, j], v)
    fig = _figure(max(5.0, 1.0 + 0.7 * len(xs)), max(4.0, 1.2 + 0.45 * len(ys)))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=f"{metric} ({'best' if len(rows) > len(xs) * len(ys) else ''}"
                                  f" {direction})".replace("( ", "("))
    ax.set_xticks(range(len(xs)), [_fmt_value(v) for v in xs], rotation=45, ha="right",
                  fontsize=8)
    ax.set_yticks(range(len(ys)), [_fmt_value(v) for v in ys], fontsize=8)
    ax.set_xlabel(xname)
    ax.set_ylabel(yname)
    if len(xs) * len(ys) <= 144:
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for i in range(len(ys)):
            for j in range(len(xs)):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=7,
                            color="white" if grid[i, j] < mid else "black")
    ax.set_title(f"{title}: {metric}", fontsize=10)
    return fig


def _sensitivity_plot(rows, axes, metric, title):
    """Per axis and value: the median of ``metric`` over all other points, with its range."""
    import numpy as np
    n = len(axes)
    fig = _figure(min(22.0, 3.2 * n + 1.0), 4.0)
    done = _done(rows, metric)
    for k, name in enumerate(axes):
        ax = fig.add_subplot(1, n, k + 1)
        values = _axis_values(rows, name)
        med, lo, hi = [], [], []
        for v in values:
            c = _canonical(v)
            sel = [float(r["metrics"][metric]) for r in done if _canonical(r["params"][name]) == c]
            med.append(np.median(sel) if sel else np.nan)
            lo.append(min(sel) if sel else np.nan)
            hi.append(max(sel) if sel else np.nan)
        x = np.arange(len(values))
        med, lo, hi = np.array(med), np.array(lo), np.array(hi)
        ax.vlines(x, lo, hi, color="#1f77b4", alpha=0.5, linewidth=6)
        ax.plot(x, med, "o-", color="#d62728", markersize=4)
        ax.set_xticks(x, [_fmt_value(v) for v in values], rotation=45, ha="right", fontsize=7)
        ax.set_xlabel(name, fontsize=8)
        if k == 0:
            ax.set_ylabel(f"{metric} (median, range)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{title}: sensitivity of {metric}", fontsize=10)
    return fig
