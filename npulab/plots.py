"""Plots of a run summary: roofline, cycle breakdown, energy breakdown, utilization.

Every function takes the summary dict ``npulab run -o DIR`` writes to ``summary.json``
(``{"schema": "npulab.summary/1", "run": RunResult.to_dict(), "metrics": Metrics.to_dict()}``)
and returns a :class:`matplotlib.figure.Figure` drawn on the Agg canvas (no GUI, no
``pyplot``: nothing global changes, a notebook renders the figure inline). matplotlib is
imported inside the functions, so ``import npulab`` does not need it.

Per-layer plots put one slot per costed layer on the x axis (the layers
:func:`npulab.metrics.compute_metrics` costed, in run order). The figure widens with the layer
count up to :data:`MAX_WIDTH_IN` inches; past that, only every k-th tick is labelled so that
labels never overlap (the HTML report lists every layer in its table).

Points and bars that stand for a layer carry an SVG id (``gid``) and
``fig.npulab_tooltips`` maps those ids to a one-line description, which
:func:`npulab.html_report.render_html` turns into hover titles.

The roofline is the classic one (S. Williams, A. Waterman, D. Patterson, "Roofline: an
insightful visual performance model for multicore architectures", CACM 52(4), 2009) on the
ceilings :mod:`npulab.metrics` uses: peak compute and the DRAM bandwidth slope. When the host
link carried bytes and has a bandwidth limit, each layer also appears at its ops per link byte
under the link slope (hollow markers), as in a hierarchical roofline (C. Yang, T. Kurth,
S. Williams, "Hierarchical Roofline analysis for GPUs", CCPE 32(20), 2020).
"""

from __future__ import annotations

import math
import textwrap

from npulab.metrics import ordered_components

__all__ = ["roofline", "cycle_breakdown", "energy_breakdown", "utilization", "all_plots",
           "energy_components", "PLOTS", "MAX_WIDTH_IN"]

#: Widest per-layer figure, inches; more layers than fit thin out the tick labels.
MAX_WIDTH_IN = 22.0
_MIN_WIDTH_IN = 8.0
_SLOT_IN = 0.16          # width per layer while the figure may still grow
_LABEL_PITCH_IN = 0.15   # closest two rotated 7-pt tick labels may be
_LABEL_CHARS = 24
_HEIGHT_IN = 4.6

BOUND_COLORS = {"compute": "#1f77b4", "dram": "#d62728", "link": "#9467bd", "l2": "#17becf",
                "noc": "#8c564b", None: "#7f7f7f"}
STALL_COLORS = {"compute": "#1f77b4", "dram": "#d62728", "link": "#9467bd", "sram": "#ff7f0e",
                "vector": "#2ca02c",
                "unattributed": "#bcbd22"}
_COMPONENT_COLORS = {"mac": "#1f77b4", "rf": "#aec7e8", "vector": "#2ca02c", "dram": "#d62728",
                     "link": "#9467bd", "static": "#7f7f7f", "noc": "#bcbd22"}
_SRAM_COLORS = ("#ff7f0e", "#ffbb78", "#8c564b", "#c49c94", "#e377c2")


# ---- shared helpers ---------------------------------------------------------------------------

def _figure(width_in: float, height_in: float = _HEIGHT_IN):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    fig.npulab_tooltips = {}
    return fig


def _metrics(summary: dict) -> dict:
    if not isinstance(summary, dict) or not isinstance(summary.get("metrics"), dict):
        raise ValueError("summary: expected the dict of summary.json with a 'metrics' table "
                         f"(got {type(summary).__name__}"
                         f"{' without metrics' if isinstance(summary, dict) else ''})")
    return summary["metrics"]


def _title(summary: dict, what: str) -> str:
    run = summary.get("run") or {}
    return f"{what}: {run.get('model', '?')} on {run.get('chip', '?')} ({run.get('timing', '?')})"


def _width_for(n: int) -> float:
    return min(MAX_WIDTH_IN, max(_MIN_WIDTH_IN, 2.5 + _SLOT_IN * n))


