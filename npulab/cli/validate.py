"""``npulab validate CSV --config CHIP``: a chip's latencies against measured ones.

The CSV lists measured ops (``family,op,latency_us``; :mod:`npulab.validate`); each row runs as
``npulab run --config CHIP --op OP [--precision P]`` runs it, and the table shows every row's
measured and predicted latency and error, then each family's mean absolute error. ``--format
json`` or ``csv`` prints the same numbers as data.
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> None:
    """Register ``validate`` on an argparse subparsers object."""
    from npulab.cli.common import add_config_args
    p = subparsers.add_parser(
        "validate", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="compare a chip's op latencies with measured ones (CSV in, error table out)",
        description="Run every op of a measurements CSV (columns family, op, latency_us: the "
                    "op as --op KIND:DIMS, the measured latency in us, launch included) on a "
                    "chip, exactly as npulab run --op does, and print each row's error and "
                    "each family's mean absolute error (predicted / measured - 1).",
        epilog="examples:\n  npulab validate benchmarks/data/a100_measured.csv --config a100_like "
               "--precision fp16\n  npulab validate my_device.csv --config my_chip.toml "
               "--format csv")
    p.add_argument("csv", metavar="CSV", help="measurements: family,op,latency_us")
    add_config_args(p)
    p.add_argument("--precision", choices=("int8", "int16", "fp16"),
                   help="data type of the ops (as npulab run --precision)")
    p.add_argument("--format", "-f", choices=("table", "json", "csv"), default="table",
                   help="stdout format")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def main(args) -> int:
    """Run ``npulab validate`` from parsed arguments; returns the exit status."""
    import csv
    import io
    import json

    from hw.configfile import load_chip
    from npulab.cli.common import resolve_config
    from npulab.progress import Progress, compile_notice
    from npulab.validate import family_errors, format_table, read_measurements, validate

    rows = read_measurements(args.csv)
    spec = load_chip(resolve_config(args.config), args.set)
    progress = Progress(quiet=args.quiet)
    with compile_notice(progress):
        predictions = validate(rows, spec, args.precision, progress=progress)
    if args.format == "table":
        print(f"npulab validate: {len(rows)} measurements from {args.csv} on {spec.name}")
        print(format_table(predictions), end="")
    elif args.format == "json":
        print(json.dumps({
            "chip": spec.name, "csv": str(args.csv),
            "rows": [{"family": p.measured.family, "op": p.measured.op,
                      "measured_us": p.measured.latency_us, "predicted_us": p.latency_us,
                      "launch_us": p.launch_us, "cycles": p.cycles, "error": p.error}
                     for p in predictions],
            "families": family_errors(predictions)}, indent=2))
    else:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["family", "op", "measured_us", "predicted_us", "launch_us", "cycles",
                    "error"])
        for p in predictions:
            w.writerow([p.measured.family, p.measured.op, p.measured.latency_us, p.latency_us,
                        p.launch_us, p.cycles, p.error])
        print(buf.getvalue(), end="")
    return 0
