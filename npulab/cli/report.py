"""``npulab report DIR [--tech NAME|FILE]``: regenerate the reports of a saved run.

``npulab run -o DIR`` writes ``summary.json`` (schema ``npulab.summary/1``: the run and its
metrics). ``npulab report DIR`` renders it again into every file derived from it
(``report.html``, ``report.txt``, ``layers.csv``; :func:`npulab.output.write_summary_outputs`);
with ``--tech`` it first re-costs the saved run with another energy table (a shipped name,
``45nm``/``16nm``/``7nm``, or a TOML file of the same format), keeping the DRAM and host-link
energy types the summary used, and rewrites ``summary.json`` too, so the directory equals what
``npulab run --tech ... -o DIR`` writes (``trace.json`` carries no energy and is left as it
is). No simulation runs: cycles and actions come from the file.

A missing directory, a missing or unreadable ``summary.json`` or one of another schema is one
line ``npulab: error: ...`` naming the file (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> None:
    """Register ``report`` on an argparse subparsers object."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "report", formatter_class=fmt, help="regenerate report.html (and the other reports) from a saved run",
        description="Render DIR/summary.json (written by npulab run -o DIR) into a self-contained "
                    "DIR/report.html (headline numbers, roofline, cycle, energy and utilization "
                    "plots, the per-layer table, the energy table with its citations, the config) "
                    "and rewrite report.txt and layers.csv from it. With --tech, re-cost the saved "
                    "run with another energy table first (and rewrite summary.json), so every "
                    "file equals what npulab run --tech ... -o DIR writes; nothing is simulated "
                    "again.",
        epilog="examples:\n  npulab run --model resnet50 -o out/\n  npulab report out/\n"
               "  npulab report out/ --tech 7nm\n  npulab report out/ --tech my_tech.toml")
    p.add_argument("dir", metavar="DIR", help="directory holding summary.json")
    p.add_argument("--tech", metavar="NAME|FILE",
                   help="re-cost with this energy table (45nm, 16nm, 7nm or a .toml file)")


def main(args) -> int:
    """Run ``npulab report`` from parsed arguments; returns the exit status."""
    from npulab.cli.common import UserError
    from npulab.summary_io import load_summary
    from npulab.output import recost, write_summary_outputs

    directory = Path(args.dir)
    if not directory.exists():
        raise UserError(f"{directory}: no such directory (expected the -o DIR of npulab run)")
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory (expected the -o DIR of npulab run, "
                        f"which holds summary.json)")
    path = directory / "summary.json"
    if args.tech is not None:
        summary = recost(load_summary(path, need_metrics=False), args.tech, str(path))
        net = summary["metrics"]["network"]
        from npulab.metrics import format_si
        print(f"npulab report: re-costed with {summary['metrics']['technology']['name']}: "
              f"{format_si(net['energy_per_inference_j'], 'J')} per inference, "
              f"{net['tops_per_w']:.3g} TOPS/W", file=sys.stderr)
    else:
        summary = load_summary(path)
    paths = write_summary_outputs(summary, directory, str(path))
    print(f"npulab report: wrote {', '.join(p.name for p in paths)} to {args.dir}",
          file=sys.stderr)
    return 0
