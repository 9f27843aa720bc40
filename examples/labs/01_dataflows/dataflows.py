#!/usr/bin/env python3
"""Lab 1: output-, weight- and input-stationary on one array, across layer shapes.

Runs each layer alone on an R x C int8 array (``npulab.simulate(..., timing="compute")``:
operands resident in SRAM, no DRAM, each layer on an empty array) once per dataflow, and prints
cycles, utilization, folds, SRAM accesses per operand and on-chip energy. Writes
``dataflows.csv`` and ``dataflows.png`` into the output folder.

The layers are real ones from the model zoo, picked so that each dataflow wins somewhere:

* ``resnet18/conv1``: large M (12544 output pixels), K = 147 (not a multiple of 16);
* ``resnet18/layer4.1.conv2``: small M (49 pixels), large K (4608) and N (512);
* ``mobilenetv2/features.3.conv.2``: a 1x1 projection to N = 24 channels;
* ``resnet18/fc``: a GEMV (M = 1);
* ``mobilenetv2/features.3.conv.1.0``: a 3x3 depthwise conv (144 groups of N = 1, K = 9).

Example (from the repository root)::

    python examples/labs/01_dataflows/dataflows.py
    python examples/labs/01_dataflows/dataflows.py --rows 32 --cols 8 -o lab01_out/
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

from compiler.ir import Graph
from npulab import load_chip_config, simulate, zoo
from npulab.metrics import compute_metrics

DATAFLOWS = ("os", "ws", "is")
#: (short name, zoo model, op name)
LAYERS = (
    ("conv1", "resnet18", "conv1"),
    ("l4.1.conv2", "resnet18", "layer4.1.conv2"),
    ("mb3.proj", "mobilenetv2", "features.3.conv.2"),
    ("fc", "resnet18", "fc"),
    ("mb3.dw", "mobilenetv2", "features.3.conv.1.0"),
)
TECHS = ("45nm", "16nm", "7nm")


def layer_graph(names: list[str]) -> Graph:
    """A graph of the chosen layers, renamed to their short names (in compute mode each runs
    alone on an empty array, so their order and inputs do not matter)."""
    models: dict = {}
    ops = []
    for short, model, op_name in LAYERS:
        if short in names:
            graph = models.setdefault(model, zoo.get(model))
            ops.append(replace(graph.op(op_name), name=short, inputs=()))
    return Graph("lab01_layers", tuple(ops))


def run(rows: int = 16, cols: int = 16, precision: str = "int8", tech: str = "45nm",
        layers: list[str] | None = None) -> list[dict]:
    """One row per (layer, dataflow): the simulator's counters and the on-chip energy."""
    names = [s for s, _, _ in LAYERS] if layers is None else layers
    graph = layer_graph(names)
    out = []
    for df in DATAFLOWS:
        chip = load_chip_config(None, [f"array.rows={rows}", f"array.cols={cols}",
                                       f"array.dataflow={df}", f"array.precision={precision}"])
        result = simulate(graph, chip, timing="compute")
        energy = {x["name"]: x for x in compute_metrics(result, tech).layers}
        for layer in result.layers:
            e = energy[layer.name]
            out.append({
                "layer": layer.name, "dataflow": df, "count": layer.gemm_count,
                "m": layer.gemm_m, "n": layer.gemm_n, "k": layer.gemm_k, "macs": layer.macs,
                "cycles": layer.cycles, "utilization_pct": layer.utilization_pct,
                "folds": layer.folds, "ifmap_reads": layer.ifmap_sram_reads,
                "filter_reads": layer.filter_sram_reads,
                "ofmap_writes": layer.ofmap_sram_writes, "ofmap_reads": layer.ofmap_sram_reads,
                "on_chip_energy_uj": 1e6 * e["on_chip_energy_j"],
            })
    order = {s: i for i, s in enumerate(names)}
    out.sort(key=lambda r: (order[r["layer"]], DATAFLOWS.index(r["dataflow"])))
    return out


