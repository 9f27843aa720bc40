#!/usr/bin/env python3
"""Lab 9: fewer bits, fewer weights. int8 vs fp8 vs int4 vs 2:4 sparsity on a convolution and
a transformer layer: accuracy (SQNR) against speed and energy.

Accuracy: each scheme quantizes (and prunes) a layer's weights and a seeded input, runs the GEMM
on npulab's register-level array in the scheme's datatype (``hw.systolic.regmodel.run_gemm``:
the real integer or fp8 arithmetic), rescales, and reports the output's SQNR against the fp64
GEMM (``compiler.quantize``). The weights are seeded Gaussians, not a trained network's.

Speed and energy: the same schemes on the default chip (``npulab.simulate``, native timing:
tiles through the scratchpads, cycle-level DRAM; energy from the 16 nm table). W4A4 runs on
the same chip with an int4 array of dual-MAC PEs (two MACs per PE per cycle), its operands
packed two per byte in the scratchpads and DRAM (``hw.packing``). A last table times every
GEMM on the array alone (the timing engine, no memories).

Writes ``fewer_bits.csv`` (one row per layer and scheme) into the output folder.

Example (from the repository root)::

    python examples/labs/09_compression/fewer_bits.py
    python examples/labs/09_compression/fewer_bits.py --layer conv --set dram.preset=hbm2
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from compiler.ir import Graph
from compiler.options import CompileOptions
from compiler.quantize import QuantSpec, prune_n_m, quantize, sqnr_db
from hw.energy import load_technology
from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.regmodel import run_gemm
from hw.systolic.timing import gemm_timing
from npulab import load_chip_config, simulate, zoo

#: scheme -> (weight dtype, activation dtype, N:M pruning, how the chip runs it)
SCHEMES = {
    "int8": ("int8", "int8", None, {}),
    "fp8": ("fp8_e4m3", "fp8_e4m3", None, {"precision": "fp8_e4m3"}),
    "w4a8": ("int4", "int8", None, {"weight_bits": 4}),
    "2:4": ("int8", "int8", (2, 4), {"sparsity": "2:4"}),
    "2:4+w4": ("int4", "int8", (2, 4), {"sparsity": "2:4", "weight_bits": 4}),
    "w4a4": ("int4", "int4", None, {"precision": "int4", "macs_per_pe": 2}),
}
TOKENS = 16          # rows of the seeded input the accuracy runs multiply
TECH = "16nm"


def layers():
    """``[(label, graph, K x N weight shape of the GEMM whose accuracy is measured)]``: ResNet-50's
    layer3.0.conv2 (3x3, 256 -> 256 channels at 14x14) alone, and one BERT-base encoder layer
    at 128 tokens (its accuracy on fc1, 768 -> 3072)."""
    conv = zoo.get("resnet50").op("layer3.0.conv2")
    bert = zoo.get("bert_base_layer", seq_len=128)
    return [("conv", Graph("conv", (replace(conv, inputs=()),)), (9 * 256, 256)),
            ("bert", bert, (768, 3072))]


def accuracy(scheme: str, shape: tuple[int, int], seed: int = 0) -> float:
    """SQNR (dB) of the scheme's GEMM of a seeded ``TOKENS x K`` input by a seeded ``K x N``
    weight, run on a 16x16 WS register-level array, against the fp64 GEMM."""
    w_dt, a_dt, nm, _ = SCHEMES[scheme]
    rng = np.random.default_rng(seed)
    k, n = shape
    w0 = rng.standard_normal((k, n)) / np.sqrt(k)
    x = rng.standard_normal((TOKENS, k))
    w = prune_n_m(w0, *nm, axis=0)[0] if nm else w0
    qw = quantize(w, QuantSpec(w_dt, "channel"), axis=-1)
    qa = quantize(x, QuantSpec(a_dt, "tensor"))
    # int4 weights are valid int8 operands: W4A8 runs on the int8 array
    cfg = ArrayConfig(rows=16, cols=16, dataflow="ws", precision=a_dt)
    out = run_gemm(cfg, qa.values, qw.values).output.astype(np.float64)
    out *= float(qa.scale) * np.asarray(qw.scale).reshape(1, -1)
    return sqnr_db(x @ w0, out)


def chip_run(graph, chip, scheme: str) -> dict | None:
    """Cycles, DRAM bytes (read + written) and energy (J) of ``graph`` on ``chip`` as the
    scheme runs it (None: no chip takes it)."""
    how = SCHEMES[scheme][3]
    if how is None:
        return None
    how = dict(how)
    if "precision" in how:
        chip = replace(chip, array=replace(chip.array, precision=how.pop("precision"),
                                           acc_bits=None, macs_per_pe=how.pop("macs_per_pe", 1)))
    if "sparsity" in how:
        chip = replace(chip, array=replace(chip.array, sparse_m=4))
    result = simulate(graph, chip, options=CompileOptions(**how))
    t = result.totals
    return {"cycles": t["cycles"], "dram_bytes": t["dram_read_bytes"] + t["dram_write_bytes"],
            "energy_j": result.metrics(TECH).network["energy_j"]}


def array_only(graph, chip) -> dict:
    """The layer's GEMMs on the array alone (timing engine, compute only): cycles of int8 PEs,
    2:4 sparse PEs and dual-MAC int4 PEs, and the MAC energy (J) of int8 and int4 MACs."""
    arr = chip.array
    int4 = replace(arr, precision="int4", acc_bits=None, macs_per_pe=2)
    sparse = replace(arr, sparse_m=4)
    tech = load_technology(TECH)
    out = {"int8": 0, "2:4": 0, "w4a4": 0, "macs": 0}
    for op in graph.ops:
        s = op.gemm_shape()
        if s is None:
            continue
        out["int8"] += gemm_timing(arr, s.m, s.n, s.k, s.count).cycles
        out["w4a4"] += gemm_timing(int4, s.m, s.n, s.k, s.count).cycles
        nm = (2, 4) if s.k % 4 == 0 and (len(op.inputs) < 2) else None
        out["2:4"] += gemm_timing(sparse, s.m, s.n, s.k, s.count, nm=nm).cycles
        out["macs"] += s.macs
    out["mac_j_int8"] = out["macs"] * tech.mac_pj("int8") * 1e-12
    out["mac_j_int4"] = out["macs"] * tech.mac_pj("int4") * 1e-12
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lab 9: int8 vs fp8 vs int4 vs 2:4 on a conv and a transformer layer: "
                    "SQNR, cycles and energy.")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a chip config value, as npulab run --set")
    parser.add_argument("--layer", action="append", choices=("conv", "bert"),
                        help="only this layer (repeatable; default both)")
    parser.add_argument("-o", "--out", default="lab09_out",
                        help="output folder (default lab09_out/)")
    args = parser.parse_args(argv)
    try:
        chip = load_chip_config(None, args.set)
    except ConfigError as exc:
        print(f"fewer_bits.py: {exc}", file=sys.stderr)
        return 2
    chosen = [lay for lay in layers() if args.layer is None or lay[0] in args.layer]
    rows = []
    print(f"{chip.name}: {chip.array.rows}x{chip.array.cols} {chip.array.dataflow.value} "
          f"array, {chip.dram.preset}; energy table {TECH}; ratios against int8")
    for label, graph, shape in chosen:
        print(f"\n{label}: SQNR on {TOKENS} x {shape[0]} @ {shape[0]} x {shape[1]} seeded "
              f"Gaussians; cycles and energy of the whole {label} on the chip")
        print(f"{'scheme':<8} {'SQNR dB':>8} {'cycles':>11} {'speed-up':>9} {'DRAM MB':>8} "
              f"{'energy uJ':>10} {'energy':>7}")
        base = chip_run(graph, chip, "int8")
        for scheme in SCHEMES:
            db = accuracy(scheme, shape)
            run = chip_run(graph, chip, scheme)
            row = {"layer": label, "scheme": scheme, "sqnr_db": round(db, 2)}
            if run is None:
                print(f"{scheme:<8} {db:>8.1f} {'(array only: step 2)':>48}")
            else:
                row.update(cycles=run["cycles"], dram_bytes=run["dram_bytes"],
                           energy_j=run["energy_j"])
                print(f"{scheme:<8} {db:>8.1f} {run['cycles']:>11,} "
                      f"{base['cycles'] / run['cycles']:>8.2f}x {run['dram_bytes'] / 1e6:>8.2f} "
                      f"{run['energy_j'] * 1e6:>10.1f} {run['energy_j'] / base['energy_j']:>6.2f}x")
            rows.append(row)
    print("\narray alone (timing engine, compute cycles of every GEMM; MAC energy only):")
    print(f"{'layer':<6} {'int8 cycles':>12} {'2:4':>11} {'w4a4 dual-MAC':>14} "
          f"{'MAC uJ int8':>12} {'int4':>8}")
    for label, graph, _ in chosen:
        a = array_only(graph, chip)
        print(f"{label:<6} {a['int8']:>12,} {a['2:4']:>11,} {a['w4a4']:>14,} "
              f"{a['mac_j_int8'] * 1e6:>12.1f} {a['mac_j_int4'] * 1e6:>8.1f}")
        rows.append({"layer": label, "scheme": "array-only", "cycles_int8": a["int8"],
                     "cycles_2of4": a["2:4"], "cycles_w4a4": a["w4a4"]})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "fewer_bits.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nwrote {out / 'fewer_bits.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
