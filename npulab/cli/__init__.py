"""The ``npulab`` command line: one module per command, shared options in :mod:`.common`.

:data:`COMMANDS` lists every command, its module and its one-line help. A command module has
``add_parser(subparsers)`` (argument handling) and ``main(args) -> int`` (runs the library and
prints); no library module imports this package. Every error a user can cause is printed as one
line ``npulab: error: ...`` with exit status 2 (:func:`npulab.cli.common.user_errors`);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import npulab
from npulab.cli.common import user_errors

# Only light modules above: building the parser (every --help and --version) must not load numpy
# or Numba. Commands import what they run inside their functions.

__all__ = ["main", "build_parser", "COMMANDS"]

#: Every command, the module under ``npulab.cli`` that handles it, and its one-line help, in
#: the order ``npulab --help`` lists them. A command's own options are built only when it runs
#: or shows its help (see :func:`build_parser`); tests/npulab/test_cli_startup.py checks this
#: text equals the help each command registers.
COMMANDS = {
    "run": ("run", "simulate a model on a chip (the main job)"),
    "scalesim": ("scalesim", "run SCALE-Sim inputs, write SCALE-Sim reports"),
    "config": ("config", "inspect configs"),
    "report": ("report", "regenerate report.html (and the other reports) from a saved run"),
    "dram": ("dram", "DRAM timing model: replay a trace, list presets"),
    "rtl": ("rtl", "systolic-array RTL: Verilog, synthesis, co-simulation"),
    "nvdla": ("nvdla", "NVDLA models: NVIDIA's performance spreadsheet and trace tests"),
    "soc": ("soc", "accelerators sharing one DRAM: slowdown vs alone"),
    "collective": ("system", "time a collective on a multi-chip system"),
    "system": ("system", "plan a training step over many chips"),
    "plan": ("plan", "search the best parallel plan of a training step"),
    "sweep": ("sweep", "run a design-space sweep (or report on one)"),
    "llm": ("llm", "LLM inference: a layer's kernels, a batch's prefill and decode"),
    "map": ("map", "search the mapping space of one op (tilings, loop orders, dataflows)"),
    "validate": ("validate", "compare a chip's op latencies with measured ones (CSV in, error "
                             "table out)"),
}


def command_module(command: str):
    """The module that handles ``command`` (imported now)."""
    return importlib.import_module(f"npulab.cli.{COMMANDS[command][0]}")


def _command_in(argv: list[str] | None) -> str | None:
    """The command ``argv`` names (its first word, when it is one), else None."""
    if argv and argv[0] in COMMANDS:
        return argv[0]
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``argv``, only the command it names gets its options (the others
    are listed with their help), so ``--help``, ``--version`` and each command's ``--help`` load
    just what they show. ``build_parser()`` builds every command (the CLI reference does)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="npulab", formatter_class=fmt,
        description="Cycle-level simulator of deep-learning accelerators.",
        epilog="examples:\n  npulab run\n  npulab run --model resnet50 --config tpu_v1_like\n"
               "  npulab run --onnx model.onnx --set dram.preset=hbm2\n"
               "  npulab dram replay trace.txt --preset ddr4-3200\n"
               "  npulab collective --system hgx-a100-4 --op allreduce --bytes 64MiB\n"
               "  npulab system --system dgx-a100 --model megatron-22b --strategy "
               "tp=8,recompute=full --global-batch 8\n"
               "  npulab scalesim -c my.cfg -t my_topology.csv -o out/\n  npulab config show",
    )
    parser.add_argument("--version", action="version", version=f"npulab {npulab.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = _command_in(argv) if argv is not None else None
    wanted_module = COMMANDS[wanted][0] if wanted is not None else None
    built: set[str] = set()
    for name, (module, text) in COMMANDS.items():
        if argv is None or module == wanted_module:
            if module not in built:            # one module may register several commands
                command_module(name).add_parser(sub)
                built.add(module)
        else:
            sub.add_parser(name, help=text)    # listed; its options are built when it runs
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            parser.print_help()
            return 2
        return command_module(args.command).main(args)
    except BrokenPipeError:
        # The reader went away (``npulab ... | head``): not an error. Point stdout at devnull so
        # the interpreter's final flush does not raise again (Python docs, "Note on SIGPIPE").
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if not isinstance(exc, user_errors()):
            raise
        message = str(exc)
        if isinstance(exc, FileNotFoundError) and exc.filename:
            message = f"{exc.filename}: no such file"
        print(f"npulab: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
