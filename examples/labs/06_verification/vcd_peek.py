#!/usr/bin/env python3
"""Lab 6: print one PE's signals, cycle by cycle, from a co-simulation waveform.

For a VCD written by ``npulab rtl verify --vcd DIR`` (failing cases) or ``npulab rtl wave``,
prints PE (i, j)'s operand inputs and product *during* each cycle, and its registers as
*loaded at the end* of each cycle. A mismatch report names registers that way too: "cycle t:
pe[i][j].acc" is the value ``acc`` loaded at the clock edge that ends cycle t. Values are
printed as signed two's-complement numbers. The VCD reader is Lab 1's
(``examples/labs/01_dataflows/vcd_summary.py``).

Example (from the repository root)::

    npulab rtl verify --rows 2 --cols 2 --dataflow os --cases 3 \
        --mutate unsigned-multiply --vcd lab06_out/
    python examples/labs/06_verification/vcd_peek.py lab06_out/os_2x2_int8_case0.vcd --pe 0,0
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

_READER = Path(__file__).resolve().parents[1] / "01_dataflows" / "vcd_summary.py"
_spec = importlib.util.spec_from_file_location("lab01_vcd_summary", _READER)
vcd_summary = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = vcd_summary
_spec.loader.exec_module(vcd_summary)

#: (signal under the PE's scope, shown as, when): inputs and the product during the cycle,
#: registers as loaded at its end.
SIGNALS = (
    ("a_in.value", "a_in", "during"), ("b_in.value", "b_in", "during"),
    ("x_in.value", "x_in", "during"), ("prod", "prod", "during"),
    ("acc", "acc", "end"), ("res", "res", "end"),
    ("shadow.value", "shadow", "end"), ("active.value", "active", "end"),
    ("psum", "psum", "end"),
)


def _edges(vcd) -> list[int]:
    clock = next((n for n in vcd.names if n.endswith(".clk")), None)
    if clock is None:
        raise vcd_summary.VcdError("no clock signal (a name ending in .clk)")
    return [t for t, v in vcd.times_values(clock) if v == 1]


def cycle_count(vcd) -> int:
    """Clock cycles in the waveform (rising edges)."""
    return len(_edges(vcd))


def peek(vcd, i: int, j: int, first: int, last: int) -> tuple[list[str], list[list[int | None]]]:
    """Column headers and one row per cycle ``first..last`` of PE (i, j)'s signals."""
    edges = _edges(vcd)
    scope = next((n[: n.index(f"pe_{i}_{j}.") + len(f"pe_{i}_{j}.")] for n in vcd.names
                  if f".pe_{i}_{j}." in n), None)
    if scope is None:
        raise vcd_summary.VcdError(f"no PE ({i}, {j}) in this waveform")
    if not 0 <= first <= last < len(edges):
        raise vcd_summary.VcdError(f"cycles {first}..{last}: the waveform has cycles "
                                   f"0..{len(edges) - 1}")
    present = [(scope + s, label, when) for s, label, when in SIGNALS if scope + s in vcd.names]
    heads = [f"{label}" if when == "during" else f"{label} (end)" for _, label, when in present]
    rows = []
    for t in range(first, last + 1):
        rows.append([vcd.value_before(name, edges[t] + (1 if when == "end" else 0), signed=True)
                     for name, _, when in present])
    return heads, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print one PE's inputs, product and registers per cycle from a VCD.")
    parser.add_argument("vcd", help="the .vcd file")
    parser.add_argument("--pe", default="0,0", help="PE as ROW,COL (default 0,0)")
    parser.add_argument("--cycles", default=None,
                        help="cycle range FIRST..LAST (default: every cycle in the file; a "
                             "failing case's waveform ends at the cycle of the mismatch)")
    args = parser.parse_args(argv)
    pe = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", args.pe)
    cyc = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", args.cycles or "0..-1")
    if pe is None:
        print(f"vcd_peek.py: error: --pe = {args.pe!r}: expected ROW,COL (e.g. 0,0)",
              file=sys.stderr)
        return 2
    if cyc is None and args.cycles is not None:
        print(f"vcd_peek.py: error: --cycles = {args.cycles!r}: expected FIRST..LAST (e.g. 0..3)",
              file=sys.stderr)
        return 2
    try:
        vcd = vcd_summary.read_vcd(args.vcd)
        first, last = (0, cycle_count(vcd) - 1) if args.cycles is None else \
            (int(cyc.group(1)), int(cyc.group(2)))
        heads, rows = peek(vcd, int(pe.group(1)), int(pe.group(2)), first, last)
    except vcd_summary.VcdError as exc:
        print(f"vcd_peek.py: error: {exc}", file=sys.stderr)
        return 2
    cells = [["cycle", *heads]] + [[str(t), *("x" if v is None else str(v) for v in row)]
                                   for t, row in zip(range(first, last + 1), rows)]
    widths = [max(len(r[c]) for r in cells) for c in range(len(heads) + 1)]
    print(f"PE ({pe.group(1)}, {pe.group(2)}) of {args.vcd}")
    for r in cells:
        print("  ".join(x.rjust(w) for x, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
