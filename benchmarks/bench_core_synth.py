"""Synthesis, place and route of the systolic arrays and the complete core on a Lattice ECP5, with
the energy model's area beside them (docs/core.md has the table).

For each size (default 8 and 16: an 8x8 and a 16x16 WS int8 array, and the cores of
``core_chip(lanes)`` with 4 KiB scratchpads):

* **array** -- ``hw.systolic.rtl.synth.synthesize(cfg, "ecp5", deskew=True)``: Yosys'
  ``synth_ecp5`` cell counts (flip-flops checked against the register model's, as the tests
  do), then ``fmax_ecp5``: nextpnr-ecp5 on an LFE5U-85F-CABGA381, the array inside a serial
  harness (its ports do not fit the package), multipliers in the 156 DSP blocks when they fit,
  in LUTs otherwise (16x16 = 256 PEs);
* **core** -- the same for the complete core (``hw.core.synth``): sequencer, command queues,
  scratchpads (block RAM), DMA engines, array, vector lanes;
* **model area** -- ``hw.core.synth.model_area_mm2``: the energy model's area of the same
  MACs and scratchpads at its default technology node (an ASIC estimate, not FPGA cells: the
  two are different units; their ratio between sizes is what compares).

Everything runs in WebAssembly (yowasp), one core: the 8x8 array in about a minute, the 8x8
core in about 70 (4,169 s, its routing alone 51 minutes; it reaches 22.25 MHz); the 16x16 array
and core do not fit the LFE5U-85F and end in nextpnr's placement error (docs/core.md). Run by
hand, alone:
``python benchmarks/bench_core_synth.py [--sizes 8 16] [--seed 1] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import time

from hw.core.synth import fmax_core_ecp5, model_area_mm2, synthesize_core
from hw.systolic.config import ArrayConfig
from hw.systolic.rtl.synth import fmax_ecp5, synthesize


def _row(what: str, size: int, report: dict, pnr: dict, seconds: float) -> dict:
    used = pnr.get("utilization", {})
    return {"design": what, "size": f"{size}x{size}", "flip_flops": report["flip_flops"],
            "expected_flip_flops": report.get("expected_flip_flops"),
            "lut4": report.get("lut4"), "carry": report.get("carry"), "dsp": report.get("dsp"),
            "bram": report.get("bram"), "fmax_mhz": pnr.get("fmax_mhz"),
            "dsp_mapped": pnr.get("dsp_mapped"),
            "comb_used": used.get("TRELLIS_COMB", [None])[0],
            "ff_used": used.get("TRELLIS_FF", [None])[0],
            "dsp_used": used.get("MULT18X18D", [None])[0],
            "ebr_used": used.get("DP16KD", [None])[0], "seconds": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    rows = []
    for size in args.sizes:
        cfg = ArrayConfig(rows=size, cols=size, dataflow="ws")
        began = time.perf_counter()
        report = synthesize(cfg, "ecp5", deskew=True)
        pnr = fmax_ecp5(cfg, deskew=True, seed=args.seed)
        rows.append(_row("array", size, report, pnr, time.perf_counter() - began))
        print(json.dumps(rows[-1]), flush=True)
        began = time.perf_counter()
        report = synthesize_core(size, "ecp5")
        pnr = fmax_core_ecp5(size, seed=args.seed)
        row = _row("core", size, report, pnr, time.perf_counter() - began)
        row["model_area_mm2"] = model_area_mm2(size)
        rows.append(row)
        print(json.dumps(rows[-1]), flush=True)
    print()
    print(f"{'design':<7}{'size':>6}{'FF':>8}{'LUT4':>8}{'CCU2C':>7}{'DSP':>5}{'EBR':>5}"
          f"{'Fmax MHz':>10}  DSPs used for products")
    for r in rows:
        print(f"{r['design']:<7}{r['size']:>6}{r['flip_flops']:>8}{r['lut4']:>8}{r['carry']:>7}"
              f"{r['dsp']:>5}{r['bram']:>5}{r['fmax_mhz']:>10.2f}  {r['dsp_mapped']}")
    for r in rows:
        if "model_area_mm2" in r:
            a = r["model_area_mm2"]
            print(f"energy model, {r['size']} core at {a['node_nm']:g} nm: MACs "
                  f"{a['mac']:.4f} mm2, scratchpads "
                  f"{a['total'] - a['mac']:.4f} mm2, total {a['total']:.4f} mm2")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
