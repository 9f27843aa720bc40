#!/usr/bin/env python3
"""Lab 6: write your own PE bug and see whether co-simulation catches it.

A *mutation* is a PE class whose ``product(a, b)`` (the Amaranth expression of the signed
multiplier) is deliberately wrong. The shipped ones are in ``hw/systolic/rtl/mutations.py``
(``npulab rtl verify --mutate NAME``); this script shows how to build one through the public
API: take the real PE class (``pe_class_for(cfg, None)``), subclass it, override ``product``,
and hand the class to ``hw.systolic.rtl.cosim.cosim_gemm(..., pe_class=...)``, which compares
every register of the RTL with the register-level model every cycle.

The example bug keeps the signed product in 2P - 1 bits instead of 2P. Only one product in
the whole int8 range needs the last bit: -128 x -128 = 16384 = 2**14, which 15 signed bits
turn into -16384. So the bug is caught exactly when a GEMM multiplies -128 by -128. The script
counts those products per case, and ``--stimulus`` picks the operands:

* ``biased`` (default): ``cosim.random_gemm``, the stimulus ``npulab rtl verify`` uses. About
  10 % of the operands are forced to the most negative value.
* ``uniform``: the same shapes, with operands drawn uniformly over the range.

Edit :func:`my_product` to try your own bug (see the sheet for ideas).

Example (from the repository root)::

    python examples/labs/06_verification/my_mutation.py --rows 2 --cols 2 --dataflow os
    python examples/labs/06_verification/my_mutation.py --stimulus uniform --cases 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.rtl.cosim import cosim_gemm, random_gemm
from hw.systolic.rtl.mutations import pe_class_for

NAME = "product-one-bit-short"
DESCRIPTION = "the signed product kept in 2P-1 bits: only (-2**(P-1)) squared overflows"


def my_product(self, a, b):
    """The broken multiplier: ``a`` and ``b`` are the PE's signed P-bit operands (Amaranth
    values); ``self.bits`` is P. The real PE returns ``a * b`` (exact in 2P bits)."""
    return (a * b)[: 2 * self.bits - 1].as_signed()


def mutant_class(cfg: ArrayConfig, product=my_product):
    """The real PE class for ``cfg``'s dataflow with ``product`` swapped in."""
    base = pe_class_for(cfg, None)
    return type(f"{base.__name__}_mine", (base,), {"product": product})


def extreme_products(cfg: ArrayConfig, a: np.ndarray, b: np.ndarray) -> int:
    """How many of the GEMM's products are (most negative) x (most negative)."""
    lo = cfg.precision.operand_range[0]
    # per batch and k: (rows of a holding lo in column k) x (columns of b holding lo in row k)
    return int(np.sum(np.sum(a == lo, axis=1) * np.sum(b == lo, axis=2)))


def cases(cfg: ArrayConfig, n: int, seed: int, stimulus: str):
    """``n`` random GEMMs: ``random_gemm``'s, or its shapes with uniform operands."""
    rng = np.random.default_rng(seed)
    lo, hi = cfg.precision.operand_range
    for _ in range(n):
        a, b = random_gemm(rng, cfg)
        if stimulus == "uniform":
            a = rng.integers(lo, hi + 1, a.shape)
            b = rng.integers(lo, hi + 1, b.shape)
        yield a, b


def run(cfg: ArrayConfig, n: int = 5, seed: int = 0, stimulus: str = "biased",
        vcd_dir: str | None = None, product=my_product) -> list[dict]:
    """Co-simulate ``n`` GEMMs on the mutant; one dict per case."""
    pe = mutant_class(cfg, product)
    out = []
    for index, (a, b) in enumerate(cases(cfg, n, seed, stimulus)):
        vcd = None if vcd_dir is None else Path(vcd_dir) / f"mine_case{index}.vcd"
        cycles, mismatch = cosim_gemm(cfg, a, b, pe_class=pe, vcd_path=vcd)
        out.append({"case": index, "shape": (a.shape[0], a.shape[1], a.shape[2], b.shape[2]),
                    "extreme_products": extreme_products(cfg, a, b), "cycles": cycles,
                    "mismatch": mismatch})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Co-simulate random GEMMs on a PE with your own bug (my_product in this "
                    "file) and report which cases the register-by-register comparison catches.")
    parser.add_argument("--rows", type=int, default=2, help="array rows (default 2)")
    parser.add_argument("--cols", type=int, default=2, help="array columns (default 2)")
    parser.add_argument("--dataflow", default="os", choices=["os", "ws", "is"],
                        help="dataflow (default os)")
    parser.add_argument("--precision", default="int8", choices=["int8", "int16"],
                        help="operand precision (default int8)")
    parser.add_argument("--cases", type=int, default=5, help="random GEMMs (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--stimulus", default="biased", choices=["biased", "uniform"],
                        help="operand distribution (default biased, as npulab rtl verify)")
    parser.add_argument("--vcd", metavar="DIR",
                        help="write the waveform of each failing case here (mine_caseN.vcd)")
    args = parser.parse_args(argv)
    if not 1 <= args.cases <= 1000:
        print(f"my_mutation.py: error: --cases = {args.cases}: must be an integer in 1..1000",
              file=sys.stderr)
        return 2
    try:
        cfg = ArrayConfig(rows=args.rows, cols=args.cols, dataflow=args.dataflow,
                          precision=args.precision)
        from hw.systolic.rtl.array import check_rtl_config
        check_rtl_config(cfg, "my_mutation.py")
        if args.rows * args.cols > 64:
            raise ConfigError(f"--rows x --cols = {args.rows * args.cols}: at most 64 PEs "
                              f"(Amaranth's simulator is slow)")
    except ConfigError as exc:
        print(f"my_mutation.py: error: {exc}", file=sys.stderr)
        return 2
    lo = cfg.precision.operand_range[0]
    print(f"mutation: {NAME} ({DESCRIPTION})")
    print(f"design: {args.dataflow.upper()} {args.rows}x{args.cols} {args.precision}, "
          f"{args.stimulus} stimulus, seed {args.seed}")
    results = run(cfg, args.cases, args.seed, args.stimulus, args.vcd)
    for r in results:
        b, m, k, n = r["shape"]
        verdict = "pass" if r["mismatch"] is None else f"FAIL {r['mismatch']}"
        x = r["extreme_products"]
        print(f"case {r['case']} (batch {b}, M={m} K={k} N={n}) with {x} "
              f"product{'' if x == 1 else 's'} {lo} x {lo}: {verdict}")
    caught = sum(r["mismatch"] is not None for r in results)
    print(f"caught in {caught} of {len(results)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