def table(rows: list[dict]) -> str:
    head = ("layer", "GEMM (count x M x N x K)", "df", "cycles", "util %", "folds", "ifmap rd",
            "filter rd", "ofmap wr", "ofmap rd", "energy uJ")
    body = []
    for r in rows:
        gemm = f"{r['count']} x {r['m']} x {r['n']} x {r['k']}"
        body.append((r["layer"], gemm, r["dataflow"].upper(), f"{r['cycles']:,}",
                     f"{r['utilization_pct']:.1f}", f"{r['folds']:,}", f"{r['ifmap_reads']:,}",
                     f"{r['filter_reads']:,}", f"{r['ofmap_writes']:,}",
                     f"{r['ofmap_reads']:,}", f"{r['on_chip_energy_uj']:.1f}"))
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    left = {0, 1, 2}

    def fmt(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [fmt(head), fmt(["-" * w for w in widths])]
    previous = None
    for r, b in zip(rows, body):
        if previous is not None and r["layer"] != previous:
            lines.append("")
        previous = r["layer"]
        lines.append(fmt(b))
    return "\n".join(lines)


def winners(rows: list[dict]) -> list[str]:
    """Per layer: the fastest and the most energy-efficient dataflow (ties named together)."""
    lines = []
    for name in dict.fromkeys(r["layer"] for r in rows):
        mine = [r for r in rows if r["layer"] == name]
        best_c = min(r["cycles"] for r in mine)
        best_e = min(r["on_chip_energy_uj"] for r in mine)
        fast = "/".join(r["dataflow"].upper() for r in mine if r["cycles"] == best_c)
        lean = "/".join(r["dataflow"].upper() for r in mine
                        if r["on_chip_energy_uj"] <= best_e * (1 + 1e-9))
        slow = max(r["cycles"] for r in mine)
        lines.append(f"{name:<11} fastest {fast:<8} ({best_c:,} cycles; slowest is "
                     f"{slow / best_c:.2f}x)  least energy {lean}")
    return lines


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["layer"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.27
    for panel, (key, label) in enumerate((("cycles", "cycles / fastest dataflow"),
                                          ("on_chip_energy_uj", "on-chip energy / least"))):
        ax = axes[panel]
        for d, df in enumerate(DATAFLOWS):
            values = []
            for name in names:
                mine = {r["dataflow"]: r[key] for r in rows if r["layer"] == name}
                values.append(mine[df] / min(mine.values()))
            ax.bar([i + (d - 1) * width for i in range(len(names))], values, width,
                   label=df.upper())
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel(label)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.legend()
    fig.suptitle("OS vs WS vs IS, each layer alone on the array")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lab 1: OS vs WS vs IS on one systolic array across layer shapes "
                    "(compute-only timing: operands resident in SRAM).")
    parser.add_argument("--rows", type=int, default=16, help="array rows (default 16)")
    parser.add_argument("--cols", type=int, default=16, help="array columns (default 16)")
    parser.add_argument("--precision", default="int8", choices=["int8", "int16", "fp16"],
                        help="operand precision (default int8)")
    parser.add_argument("--tech", default="45nm", choices=TECHS,
                        help="energy table (default 45nm, Horowitz ISSCC 2014)")
    parser.add_argument("--layers", default=",".join(s for s, _, _ in LAYERS),
                        help="comma-separated subset of: " + ", ".join(s for s, _, _ in LAYERS))
    parser.add_argument("-o", "--out", default="lab01_out",
                        help="output folder (default lab01_out/)")
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    args = parser.parse_args(argv)
    known = [s for s, _, _ in LAYERS]
    layers = [x.strip() for x in args.layers.split(",") if x.strip()]
    for name in layers:
        if name not in known:
            print(f"dataflows.py: error: --layers: {name!r} is not a lab layer; choose from "
                  f"{', '.join(known)}", file=sys.stderr)
            return 2
    if not layers:
        print(f"dataflows.py: error: --layers is empty; choose from {', '.join(known)}",
              file=sys.stderr)
        return 2
    for key in ("rows", "cols"):
        value = getattr(args, key)
        if not 1 <= value <= 512:
            print(f"dataflows.py: error: --{key} = {value}: must be an integer in 1..512",
                  file=sys.stderr)
            return 2
    rows = run(args.rows, args.cols, args.precision, args.tech, layers)
    print(f"{args.rows}x{args.cols} {args.precision} array, compute-only timing "
          f"(operands in SRAM, each layer alone), energy: {args.tech} table (on chip)")
    print()
    print(table(rows))
    print()
    print("\n".join(winners(rows)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "dataflows.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print()
    print(f"wrote {out / 'dataflows.csv'}")
    if not args.no_plot:
        plot(rows, out / "dataflows.png")
        print(f"wrote {out / 'dataflows.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
