#!/usr/bin/env python3
"""Lab 4: the same workload with double-buffered and single-buffered scratchpads.

Runs a zoo model (default: one GPT-2 block, 64 tokens) on a chip twice, with
``sram.double_buffer = true`` and ``false`` (all three scratchpads), full-chip native timing
(tiling, cycle-level DRAM, DMA). Prints per matrix layer the tiling the compiler chose, cycles,
compute cycles and DRAM stall cycles of both runs, then the totals with stalls by cause.

It saves ``timeline_<layer>.png`` into the output directory: the load DMA, array and store DMA
of one layer (``--layer``, default the one with the most cycles) in both runs, so you can see
loads overlapping compute (double-buffered) or alternating with it (single-buffered).

    python examples/labs/04_memory/double_buffer.py
    python examples/labs/04_memory/double_buffer.py --model resnet18 --image-size 64
    python examples/labs/04_memory/double_buffer.py --set dram.preset=hbm2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def run_pair(model: str, params: dict, sets=()):
    """``(graph, {True: RunResult, False: RunResult})`` for double buffering on and off."""
    from compiler.frontends import zoo
    from hw.configfile import load_chip_config
    from npulab.simulate import simulate

    graph = zoo.get(model, **params)
    runs = {}
    for db in (True, False):
        chip = load_chip_config(None, list(sets) + [f"sram.double_buffer={str(db).lower()}"])
        runs[db] = simulate(graph, chip)
    return graph, runs


def print_tables(graph, runs, out=sys.stdout) -> None:
    on, off = runs[True], runs[False]
    print(f"{graph.name} on {on.chip}: sram.double_buffer = true | false", file=out)
    head = (f"{'layer':<18} {'tiling (double-buffered)':<34} {'cycles':>8} {'compute':>8} "
            f"{'stall':>7} | {'tiling (single)':<34} {'cycles':>8} {'compute':>8} {'stall':>7}")
    print(head, file=out)
    print("-" * len(head), file=out)
    for a, b in zip(on.layers, off.layers):
        if a.cycles is None or a.gemm_m is None:
            continue
        print(f"{a.name:<18} {a.tiling:<34} {a.cycles:>8,} {a.compute_cycles:>8,} "
              f"{a.stall_dram_cycles:>7,} | {b.tiling:<34} {b.cycles:>8,} {b.compute_cycles:>8,} "
              f"{b.stall_dram_cycles:>7,}", file=out)
    print("(stall = DRAM stall cycles; tiling = lowering, tile m n k in elements, loop order)",
          file=out)
    for label, r in (("double-buffered", on), ("single-buffered", off)):
        t = r.totals
        print(f"{label:<16} cycles {t['cycles']:>9,}  compute {t['compute_cycles']:>9,}  stalls: "
              f"dram {t['stall_dram_cycles']:,}, link {t['stall_link_cycles']:,}, sram "
              f"{t['stall_sram_cycles']:,}  DRAM read {t['dram_read_bytes']:,} B", file=out)
    print(f"double buffering saves {off.totals['cycles'] - on.totals['cycles']:,} cycles "
          f"({100 * (1 - on.totals['cycles'] / off.totals['cycles']):.1f} %)", file=out)


def plot_timeline(runs, layer: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 4.2), sharex=False)
    colors = {"load": "#4c72b0", "compute": "#55a868", "store": "#c44e52",
              "move": "#8172b2", "host_in": "#937860", "host_out": "#937860"}
    engines = ("load", "array", "store")
    for ax, db in zip(axes, (True, False)):
        events = [e for e in runs[db].execution.trace.events() if e["layer"] == layer]
        t0 = min(e["start"] for e in events)
        for e in events:
            row = engines.index(e["engine"]) if e["engine"] in engines else 0
            ax.barh(row, e["finish"] - e["start"], left=e["start"] - t0,
                    color=colors.get(e["kind"], "#999999"), edgecolor="white", linewidth=0.3)
        ax.set_yticks(range(3), ["load DMA", "array", "store DMA"])
        ax.invert_yaxis()
        ax.set_title(f"{layer}, double_buffer = {str(db).lower()}: "
                     f"{max(e['finish'] for e in events) - t0:,} cycles from its first command",
                     fontsize=9)
    axes[-1].set_xlabel("core cycles since the layer's first command")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Run a model with double-buffered and single-buffered scratchpads and "
                    "compare cycles, stalls by cause and the tilings chosen.")
    ap.add_argument("--model", default="gpt2_block", help="zoo model (default gpt2_block)")
    ap.add_argument("--seq-len", type=int, help="transformers: tokens (default 64 for gpt2_block)")
    ap.add_argument("--image-size", type=int, help="CNNs: input height/width")
    ap.add_argument("--batch", type=int, help="batch size")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="chip config override, as npulab run --set (repeatable)")
    ap.add_argument("--layer", help="layer to draw (default: the one with the most cycles)")
    ap.add_argument("-o", "--out", default="lab04_out", help="output directory (default lab04_out)")
    args = ap.parse_args(argv)
    if any(s.split("=", 1)[0].strip() in ("sram.double_buffer", "sram.ifmap.double_buffer",
                                          "sram.filter.double_buffer", "sram.ofmap.double_buffer")
           for s in args.set):
        ap.error("--set sram.*double_buffer: this script sets it itself (both values)")
    params = {k: v for k, v in (("seq_len", args.seq_len), ("image_size", args.image_size),
                                ("batch", args.batch)) if v is not None}
    if args.model == "gpt2_block" and "seq_len" not in params:
        params["seq_len"] = 64
    try:
        graph, runs = run_pair(args.model, params, args.set)
    except ValueError as exc:       # bad model, parameter or --set value (ConfigError too)
        print(f"double_buffer.py: error: {exc}", file=sys.stderr)
        return 2
    print_tables(graph, runs)
    names = [l.name for l in runs[True].layers if l.cycles is not None and l.gemm_m is not None]
    layer = args.layer or max((l for l in runs[True].layers if l.name in names),
                              key=lambda l: l.cycles).name
    if layer not in names:
        print(f"double_buffer.py: error: --layer {layer!r}: not a matrix layer of {graph.name}; "
              f"choose one of {', '.join(names)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"timeline_{layer}.png"
    plot_timeline(runs, layer, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
