"""a100_like against measured A100 latencies, next to LLMCompass's errors on the same series.

    python benchmarks/validate_a100.py [--csv FILE] [--family NAME ...] [--fit-launch]

Runs every row of ``benchmarks/data/a100_measured.csv`` (the rows of
``../shared/reference/a100_measured.md``: LLMCompass's A100 80GB SXM measurements, matmul,
softmax, layer norm and GELU; latencies in µs, launch included) exactly as ``npulab validate
CSV --config a100_like --precision fp16`` does (each row is ``npulab run --config a100_like --op
OP --precision fp16``), and prints each row's error and each family's mean absolute error next
to LLMCompass's (ISCA 2024, Fig. 5: matmul 9.0 %, softmax 12.0 %, layernorm 13.8 %, GELU 5.0 %).

``--fit-launch`` also prints, per family, the launch overhead that would minimise the family's
mean absolute error with the device times as simulated (the one constant a validation may fit)
and the errors with it. The preset's own overheads are what ``a100_like.toml`` says.

Another device: ``npulab validate my_rows.csv --config my_chip.toml`` (same CSV columns).
Results: ``benchmarks/results/validate_a100.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchutil import write_results  # noqa: E402
from npulab.validate import (  # noqa: E402
    family_errors, fit_launch_overhead, format_table, read_measurements, validate,
    with_launch_overhead,
)

#: LLMCompass's average absolute error per family on these series (paper, Fig. 5).
LLMCOMPASS = {"matmul": 0.090, "softmax": 0.120, "layernorm": 0.138, "gelu": 0.050}
CSV = ROOT / "benchmarks" / "data" / "a100_measured.csv"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", default=str(CSV), help="measurements (family,op,latency_us)")
    ap.add_argument("--config", default="a100_like", help="chip preset or file")
    ap.add_argument("--family", action="append", default=[],
                    help="only these families (repeatable)")
    ap.add_argument("--fit-launch", action="store_true",
                    help="also fit each family's launch overhead and show the errors with it")
    args = ap.parse_args(argv)
    rows = read_measurements(args.csv)
    if args.family:
        rows = [r for r in rows if r.family in args.family]
    t0 = time.perf_counter()

    def progress(done, total, op):
        print(f"  [{done}/{total}] {op}  {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    preds = validate(rows, args.config, "fp16", progress=progress)
    wall = time.perf_counter() - t0
    print(f"a100_like vs measured A100 80GB SXM ({len(rows)} rows from {args.csv}), "
          f"simulated in {wall:.1f} s\n")
    print(format_table(preds, LLMCOMPASS, "LLMCompass"))
    doc = {"config": args.config, "csv": args.csv, "wall_s": wall,
           "rows": [{"family": p.measured.family, "op": p.measured.op,
                     "measured_us": p.measured.latency_us, "predicted_us": p.latency_us,
                     "launch_us": p.launch_us, "cycles": p.cycles, "error": p.error}
                    for p in preds],
           "families": family_errors(preds), "llmcompass": LLMCOMPASS}
    if args.fit_launch:
        fit = fit_launch_overhead(preds)
        print("launch overhead fitted per family (us): "
              + ", ".join(f"{f} {v:.1f}" for f, v in fit.items()))
        fitted = with_launch_overhead(preds, fit)
        print(format_table(fitted, LLMCOMPASS, "LLMCompass").split("\n\n", 1)[1])
        doc["fitted_launch_us"] = fit
        doc["families_fitted"] = family_errors(fitted)
    print(f"wrote {write_results('validate_a100', doc).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
