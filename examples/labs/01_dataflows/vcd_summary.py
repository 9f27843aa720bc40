#!/usr/bin/env python3
"""Lab 1: summarize a waveform written by ``npulab rtl wave`` (no viewer needed).

Reads the VCD (Value Change Dump, IEEE 1364 section 18) and prints how many signals it holds,
how many PEs and clock cycles, and for each column's output port of the mesh
(``mesh.out__<j>``): the first cycle it is valid and the values it carries, in order. Cycle t
is the one that ends at the t-th rising clock edge (counting from 0), as in docs/rtl.md; the
value "during" cycle t is the one the port holds just before that edge.

Example (from the repository root)::

    npulab rtl wave --rows 4 --cols 4 --dataflow os --m 4 --k 4 --n 4 -o lab01_out/
    python examples/labs/01_dataflows/vcd_summary.py lab01_out/os_4x4_int8_m4_k4_n4.vcd
"""

from __future__ import annotations

import argparse
import bisect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path


class VcdError(ValueError):
    """A file that is not a VCD this script can read."""


@dataclass
class Vcd:
    """Signals of a VCD: hierarchical names -> identifier code, widths, value changes."""

    timescale: str = ""
    names: dict[str, str] = field(default_factory=dict)       # name -> id code
    widths: dict[str, int] = field(default_factory=dict)      # id code -> bits
    changes: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)

    def times_values(self, name: str) -> list[tuple[int, int | None]]:
        if name not in self.names:
            raise VcdError(f"signal {name!r} is not in the VCD")
        return self.changes.get(self.names[name], [])

    def value_before(self, name: str, time: int, signed: bool = False) -> int | None:
        """The value the signal holds just before ``time`` (changes at ``time`` not yet seen)."""
        ch = self.times_values(name)
        i = bisect.bisect_left(ch, (time, -1)) - 1
        if i < 0:
            return None
        value = ch[i][1]
        bits = self.widths[self.names[name]]
        if signed and value is not None and value >> (bits - 1):
            value -= 1 << bits
        return value


def read_vcd(path: str | Path) -> Vcd:
    """Parse the declarations and value changes of a VCD file (scalars and vectors)."""
    vcd = Vcd()
    scopes: list[str] = []
    time = 0
    in_header = True
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise VcdError(f"{path}: cannot read: {exc.strerror}") from None
    tokens = iter(text.split())
    for tok in tokens:
        if in_header:
            if tok == "$timescale":
                vcd.timescale = " ".join(iter(lambda: next(tokens), "$end"))
            elif tok == "$scope":
                _kind, name = next(tokens), next(tokens)
                scopes.append(name)
            elif tok == "$upscope":
                scopes.pop()
            elif tok == "$var":
                _kind, width, code, ref = next(tokens), next(tokens), next(tokens), next(tokens)
                name = ".".join(scopes + [ref.lstrip("\\")])
                vcd.names.setdefault(name, code)
                vcd.widths[code] = int(width)
            elif tok == "$enddefinitions":
                in_header = False
            continue
        head = tok[0]
        if head == "#":
            time = int(tok[1:])
        elif head in "bB":
            bits = tok[1:]
            code = next(tokens)
            value = None if re.search("[xXzZ]", bits) else int(bits, 2)
            vcd.changes.setdefault(code, []).append((time, value))
        elif head in "01xXzZ":
            vcd.changes.setdefault(tok[1:], []).append((time, int(head) if head in "01" else None))
        elif head == "$":
            continue  # $dumpvars, $end, ... around initial values
    if in_header or not vcd.names:
        raise VcdError(f"{path}: not a VCD file (no $enddefinitions or no $var)")
    return vcd


def summarize(vcd: Vcd) -> dict:
    """Signals, PEs, clock edges and, per mesh output port, its valid cycles and values."""
    clock = next((n for n in vcd.names if n.endswith(".clk")), None)
    if clock is None:
        raise VcdError("no clock signal (a name ending in .clk)")
    edges = [t for t, v in vcd.times_values(clock) if v == 1]
    pes = sorted({m.group(0) for n in vcd.names for m in [re.search(r"pe_\d+_\d+", n)] if m},
                 key=lambda p: tuple(int(x) for x in p.split("_")[1:]))
    ports = sorted({int(m.group(1)) for n in vcd.names
                    for m in [re.search(r"\.mesh\.out__(\d+)\.valid$", n)] if m})
    base = next(n for n in vcd.names if n.endswith(".mesh.out__0.valid"))[: -len("out__0.valid")]
    columns = []
    for j in ports:
        cycles, values = [], []
        for t, edge in enumerate(edges):
            if vcd.value_before(f"{base}out__{j}.valid", edge):
                cycles.append(t)
                values.append(vcd.value_before(f"{base}out__{j}.value", edge, signed=True))
        columns.append({"port": f"mesh.out[{j}]", "first_valid": cycles[0] if cycles else None,
                        "valid_cycles": cycles, "values": values})
    period = edges[1] - edges[0] if len(edges) > 1 else None
    return {"signals": len(vcd.names), "pes": pes, "cycles": len(edges),
            "period": period, "timescale": vcd.timescale, "columns": columns}


_UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0, "ps": 1e-3, "fs": 1e-6}


def period_ns(ticks: int, timescale: str) -> float:
    """``ticks`` of the VCD's ``$timescale`` (e.g. ``1 fs``, ``10ps``) in nanoseconds."""
    m = re.fullmatch(r"\s*(1|10|100)\s*(s|ms|us|ns|ps|fs)\s*", timescale)
    if m is None:
        raise VcdError(f"timescale {timescale!r}: expected 1, 10 or 100 of s/ms/us/ns/ps/fs")
    return ticks * int(m.group(1)) * _UNITS[m.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Summarize a waveform from `npulab rtl wave`: signals, PEs, cycles, and when "
                    "each column's output port is valid and with which values.")
    parser.add_argument("vcd", help="the .vcd file")
    args = parser.parse_args(argv)
    try:
        s = summarize(read_vcd(args.vcd))
    except VcdError as exc:
        print(f"vcd_summary.py: error: {exc}", file=sys.stderr)
        return 2
    period = ""
    if s["period"] is not None:
        period = f", clock period {period_ns(s['period'], s['timescale']):g} ns"
    first, last = (s["pes"][0], s["pes"][-1]) if s["pes"] else ("-", "-")
    print(f"{args.vcd}: {s['signals']} signals, {len(s['pes'])} PEs ({first} .. {last}), "
          f"{s['cycles']} clock cycles{period}")
    print("port         first valid  valid in cycles  values")
    for c in s["columns"]:
        cyc = c["valid_cycles"]
        span = f"{cyc[0]}..{cyc[-1]}" if cyc else "-"
        first_valid = "-" if c["first_valid"] is None else str(c["first_valid"])
        print(f"{c['port']:<12} {first_valid:>11}  {span:<15}  "
              f"{' '.join(str(v) for v in c['values'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
