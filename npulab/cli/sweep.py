"""``npulab sweep``: run a design-space sweep, and ``npulab sweep report``: CSVs and plots.

``npulab sweep SPEC [-o DIR] [--resume] [--retry-failed] [--executor local|serial|ray]
[--address ADDR] [--jobs N] [--quiet] [--report]`` expands the spec (a TOML file or a shipped
sweep name, ``sim_configs/sweeps/``) to design points and runs those not stored yet in
``DIR/sweep.sqlite`` (default ``DIR``: ``sweeps/<name>``), with a progress bar and a summary
line; ``--wait`` waits for another sweep running in ``DIR`` (:mod:`npulab.sweep.lock`).
``npulab sweep report DIR [--heatmap X,Y] [--objective METRIC]`` writes ``points.csv``,
``pareto.csv`` and the plots (:func:`npulab.sweep.write_report`).

Only argparse is imported here; :mod:`npulab.sweep` loads when the command runs.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_parser", "main"]

_RUN_ONLY = (("output", None), ("resume", False), ("retry_failed", False),
             ("executor", "local"), ("address", None), ("jobs", None), ("report", False),
             ("limit", None), ("wait", False))
_REPORT_ONLY = (("heatmap", None), ("objective", None))


def add_parser(subparsers) -> None:
    """Register ``sweep`` on an argparse subparsers object."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "sweep", formatter_class=fmt, help="run a design-space sweep (or report on one)",
        usage="npulab sweep SPEC [-o DIR] [--resume] [--retry-failed] [--executor "
              "{local,serial,ray}] [--address ADDR] [--jobs N] [--limit N] [--wait] [--quiet] "
              "[--report]\n"
              "       npulab sweep report DIR [--heatmap X,Y] [--objective METRIC]",
        description="Expand a sweep spec (base design, axes, workloads, objectives, "
                    "constraints) to design points and run them in parallel; every result is "
                    "stored in DIR/sweep.sqlite as it finishes, so an interrupted sweep "
                    "continues with --resume and a failing point is stored with its error. One "
                    "sweep at a time writes a directory: a second one there stops with who "
                    "holds it (pid, host, start time), or waits with --wait. "
                    "'npulab sweep report DIR' writes points.csv, pareto.csv and plots "
                    "(Pareto scatter, heatmap over two axes, sensitivity per axis).",
        epilog="examples:\n  npulab sweep resnet50_shapes -o out/shapes --report\n"
               "  npulab sweep my_sweep.toml -o out/s --jobs 4\n"
               "  npulab sweep my_sweep.toml -o out/s --resume        # after an interrupt\n"
               "  npulab sweep my_sweep.toml -o out/s --executor ray --address 10.0.0.1:6379\n"
               "  npulab sweep report out/s --heatmap shape,dataflow --objective energy_j\n"
               "\nspec reference: docs/sweeps.md")
    p.add_argument("spec", metavar="SPEC|report",
                   help="sweep spec TOML file or shipped sweep name; or 'report'")
    p.add_argument("dir", metavar="DIR", nargs="?", help="with 'report': the sweep directory")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="result directory (default sweeps/<name>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep in DIR: skip points already done or failed")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: run failed points again (implies --resume)")
    p.add_argument("--executor", choices=("local", "serial", "ray"), default="local",
                   help="local: a process pool (default); serial: in this process; ray: a Ray "
                        "cluster (needs npulab[ray])")
    p.add_argument("--address", metavar="ADDR",
                   help="ray: the cluster address for ray.init (default: start a local one)")
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="parallel workers (default: all cores)")
    p.add_argument("--limit", type=int, metavar="N",
                   help="run at most N of the points still to do (the rest stay pending; "
                        "continue with --resume)")
    p.add_argument("--wait", action="store_true",
                   help="when another sweep is running in DIR, wait for it to end instead of "
                        "stopping (then continue with what it left)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress bar and no summary line")
    p.add_argument("--report", action="store_true",
                   help="also write the report (as 'npulab sweep report DIR') at the end")
    p.add_argument("--heatmap", metavar="X,Y", help="report: the two axes of the heatmap")
    p.add_argument("--objective", metavar="METRIC",
                   help="report: metric of the heatmap and sensitivity plots (default: the "
                        "first objective)")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-") if name != "output" else "-o/--output"


def main(args) -> int:
    """Run ``npulab sweep`` or ``npulab sweep report`` from parsed arguments."""
    from npulab.cli.common import UserError
    from npulab.sweep import SweepError
    try:
        if args.spec == "report":
            return _report(args)
        return _run(args)
    except (SweepError, ValueError) as exc:
        raise UserError(str(exc)) from None


def _report(args) -> int:
    from npulab.cli.common import UserError
    from npulab.sweep import write_report
    if args.dir is None:
        raise UserError("sweep report: missing DIR (npulab sweep report DIR)")
    for name, default in _RUN_ONLY:
        if getattr(args, name) != default:
            raise UserError(f"sweep report: {_flag(name)} applies to running a sweep")
    heatmap = None
    if args.heatmap is not None:
        parts = [x.strip() for x in args.heatmap.split(",")]
        if len(parts) != 2 or not all(parts):
            raise UserError(f"--heatmap {args.heatmap}: expected two axis names X,Y")
        heatmap = (parts[0], parts[1])
    paths = write_report(args.dir, heatmap=heatmap, objective=args.objective)
    if not args.quiet:
        print(f"npulab sweep report: wrote {', '.join(p.name for p in paths)} to {args.dir}",
              file=sys.stderr)
    return 0


def _notice(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run(args) -> int:
    from pathlib import Path

    from npulab.cli.common import UserError
    from npulab.progress import Progress
    from npulab.sweep import load_spec, run_sweep, write_report
    if args.dir is not None:
        raise UserError(f"sweep {args.spec}: unexpected argument {args.dir!r} (the result "
                        f"directory is -o DIR; a report is 'npulab sweep report DIR')")
    for name, default in _REPORT_ONLY:
        if getattr(args, name) != default and not args.report:
            raise UserError(f"sweep: {_flag(name)} applies to the report ('npulab sweep report "
                            f"DIR', or --report)")
    if args.address is not None and args.executor != "ray":
        raise UserError("--address applies to --executor ray")
    for name in ("jobs", "limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name} {value}: must be >= 1")
    spec = load_spec(args.spec)
    out = Path(args.output) if args.output else Path("sweeps") / spec.name
    from hw.files import check_output_dir
    check_output_dir(out, "sweep directory", flag="--output" if args.output else None)
    with Progress(quiet=args.quiet) as progress:
        summary = run_sweep(spec, out, executor=args.executor, jobs=args.jobs,
                            address=args.address, resume=args.resume,
                            retry_failed=args.retry_failed, progress=progress,
                            limit=args.limit, wait=args.wait,
                            notice=None if args.quiet else _notice)
    if not args.quiet:
        print(summary.line(), file=sys.stderr)
    if summary.interrupted:
        return 130
    if args.report:
        heatmap = tuple(x.strip() for x in args.heatmap.split(",")) if args.heatmap else None
        if heatmap is not None and len(heatmap) != 2:
            raise UserError(f"--heatmap {args.heatmap}: expected two axis names X,Y")
        paths = write_report(out, heatmap=heatmap, objective=args.objective)
        if not args.quiet:
            print(f"npulab sweep report: wrote {', '.join(p.name for p in paths)} to {out}",
                  file=sys.stderr)
    return 0
