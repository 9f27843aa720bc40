"""``npulab scalesim``: SCALE-Sim inputs in, SCALE-Sim's reports out (:mod:`npulab.scalesim`)."""

from __future__ import annotations

import argparse

from npulab.cli.common import (
    BARE_GEMM, UserError, add_set_arg, add_topology_format_arg, check_bare_gemm, topology_gemm,
)

def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    ss = sub.add_parser(
        "scalesim", formatter_class=fmt, help="run SCALE-Sim inputs, write SCALE-Sim reports",
        description="Read a SCALE-Sim .cfg and topology CSV and write COMPUTE_REPORT.csv and "
                    "DETAILED_ACCESS_REPORT.csv with SCALE-Sim's compute model (CALC mode).",
        epilog="examples:\n  npulab scalesim -c sim_configs/scalesim_32x32_os.cfg "
               "-t sim_configs/scalesim_resnet18.csv -o out/\n"
               "  npulab scalesim -c my.cfg -t gemms.csv --topology-format gemm -o out/ --set array.dataflow=ws",
    )
    ss.add_argument("-c", "--config", required=True, metavar="CFG", help="SCALE-Sim .cfg file")
    ss.add_argument("-t", "--topology", required=True, metavar="CSV", help="SCALE-Sim topology CSV")
    add_topology_format_arg(ss)
    ss.add_argument("--gemm", nargs="?", const=BARE_GEMM, help=argparse.SUPPRESS)
    ss.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the reports")
    ss.add_argument("--scalesim-issue-166", action="store_true",
                    help="report OS ofmap writes as SCALE-Sim does (over-counted by folds*(R+C))")
    add_set_arg(ss)


def main(args) -> int:
    from npulab.scalesim import run_scalesim
    check_bare_gemm(args.gemm)
    if args.gemm is not None:
        raise UserError("npulab scalesim reads its layers from -t CSV; --gemm M,N,K is for "
                        "npulab run and npulab map (GEMM rows in the CSV: --topology-format gemm)")

    from hw.files import check_input_file, check_output_dir
    check_input_file(args.config, "SCALE-Sim .cfg", flag="--config")
    check_input_file(args.topology, "topology CSV", flag="--topology")
    check_output_dir(args.output, flag="--output")

    layers = run_scalesim(args.config, args.topology, args.output, gemm=topology_gemm(args),
                          overrides=args.set, issue_166=args.scalesim_issue_166)
    total = sum(layer.timing.total_cycles for layer in layers)
    print(f"npulab scalesim: {len(layers)} layers, {total:,} total cycles (CALC mode); "
          f"wrote COMPUTE_REPORT.csv and DETAILED_ACCESS_REPORT.csv to {args.output}")
    return 0
