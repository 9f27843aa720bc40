#!/usr/bin/env python3
"""Lab 1: a text waveform of a tiny GEMM from the register-level model (no viewer needed).

Runs ``a @ b`` on the register-level model (``hw.systolic.regmodel.run_gemm(trace=True)``),
which moves real values through every PE register, and prints per cycle what each column's
bottom output port writes (``.`` when it writes nothing). The operands are the ones
``npulab rtl wave`` uses, so the table lines up with the RTL waveform of the same GEMM.

Example (from the repository root)::

    python examples/labs/01_dataflows/trace.py --rows 4 --cols 4 --dataflow os --m 4 --k 4 --n 4
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.regmodel import run_gemm
from hw.systolic.rtl.cosim import wave_operands


def trace_gemm(rows: int, cols: int, dataflow: str, m: int, k: int, n: int,
               precision: str = "int8", operands: str = "ramp", seed: int = 0):
    """(a, b, run_gemm result with trace) for the GEMM ``npulab rtl wave`` would run."""
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision=precision)
    a, b = wave_operands(cfg, m, k, n, operands, seed)
    return cfg, a, b, run_gemm(cfg, a, b, trace=True)


def first_valid(result) -> list[int | None]:
    """Per output column: the first cycle its port writes (None: never)."""
    out = []
    for j in range(result.trace_valid.shape[1]):
        hits = np.flatnonzero(result.trace_valid[:, j])
        out.append(int(hits[0]) if hits.size else None)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the register-level model's output ports, cycle by cycle, for one "
                    "small GEMM a (M x K) @ b (K x N).")
    parser.add_argument("--rows", type=int, default=4, help="array rows (default 4)")
    parser.add_argument("--cols", type=int, default=4, help="array columns (default 4)")
    parser.add_argument("--dataflow", default="os", choices=["os", "ws", "is"],
                        help="dataflow (default os)")
    parser.add_argument("--precision", default="int8", choices=["int8", "int16"],
                        help="operand precision (default int8)")
    parser.add_argument("--m", type=int, default=4, help="rows of a (default 4)")
    parser.add_argument("--k", type=int, default=4, help="columns of a, rows of b (default 4)")
    parser.add_argument("--n", type=int, default=4, help="columns of b (default 4)")
    parser.add_argument("--operands", default="ramp", choices=["ramp", "random"],
                        help="operand values, as in npulab rtl wave (default ramp)")
    parser.add_argument("--seed", type=int, default=0, help="seed for --operands random")
    args = parser.parse_args(argv)
    for key in ("rows", "cols", "m", "k", "n"):
        value = getattr(args, key)
        if not 1 <= value <= 64:
            print(f"trace.py: error: --{key} = {value}: must be an integer in 1..64 (a text "
                  f"trace is for small GEMMs)", file=sys.stderr)
            return 2
    try:
        cfg, a, b, r = trace_gemm(args.rows, args.cols, args.dataflow, args.m, args.k, args.n,
                                  args.precision, args.operands, args.seed)
    except (ConfigError, ValueError) as exc:
        print(f"trace.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"register model: {args.dataflow.upper()} {args.rows}x{args.cols} {args.precision}, "
          f"a ({args.m}x{args.k}) @ b ({args.k}x{args.n}), {args.operands} operands, "
          f"{r.counters.cycles} cycles, {r.counters.folds} fold(s)")
    print("a =", np.array2string(np.asarray(a), separator=" ").replace("\n", "\n    "))
    print("b =", np.array2string(np.asarray(b), separator=" ").replace("\n", "\n    "))
    ok = np.array_equal(np.asarray(r.output), np.asarray(a, np.int64) @ np.asarray(b, np.int64))
    print(f"output == a @ b: {'yes' if ok else 'NO'}")
    if args.dataflow == "is":
        print("IS runs the transposed problem (b^T @ a^T on the WS hardware): port j carries "
              "row j of the output")
    ports = r.trace_valid.shape[1]
    width = max(7, *(len(str(int(v))) + 1 for v in r.trace_value.ravel()))
    print("cycle" + "".join(f"{f'out[{j}]':>{width}}" for j in range(ports)))
    for t in range(r.trace_valid.shape[0]):
        cells = [str(int(r.trace_value[t, j])) if r.trace_valid[t, j] else "."
                 for j in range(ports)]
        print(f"{t:>5}" + "".join(f"{c:>{width}}" for c in cells))
    firsts = first_valid(r)
    print("first write per port: " + ", ".join(f"out[{j}] cycle {c}"
                                               for j, c in enumerate(firsts) if c is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
