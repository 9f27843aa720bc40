#!/usr/bin/env python3
"""Lab 2: the roofline of ResNet-50 on npulab's default chip, and what SRAM and DRAM change.

Simulates the whole network on the full chip (``npulab.simulate``, native timing: tiles
scheduled over the scratchpads, cycle-level DRAM, host link, DMA) and takes each layer's
roofline from ``npulab.metrics.compute_metrics``:

* peak compute ``P`` = PEs x clock (MACs/s); DRAM bandwidth ``B`` = the preset's peak (bytes/s);
* a layer's arithmetic intensity ``I`` = MACs / bytes on the DRAM bus;
* attainable = ``min(P, I x B)`` (and the host link's ceiling, far higher here); the
  layer is *memory-bound on the roofline* when ``I < P / B``, the ridge point.

Every op runs alone (``--no-fusion``): a fused layer's row would also hold its epilogue's
bytes (lab 7). Next to it is the simulator's own verdict: the resource that was busiest during the layer
(``LayerResult.bound``: ``compute`` or ``dram``), which also sees DRAM running below its peak
and loads that double buffering could not hide.

``--vs KEY=VALUE[,KEY=VALUE...]`` adds a configuration B (repeatable: one B per ``--vs``) and
prints the layers whose DRAM bytes, roofline bound or simulated bound differ from A.
Writes ``roofline.png`` (the rooflines of A and every B with the layers as points) and
``layers.csv`` into the output folder.

Example (from the repository root)::

    python examples/labs/02_roofline/roofline.py
    python examples/labs/02_roofline/roofline.py --vs sram.capacity_kib=64 --vs dram.preset=hbm2
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from compiler.options import CompileOptions
from hw.systolic.config import ConfigError
from npulab import load_chip_config, simulate, zoo
from npulab.metrics import compute_metrics


def run_config(model: str, sets: list[str], objective: str = "latency") -> dict:
    """Simulate ``model`` on the default chip with ``--set``-style overrides ``sets``.

    Returns ``chip`` (name, peak MACs/s, DRAM preset and peak bytes/s, ridge point in MACs per
    byte), ``layers`` (one dict per layer with MACs: DRAM bytes on the bus, intensity in MACs
    per byte, attainable and achieved MACs/s, roofline bound, simulated bound, cycles, tiling)
    and ``cycles`` (the whole run)."""
    chip = load_chip_config(None, sets)
    # every op alone (no fusion): each layer's row holds its own bytes, the roofline's view;
    # lab 7 shows what fusing them changes
    result = simulate(zoo.get(model), chip,
                      options=CompileOptions(objective=objective, fusion=False))
    metrics = compute_metrics(result, "16nm")
    peak_macs = metrics.chip["peak_ops_per_s"] / 2
    dram_bps = metrics.chip["dram"]["peak_bytes_per_s"]
    by_name = {m["name"]: m for m in metrics.layers}
    layers = []
    for layer in result.layers:
        if not layer.macs:
            continue
        m = by_name[layer.name]
        dram_bytes = m["memory"]["dram"]["bytes"]
        roof = m["roofline"]
        layers.append({
            "name": layer.name, "macs": layer.macs, "dram_bytes": int(dram_bytes),
            "intensity": layer.macs / dram_bytes if dram_bytes else float("inf"),
            "attainable_macs_per_s": roof["attainable_macs_per_s"],
            "achieved_macs_per_s": m["macs_per_s"],
            "roofline_bound": roof["bound"], "simulated_bound": layer.bound,
            "cycles": layer.cycles, "compute_cycles": layer.compute_cycles,
            "stall_dram_cycles": layer.stall_dram_cycles,
            "tiling": layer.tiling,
        })
    return {
        "sets": list(sets),
        "chip": {"name": chip.name, "pes": chip.array.pes, "clock_hz": chip.clock_hz,
                 "peak_macs_per_s": peak_macs, "dram_preset": chip.dram.preset,
                 "dram_channels": chip.dram.channels, "dram_peak_bytes_per_s": dram_bps,
                 "ridge_macs_per_byte": peak_macs / dram_bps if dram_bps else 0.0,
                 "sram_kib": {n: chip.sram(n).capacity_kib for n in ("ifmap", "filter", "ofmap")}},
        "layers": layers,
        "cycles": result.totals["cycles"],
    }


def describe(label: str, run: dict) -> list[str]:
    c = run["chip"]
    sram = "/".join(f"{v:g}" for v in c["sram_kib"].values())
    sets = ", ".join(run["sets"]) or "defaults"
    ch = f" x {c['dram_channels']} channels" if c["dram_channels"] > 1 and \
        c["dram_preset"] in ("ddr4-3200",) else ""
    return [
        f"{label}: {sets}",
        f"  peak {c['pes']:,} MACs/cycle x {c['clock_hz'] / 1e6:g} MHz = "
        f"{c['peak_macs_per_s'] / 1e12:.3f} TMAC/s; DRAM {c['dram_preset']}{ch} "
        f"{c['dram_peak_bytes_per_s'] / 1e9:.2f} GB/s peak; SRAM ifmap/filter/ofmap {sram} KiB",
        f"  ridge point = {c['peak_macs_per_s'] / 1e12:.3f}e12 / "
        f"{c['dram_peak_bytes_per_s'] / 1e9:.2f}e9 = {c['ridge_macs_per_byte']:.1f} MACs per "
        f"DRAM byte",
    ]


def memory_bound(run: dict) -> tuple[list[str], list[str]]:
    roof = [x["name"] for x in run["layers"] if x["roofline_bound"] != "compute"]
    sim = [x["name"] for x in run["layers"] if x["simulated_bound"] != "compute"]
    return roof, sim


def _fmt(head, rows, left=(0,)):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]


def layer_table(run: dict, only_memory: bool) -> list[str]:
    head = ("layer", "MACs", "DRAM B", "MAC/B", "attainable GMAC/s", "achieved GMAC/s",
            "roofline", "simulated")
    rows = []
    for x in run["layers"]:
        if only_memory and x["roofline_bound"] == "compute" and x["simulated_bound"] == "compute":
            continue
        rows.append((x["name"], f"{x['macs']:,}", f"{x['dram_bytes']:,}", f"{x['intensity']:.1f}",
                     f"{x['attainable_macs_per_s'] / 1e9:.1f}",
                     f"{x['achieved_macs_per_s'] / 1e9:.1f}", x["roofline_bound"],
                     x["simulated_bound"]))
    return _fmt(head, rows)


def summary(label: str, run: dict) -> list[str]:
    roof, sim = memory_bound(run)
    n = len(run["layers"])
    below = sorted(x["intensity"] for x in run["layers"])
    return [f"{label}: {run['cycles']:,} cycles; memory-bound on the roofline: {len(roof)} of "
            f"{n} layers ({', '.join(roof) or 'none'}); busiest resource DRAM in the simulation: "
            f"{len(sim)} of {n}; lowest intensities {', '.join(f'{v:.1f}' for v in below[:3])} "
            f"MACs/B"]


def compare_table(a: dict, b: dict) -> list[str]:
    head = ("layer", "DRAM B (A)", "DRAM B (B)", "MAC/B A", "MAC/B B", "roofline A -> B",
            "simulated A -> B", "cycles A", "cycles B")
    rows = []
    for x, y in zip(a["layers"], b["layers"]):
        if (x["dram_bytes"], x["roofline_bound"], x["simulated_bound"]) == \
                (y["dram_bytes"], y["roofline_bound"], y["simulated_bound"]):
            continue
        rows.append((x["name"], f"{x['dram_bytes']:,}", f"{y['dram_bytes']:,}",
                     f"{x['intensity']:.1f}", f"{y['intensity']:.1f}",
                     f"{x['roofline_bound']} -> {y['roofline_bound']}",
                     f"{x['simulated_bound']} -> {y['simulated_bound']}",
                     f"{x['cycles']:,}", f"{y['cycles']:,}"))
    more = sum(1 for x, y in zip(a["layers"], b["layers"]) if y["dram_bytes"] > x["dram_bytes"])
    fewer = sum(1 for x, y in zip(a["layers"], b["layers"]) if y["dram_bytes"] < x["dram_bytes"])
    bytes_a = sum(x["dram_bytes"] for x in a["layers"])
    bytes_b = sum(y["dram_bytes"] for y in b["layers"])
    lines = _fmt(head, rows) + [
        f"DRAM bytes: {bytes_a:,} (A) -> {bytes_b:,} (B); per layer: more in B for {more}, "
        f"fewer for {fewer}, the same for {len(a['layers']) - more - fewer}"]
    pairs = list(zip(a["layers"], b["layers"]))
    if 0 < more <= 5:
        lines.append("more bytes in B (tiling A -> B; array cycles A -> B):")
        for x, y in pairs:
            if y["dram_bytes"] > x["dram_bytes"]:
                lines.append(f"  {x['name']}: {x['tiling']} -> {y['tiling']}; "
                             f"{x['compute_cycles']:,} -> {y['compute_cycles']:,}")
    slower = sorted(((y["cycles"] - x["cycles"], x, y) for x, y in pairs),
                    key=lambda t: -t[0])[:3]
    if a["cycles"] < b["cycles"]:
        lines.append(f"network cycles rise {a['cycles']:,} -> {b['cycles']:,}; most slowed "
                     f"layers (cycles, DRAM stall cycles, tiling A -> B):")
        for d, x, y in slower:
            if d > 0:
                lines.append(f"  {x['name']}: {x['cycles']:,} -> {y['cycles']:,}; stall "
                             f"{x['stall_dram_cycles']:,} -> {y['stall_dram_cycles']:,}; "
                             f"{x['tiling']} -> {y['tiling']}")
    return lines


def plot(runs: list[tuple[str, dict]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    lo = min(x["intensity"] for _, r in runs for x in r["layers"]) / 2
    hi = max(x["intensity"] for _, r in runs for x in r["layers"]) * 2
    markers = "os^vD<>"
    for i, (label, r) in enumerate(runs):
        c = r["chip"]
        peak, bw, ridge = c["peak_macs_per_s"] / 1e9, c["dram_peak_bytes_per_s"] / 1e9, \
            c["ridge_macs_per_byte"]
        xs = [lo, ridge, hi]
        line, = ax.plot(xs, [min(peak, v * bw) for v in xs], linewidth=1.5,
                        label=f"{label} roofline (ridge {ridge:.1f} MACs/B)")
        ax.scatter([x["intensity"] for x in r["layers"]],
                   [x["achieved_macs_per_s"] / 1e9 for x in r["layers"]],
                   s=18, marker=markers[i % len(markers)], color=line.get_color(),
                   label=f"{label} layers (achieved)", alpha=0.75)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel("GMAC/s")
    ax.set_title("ResNet-50 layers on the roofline (Williams, Waterman, Patterson 2009)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_csv(runs: list[tuple[str, dict]], path: Path) -> None:
    keys = ("name", "macs", "dram_bytes", "intensity", "attainable_macs_per_s",
            "achieved_macs_per_s", "roofline_bound", "simulated_bound", "cycles",
            "compute_cycles", "stall_dram_cycles", "tiling")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("config", "settings") + keys)
        for label, r in runs:
            for x in r["layers"]:
                w.writerow((label, ";".join(r["sets"])) + tuple(x[k] for k in keys))


def _settings(text: str, flag: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    for s in items:
        if "=" not in s:
            raise ConfigError(f"{flag} {text!r}: {s!r} is not KEY=VALUE (e.g. "
                              f"sram.capacity_kib=64, dram.preset=hbm2)")
    if not items:
        raise ConfigError(f"{flag} {text!r}: give at least one KEY=VALUE")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lab 2: per-layer roofline of a network on the default chip (A), and which "
                    "layers change bound on other chips (B).")
    parser.add_argument("--model", default="resnet50", help="zoo model (default resnet50)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of chip A (repeatable), as npulab run --set")
    parser.add_argument("--vs", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="a chip B: A with these overrides (repeatable: one B each)")
    parser.add_argument("--objective", choices=("latency", "traffic"), default="latency",
                        help="what the tiler minimises per layer (default latency, as npulab run)")
    parser.add_argument("--all", action="store_true",
                        help="list every layer of A, not only the memory-bound ones")
    parser.add_argument("-o", "--out", default="lab02_out",
                        help="output folder (default lab02_out/)")
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    args = parser.parse_args(argv)
    try:
        sets_a = [s for text in args.sets for s in _settings(text, "--set")]
        variants = [_settings(text, "--vs") for text in args.vs]
        zoo.get(args.model)                          # a bad name or config fails before any run
        for extra in [[]] + variants:
            load_chip_config(None, sets_a + extra)
        a = run_config(args.model, sets_a, args.objective)
        runs = [("A", a)]
        for i, extra in enumerate(variants):
            label = "B" if len(variants) == 1 else f"B{i + 1}"
            runs.append((label, run_config(args.model, sets_a + extra, args.objective)))
    except (ConfigError, ValueError) as exc:
        print(f"roofline.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.model}, native timing (full chip), tiler objective: {args.objective}")
    for label, r in runs:
        print("\n".join(describe(label, r)))
    print()
    print("per layer: MAC/B = MACs / DRAM bytes on the bus; attainable = min(peak, MAC/B x "
          "bandwidth);")
    print("achieved = MACs / the layer's busy time; simulated = the busiest resource in the "
          "simulation")
    print("\n".join(layer_table(a, only_memory=not args.all)))
    print()
    for label, r in runs:
        print("\n".join(summary(label, r)))
    for label, r in runs[1:]:
        print()
        print(f"A -> {label} ({', '.join(r['sets'][len(sets_a):])}): layers whose DRAM bytes or "
              f"bound changed")
        print("\n".join(compare_table(a, r)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(runs, out / "layers.csv")
    print()
    print(f"wrote {out / 'layers.csv'}")
    if not args.no_plot:
        plot(runs, out / "roofline.png")
        print(f"wrote {out / 'roofline.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