def label_step(n: int, width_in: float) -> int:
    """Label every k-th of ``n`` layer slots so labels are at least :data:`_LABEL_PITCH_IN`
    apart on an axes about ``width_in - 2`` inches wide (legend and margins take the rest)."""
    axes_in = max(1.0, width_in - 2.0)
    return max(1, math.ceil(n * _LABEL_PITCH_IN / axes_in))


def _short(name: str) -> str:
    return name if len(name) <= _LABEL_CHARS else name[:_LABEL_CHARS - 1] + "…"


def _layer_axis(ax, names: list[str], width_in: float) -> None:
    n = len(names)
    step = label_step(n, width_in)
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    ax.set_xticklabels([_short(names[i]) for i in ticks], rotation=90, fontsize=7)
    ax.set_xlim(-0.6, n - 0.4)
    label = "layer" if step == 1 else f"layer (every {step}th labelled)"
    ax.set_xlabel(label)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=10,
            gid="npulab-note", bbox={"facecolor": "white", "edgecolor": "#999999"})


def _fmt(value: float, unit: str) -> str:
    from npulab.metrics import format_si
    return format_si(value, unit)


# ---- roofline ---------------------------------------------------------------------------------

def roofline(summary: dict):
    """Achieved MACs/s of every layer (over its busy span) against its MACs per DRAM byte
    (bytes read and written), log-log, under the chip's ceilings: peak compute (horizontal)
    and the DRAM bandwidth slope (and the host-link slope, with each layer's link point, when
    the link carried bytes and has a limit). Points are coloured by the layer's ``bound``; a
    star marks the whole network. Layers that cannot be placed (no DRAM bytes, as in
    compute-only timing, or no MACs) are counted in a note. The slowest few layers are named,
    each label placed where it covers neither the star nor another label."""
    m = _metrics(summary)
    chip, layers, net = m["chip"], m["layers"], m["network"]
    fig = _figure(9.0, 5.6)
    ax = fig.add_subplot()
    peak = chip["peak_macs_per_cycle"] * chip["clock_hz"]
    dram_bw = (chip.get("dram") or {}).get("peak_bytes_per_s")
    link_bw = (chip.get("link") or {}).get("peak_bytes_per_s")
    if not peak:                    # an engine without MAC units (e.g. a data-movement engine)
        ax.set_axis_off()
        _empty(ax, "no roofline: the chip has no MAC units (peak compute 0)")
        ax.set_title(_title(summary, "Roofline"), fontsize=10)
        return fig

    placed, no_macs, no_dram = [], [], []
    for i, layer in enumerate(layers):
        x = layer["roofline"]["intensity_macs_per_byte"].get("dram")
        if not layer["macs"] or not layer["macs_per_s"]:
            no_macs.append(layer["name"])
        elif not x:
            no_dram.append(layer["name"])
        else:
            placed.append((i, layer, x))
    link_points = []
    if link_bw:
        for i, layer in enumerate(layers):
            xl = layer["roofline"]["intensity_macs_per_byte"].get("link")
            if xl and layer["macs_per_s"]:
                link_points.append((i, layer, xl))
    # a shared L2: its slope, and each layer at its MACs per L2 byte
    l2 = (chip.get("srams") or {}).get("l2")
    l2_bw = l2["peak_bytes_per_cycle"] * chip["clock_hz"] if l2 else None
    l2_points = [(i, layer, layer["roofline"]["intensity_macs_per_byte"]["sram.l2"])
                 for i, layer in enumerate(layers)
                 if l2_bw and layer["macs_per_s"]
                 and layer["roofline"]["intensity_macs_per_byte"].get("sram.l2")]

    xs = [x for _, _, x in placed + link_points + l2_points]
    ridges = [peak / bw for bw in (dram_bw, link_bw, l2_bw) if bw]
    lo = min(xs + ridges) / 4 if xs or ridges else 0.1
    hi = max(xs + ridges) * 4 if xs or ridges else 1e4
    if not xs:
        lo, hi = min([0.1] + [r / 10 for r in ridges]), max([1e4] + [r * 10 for r in ridges])
    tera = 1e-12
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot([lo, hi], [peak * tera] * 2, color="black", lw=2,
            label=f"peak compute {peak * tera:.3g} TMAC/s ({2 * peak * tera:.3g} TOPS)",
            gid="roofline-ceiling-compute")
    names = {"dram": "DRAM", "link": "host link", "l2": "L2"}
    for level, bw, style in (("dram", dram_bw, "-"), ("link", link_bw if link_points else None, "--"),
                             ("l2", l2_bw if l2_points else None, ":")):
        if not bw:
            continue
        ridge = peak / bw
        x0 = lo
        x1 = min(hi, ridge)
        ax.plot([x0, x1], [x0 * bw * tera, x1 * bw * tera], color=BOUND_COLORS[level], lw=2,
                ls=style, gid=f"roofline-ceiling-{level}",
                label=f"{names[level]} {bw / 1e9:.3g} GB/s (ridge {ridge:.3g} MAC/B)")

    seen_bounds = set()
    for i, layer, x in placed:
        b = layer["bound"]
        label = f"layer bound: {b}" if b not in seen_bounds else None
        seen_bounds.add(b)
        art = ax.scatter([x], [layer["macs_per_s"] * tera], s=28, color=BOUND_COLORS.get(b, "#7f7f7f"),
                         edgecolors="black", linewidths=0.4, zorder=3, label=label)
        gid = f"roofline-dram-{i}"
        art.set_gid(gid)
        fig.npulab_tooltips[gid] = (f"{layer['name']} ({layer['op']}): {x:.3g} MAC/B, "
                                    f"{layer['macs_per_s'] * tera:.3g} TMAC/s, bound {b}")
    # hollow points: each layer at its MACs per link byte, and per L2 byte
    for points, level, marker, size, what in ((link_points, "link", "o", 28, "link"),
                                              (l2_points, "l2", "D", 22, "L2")):
        first = True
        for i, layer, x in points:
            art = ax.scatter([x], [layer["macs_per_s"] * tera], s=size, marker=marker,
                             facecolors="none", edgecolors=BOUND_COLORS[level], linewidths=0.9,
                             zorder=3, label=f"layer at MACs per {what} byte" if first else None)
            first = False
            gid = f"roofline-{level}-{i}"
            art.set_gid(gid)
            fig.npulab_tooltips[gid] = (f"{layer['name']} ({layer['op']}): {x:.3g} MACs/{what} "
                                        f"byte, {layer['macs_per_s'] * tera:.3g} TMAC/s")
    xn = net["roofline"]["intensity_macs_per_byte"].get("dram")
    star = None
    if xn and net["macs_per_s"]:
        star = ax.scatter([xn], [net["macs_per_s"] * tera], marker="*", s=160, color="gold",
                          edgecolors="black", linewidths=0.6, zorder=4, label="whole network")
        star.set_gid("roofline-network")
        fig.npulab_tooltips["roofline-network"] = (
            f"network: {xn:.3g} MAC/B, {net['macs_per_s'] * tera:.3g} TMAC/s, "
            f"bound {net['roofline']['bound']}")

    notes = []
    if no_dram:
        everything = len(no_dram) + len(no_macs) == len(layers)   # none with MACs has DRAM bytes
        why = " (compute-only timing: operands assumed in SRAM)" if everything else ""
        notes.append(f"{len(no_dram)} of {len(layers)} layers not placed: no DRAM bytes, "
                     f"MACs per DRAM byte undefined{why}")
    if no_macs:
        notes.append(f"{len(no_macs)} layers not placed: no MACs (e.g. {_short(no_macs[0])})")
    if not dram_bw:
        notes.append("DRAM bandwidth unlimited (ideal DRAM): no DRAM slope")
    if notes:
        text = "\n".join(textwrap.fill(note, 70) for note in notes)
        if placed:
            ax.text(0.01, 0.01, text, transform=ax.transAxes, fontsize=8,
                    va="bottom", ha="left", gid="npulab-note",
                    bbox={"facecolor": "white", "edgecolor": "#999999", "alpha": 0.9})
        else:
            _empty(ax, text)
    ax.set_xlim(lo, hi)
    ys = [layer["macs_per_s"] * tera for _, layer, _ in placed + link_points + l2_points]
    ymin = min(ys + [peak * tera]) / (10 if ys else 1000)
    ax.set_ylim(ymin, peak * tera * 3)
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte"
                  + ("; hollow: per link byte" if link_points else "")
                  + ("; diamonds: per L2 byte" if l2_points else "") + ")")
    ax.set_ylabel("achieved performance (TMAC/s; 1 MAC = 2 ops)")
    ax.set_title(_title(summary, "Roofline"), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    legend = ax.legend(fontsize=7, loc="upper left")
    _name_slowest(fig, ax, placed, star, legend)
    return fig


#: Where a layer's name may go, in points from its dot: (dx, dy, ha, va), tried in order.
_LABEL_OFFSETS = ((4, -4, "left", "top"), (4, 4, "left", "bottom"), (-4, 4, "right", "bottom"),
                  (-4, -4, "right", "top"), (0, -9, "center", "top"), (0, 9, "center", "bottom"))


def _name_slowest(fig, ax, placed, star, legend, count: int = 4) -> None:
    """Name the ``count`` slowest layers of ``placed`` (the ones worth a look; every point has
    a hover title in the HTML report), skipping one that sits right next to a layer already
    named. Each label takes the first of :data:`_LABEL_OFFSETS` whose box overlaps neither the
    network's star, the legend, another label, nor leaves the axes."""
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    from matplotlib.transforms import Bbox
    taken = [legend.get_window_extent(renderer)] if legend else []
    if star is not None:
        # a scatter marker's box: its centre in display units, sqrt(s) points across
        cx, cy = ax.transData.transform(star.get_offsets()[0])
        half = 0.6 * math.sqrt(star.get_sizes()[0]) * fig.dpi / 72
        taken.append(Bbox.from_extents(cx - half, cy - half, cx + half, cy + half))
    box = ax.get_window_extent(renderer)
    named: list[tuple[float, float]] = []
    for i, layer, x in sorted(placed, key=lambda p: -p[1]["cycles"]):
        y = layer["macs_per_s"] * 1e-12
        if len(named) == count:
            break
        if any(abs(math.log10(x / nx)) < 0.15 and abs(math.log10(y / ny)) < 0.15 for nx, ny in named):
            continue
        named.append((x, y))
        for dx, dy, ha, va in _LABEL_OFFSETS:
            text = ax.annotate(_short(layer["name"]), (x, y), fontsize=7, xytext=(dx, dy),
                               textcoords="offset points", ha=ha, va=va,
                               gid=f"roofline-label-{i}")
            text.set_in_layout(False)
            ext = text.get_window_extent(renderer)
            inside = (ext.x0 >= box.x0 and ext.x1 <= box.x1 and ext.y0 >= box.y0
                      and ext.y1 <= box.y1)
            if inside and not any(ext.overlaps(t) for t in taken):
                taken.append(ext)
                break
            text.remove()
        else:
            text = ax.annotate(_short(layer["name"]), (x, y), fontsize=7, xytext=(4, -4),
                               textcoords="offset points", ha="left", va="top",
                               gid=f"roofline-label-{i}")
            text.set_in_layout(False)
            taken.append(text.get_window_extent(renderer))


# ---- cycles -----------------------------------------------------------------------------------

def cycle_parts(layer: dict) -> dict:
    """Compute cycles and stall cycles by cause (``dram``, ``link``, ``sram``, ``vector``: waiting
    for the vector engine) of a metrics layer, plus ``unattributed`` cycles if the parts do not
    add up to the layer's cycles."""
    parts = {"compute": layer["compute_cycles"]}
    for cause in ("dram", "link", "sram", "vector"):
        parts[cause] = (layer.get("stall_cycles") or {}).get(cause) or 0
    rest = layer["cycles"] - sum(parts.values())
    if rest:
        parts["unattributed"] = rest
    return parts


def _per_layer_figure(summary: dict):
    """(layers, names, figure, axes) of a one-axes plot with a bar or point per layer, the
    figure sized for the layer count; an empty run gets a note instead of axes content."""
    layers = _metrics(summary)["layers"]
    fig = _figure(_width_for(len(layers)))
    ax = fig.add_subplot()
    if not layers:
        _empty(ax, "no layer was simulated")
    return layers, [x["name"] for x in layers], fig, ax


def cycle_breakdown(summary: dict):
    """Stacked bars, one per layer: compute cycles, then stall cycles by cause (DRAM, host
    link, SRAM bank conflicts; an NVDLA run has compute and DRAM stall only). Causes that
    never stall are left out of the legend. Each stack adds up to the layer's cycles."""
    layers, names, fig, ax = _per_layer_figure(summary)
    if not layers:
        return fig
    parts = [cycle_parts(x) for x in layers]
    keys = [k for k in STALL_COLORS if any(p.get(k) for p in parts)] or ["compute"]
    bottom = [0] * len(layers)
    for key in keys:
        values = [p.get(key, 0) for p in parts]
        label = "compute" if key == "compute" else f"stall: {key}"
        bars = ax.bar(range(len(layers)), values, bottom=bottom, width=0.8,
                      color=STALL_COLORS[key], label=label)
        for i, (bar, v) in enumerate(zip(bars.patches, values)):
            gid = f"cycles-{key}-{i}"
            bar.set_gid(gid)
            fig.npulab_tooltips[gid] = f"{names[i]}: {label} {v:,} cycles"
        bottom = [b + v for b, v in zip(bottom, values)]
    _layer_axis(ax, names, fig.get_figwidth())
    ax.set_ylabel("cycles")
    ax.set_title(_title(summary, "Cycles per layer"), fontsize=10)
    ax.set_ylim(0, max(bottom + [1]) * 1.05)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# ---- energy -----------------------------------------------------------------------------------

def energy_components(breakdown: dict) -> list[str]:
    """The keys of an energy breakdown in :data:`npulab.metrics.COMPONENT_ORDER`, each
    scratchpad (``sram.<name>``) in its own slot after ``rf``, in the order given."""
    return ordered_components(breakdown)


def _component_colors(keys: list[str]) -> dict:
    colors, srams = {}, 0
    for k in keys:
        if k.startswith("sram."):
            colors[k] = _SRAM_COLORS[srams % len(_SRAM_COLORS)]
            srams += 1
        else:
            colors[k] = _COMPONENT_COLORS.get(k, "#17becf")
    return colors


def energy_breakdown(summary: dict):
    """Top: the network's energy by component (horizontal bars, µJ and share). Bottom: the
    energy of every layer, stacked by component (µJ). Components in
    :data:`~npulab.metrics.COMPONENT_ORDER`, scratchpads after ``rf``. The network's static
    energy covers the whole run, a layer's only its own window."""
    m = _metrics(summary)
    net, layers = m["network"], m["layers"]
    names = [x["name"] for x in layers]
    width = _width_for(len(layers))
    fig = _figure(width, _HEIGHT_IN + 3.0)
    top, bottom_ax = fig.subplots(2, 1, height_ratios=[1, 1.7])
    breakdown = net["energy_breakdown_j"]
    keys = energy_components(breakdown)
    colors = _component_colors(keys)
    total = net["energy_j"]
    uj = [breakdown[k] * 1e6 for k in keys]
    bars = top.barh(range(len(keys)), uj, color=[colors[k] for k in keys])
    for i, (bar, k) in enumerate(zip(bars.patches, keys)):
        share = breakdown[k] / total if total else 0.0
        top.text(bar.get_width(), i, f" {_fmt(breakdown[k], 'J')} ({100 * share:.1f} %)",
                 va="center", fontsize=7)
        gid = f"energy-network-{k}"
        bar.set_gid(gid)
        fig.npulab_tooltips[gid] = f"network {k}: {_fmt(breakdown[k], 'J')} ({100 * share:.1f} %)"
    top.set_yticks(range(len(keys)))
    top.set_yticklabels(keys, fontsize=8)
    top.invert_yaxis()
    top.set_xlim(0, max(uj + [1e-12]) * 1.35)
    top.set_xlabel("energy per run (µJ)")
    top.set_title(_title(summary, f"Energy {_fmt(total, 'J')}"), fontsize=10)

    if not layers:
        _empty(bottom_ax, "no layer was simulated")
        return fig
    layer_keys = [k for k in energy_components(layers[0]["energy_breakdown_j"])
                  if any(x["energy_breakdown_j"].get(k) for x in layers)]
    base = [0.0] * len(layers)
    for k in layer_keys:
        values = [x["energy_breakdown_j"].get(k, 0.0) * 1e6 for x in layers]
        bars = bottom_ax.bar(range(len(layers)), values, bottom=base, width=0.8,
                             color=colors.get(k, "#17becf"), label=k)
        for i, bar in enumerate(bars.patches):
            gid = f"energy-layer-{k}-{i}"
            bar.set_gid(gid)
            fig.npulab_tooltips[gid] = f"{names[i]}: {k} {_fmt(values[i] * 1e-6, 'J')}"
        base = [b + v for b, v in zip(base, values)]
    _layer_axis(bottom_ax, names, width)
    bottom_ax.set_ylabel("energy per layer (µJ)")
    # every stack whole (a little headroom), the legend outside the axes, clear of the bars
    bottom_ax.set_ylim(0, max(base + [1e-12]) * 1.05)
    bottom_ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    bottom_ax.grid(True, axis="y", alpha=0.3)
    return fig


# ---- utilization ------------------------------------------------------------------------------

def utilization_series(summary: dict) -> dict:
    """``{"compute": [...], "dram": [...], "sram.<name>": [...], "link": [...]}``: each layer's
    compute utilization and the utilization of every memory level that has a bandwidth limit
    (levels whose peak is unlimited, e.g. an ideal DRAM, are left out), 0..1."""
    layers = _metrics(summary)["layers"]
    series = {"compute": [x["compute_utilization"] for x in layers]}
    levels: list[str] = []
    for x in layers:
        levels += [k for k in x["memory"] if k not in levels]
    for level in levels:
        values = [(x["memory"].get(level) or {}).get("utilization") for x in layers]
        if any(v is not None for v in values):
            series[level] = [v or 0.0 for v in values]
    return series


def utilization(summary: dict):
    """Per layer: compute utilization (MACs over peak MACs x cycles) and the bandwidth
    utilization of each memory level (DRAM, every scratchpad, host link; achieved over peak
    bytes/s, a scratchpad's busier direction over its per-direction peak), on 0..1."""
    layers, names, fig, ax = _per_layer_figure(summary)
    if not layers:
        return fig
    series = utilization_series(summary)
    xs = list(range(len(layers)))
    marker = "o" if len(layers) <= 60 else None
    for level, values in series.items():
        color = (STALL_COLORS["compute"] if level == "compute" else BOUND_COLORS.get(level)
                 or _SRAM_COLORS[list(series).index(level) % len(_SRAM_COLORS)])
        style = "-" if level in ("compute", "dram") else (":" if level == "link" else "--")
        line, = ax.plot(xs, values, label=level, marker=marker, ms=3, ls=style,
                        lw=2.4 if level == "compute" else 1.2, color=color)
        line.set_gid(f"utilization-{level}")
    _layer_axis(ax, names, fig.get_figwidth())
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("utilization (fraction of peak)")
    ax.set_title(_title(summary, "Utilization per layer"), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, alpha=0.3)
    return fig


#: The report's plots in page order: (anchor, heading, function).
PLOTS = (("roofline", "Roofline", roofline),
         ("cycles", "Cycle breakdown", cycle_breakdown),
         ("energy", "Energy breakdown", energy_breakdown),
         ("utilization", "Utilization", utilization))


def all_plots(summary: dict) -> dict:
    """``{anchor: Figure}`` for every plot of :data:`PLOTS`."""
    return {key: fn(summary) for key, _, fn in PLOTS}
