#!/usr/bin/env python3
"""Lab 4: the tiling of one GEMM, its DRAM traffic per operand, and the reuse formula.

``C (M x N) = A (M x K) @ B (K x N)`` (int8 on the default chip; A and C in DRAM, B a weight) is
compiled and executed once per loop order (``--loop-order`` forced, the tiler then picks the
tile sizes; or only the tiler's own choice with ``--orders chosen``). For each run it prints the
tile ``m_t n_t k_t``, the trip counts, and the DRAM bytes the executor moved for A, B and C
(partial-sum spills and reloads included in C), next to the tiler's reuse formula
(docs/compiler.md, "Tiling")::

    operand X moves  |X| * prod(trips of the loops outside X's innermost own loop that do not
                     index X)                         (loops of one trip are ignored)
    C: M N bytes written once, plus 2 (k_trips - 1) M N acc_bytes when k is not the innermost
       loop with more than one trip (partial sums spilled and reloaded)

It saves ``traffic.png`` (bytes per operand per loop order) into the output directory.

    python examples/labs/04_memory/tiling.py
    python examples/labs/04_memory/tiling.py --gemm 512,512,2048 --set sram.capacity_kib=128
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

ORDERS = ("mnk", "nmk", "mkn", "kmn", "nkm", "knm")
_TILING = re.compile(r"gemm g(\d+) m(\d+) n(\d+) k(\d+) ([mnk]{3})")


def parse_tiling(text: str) -> dict:
    """``"gemm g1 m64 n256 k768 mnk"`` -> ``{"m": 64, "n": 256, "k": 768, "order": "mnk"}``."""
    match = _TILING.match(text or "")
    if not match:
        raise ValueError(f"tiling {text!r}: not a GEMM tiling")
    g, m, n, k, order = match.groups()
    return {"g": int(g), "m": int(m), "n": int(n), "k": int(k), "order": order}


def reuse(order: str, trips: dict, own: str) -> int:
    """Times one pass over an operand indexed by ``own`` (e.g. ``"mk"`` for A) is fetched."""
    loops = [d for d in order if trips[d] > 1]
    mine = [i for i, d in enumerate(loops) if d in own]
    if not mine:
        return 1
    return math.prod(trips[d] for d in loops[:mine[-1]] if d not in own)


def formula(m: int, n: int, k: int, tile: dict, elem: int = 1, acc: int = 4) -> dict:
    """DRAM bytes of A, B and C from the reuse formula above."""
    trips = {"m": -(-m // tile["m"]), "n": -(-n // tile["n"]), "k": -(-k // tile["k"])}
    order = tile["order"]
    a = m * k * elem * reuse(order, trips, "mk")
    b = k * n * elem * reuse(order, trips, "kn")
    loops = [d for d in order if trips[d] > 1]
    psum_resident = not loops or loops[-1] == "k" or "k" not in loops
    c = m * n * elem + (0 if psum_resident else 2 * (trips["k"] - 1) * m * n * acc)
    return {"A": a, "B": b, "C": c, "trips": trips}


def run(m: int, n: int, k: int, order: str | None, sets=()):
    """Compile and execute the GEMM; ``(tiling dict, measured bytes per operand, cycles)``."""
    from compiler.ir import Gemm, Graph
    from compiler.options import CompileOptions
    from hw.configfile import load_chip_config
    from npulab.simulate import simulate

    chip = load_chip_config(None, ["chip.model_input=dram", "chip.model_output=dram",
                                   *sets])
    graph = Graph("gemm", (Gemm(name="gemm", m=m, n=n, k=k),))
    result = simulate(graph, chip, options=CompileOptions(loop_order=order))
    row = result.execution.layers[0]
    measured = {"A": row["dram_ifmap_read_bytes"], "B": row["dram_filter_read_bytes"],
                "C": row["dram_ofmap_write_bytes"] + row["dram_psum_write_bytes"]
                + row["dram_psum_read_bytes"]}
    return parse_tiling(result.layers[0].tiling), measured, result.layers[0].cycles, chip


def plot(rows, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = [0] * len(rows)
    for name, color in (("A", "#4c72b0"), ("B", "#55a868"), ("C", "#c44e52")):
        vals = [r["measured"][name] / 1e6 for r in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, color=color, label=f"{name} bytes")
        bottom = [x + y for x, y in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)),
                  [f"{r['tile']['order']}\nm{r['tile']['m']} n{r['tile']['n']} k{r['tile']['k']}"
                   for r in rows], fontsize=7)
    ax.set_ylabel("DRAM MB (executor)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Tile one GEMM under each loop order, print the DRAM bytes of A, B and C "
                    "the executor moved and the reuse formula's prediction.")
    ap.add_argument("--gemm", default="256,1024,1024", metavar="M,N,K",
                    help="C(MxN) = A(MxK) @ B(KxN) (default 256,1024,1024)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="chip config override, as npulab run --set (repeatable; default "
                         "sram.capacity_kib=128)")
    ap.add_argument("--orders", default="all", metavar="all|chosen|ORDER[,ORDER]",
                    help="loop orders to force (default all six); 'chosen': the tiler's choice")
    ap.add_argument("-o", "--out", default="lab04_out", help="output directory (default lab04_out)")
    args = ap.parse_args(argv)
    try:
        dims = [int(x) for x in args.gemm.split(",")]
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--gemm {args.gemm!r}: expected three integers >= 1, M,N,K (e.g. 256,1024,1024)")
    if args.orders == "all":
        orders = list(ORDERS)
    elif args.orders == "chosen":
        orders = [None]
    else:
        orders = args.orders.split(",")
        bad = [o for o in orders if o not in ORDERS]
        if bad:
            ap.error(f"--orders {args.orders!r}: {bad[0]!r} is not a loop order; use all, chosen "
                     f"or a list of {', '.join(ORDERS)}")
    sets = args.set or ["sram.capacity_kib=128"]
    m, n, k = dims
    rows = []
    try:
        for order in orders:
            tile, measured, cycles, chip = run(m, n, k, order, sets)
            rows.append({"tile": tile, "measured": measured, "cycles": cycles,
                         "formula": formula(m, n, k, tile, 1, chip.array.acc_bits // 8)})
    except ValueError as exc:         # a bad --set, or no tiling fits (TilingError)
        print(f"tiling.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"GEMM M={m} N={n} K={k} (int8, A and C in DRAM) on {chip.name}, {' '.join(sets)}; "
          f"one buffer: ifmap {chip.ifmap_sram.tile_capacity_bytes:,} B, filter "
          f"{chip.filter_sram.tile_capacity_bytes:,} B, ofmap "
          f"{chip.ofmap_sram.tile_capacity_bytes:,} B")
    print(f"{'order':<5} {'tile m n k':<16} {'trips m n k':<12} {'A bytes':>11} {'B bytes':>11} "
          f"{'C bytes':>11} {'total':>11} {'formula':>11} {'cycles':>9}")
    for r in rows:
        t, f, meas = r["tile"], r["formula"], r["measured"]
        trips = f["trips"]
        total = sum(meas.values())
        predicted = f["A"] + f["B"] + f["C"]
        print(f"{t['order']:<5} {'m%d n%d k%d' % (t['m'], t['n'], t['k']):<16} "
              f"{'%d %d %d' % (trips['m'], trips['n'], trips['k']):<12} {meas['A']:>11,} "
              f"{meas['B']:>11,} {meas['C']:>11,} {total:>11,} {predicted:>11,} "
              f"{r['cycles']:>9,}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "traffic.png"
    plot(rows, path, f"GEMM {m}x{n}x{k}: DRAM bytes per operand and loop order")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
