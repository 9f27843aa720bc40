"""The ``npulab`` command line: ``run``, ``scalesim``, ``config show``, ``dram replay``.

Every error a user can cause (bad config value, bad topology line, unknown model) is printed
as one line ``npulab: error: ...`` naming the file, key or line and the value, with exit
status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import npulab
from compiler.options import CONV_LOWERINGS, MAP_MODES, ORDERS, SRAM_LAYOUTS
from hw.presets import chip_preset_names, nvdla_preset_names
from npulab.choices import RUN_FORMATS, TIMING_MODES

# Only light modules above: building the parser (every --help and --version) must not load numpy
# or Numba. Commands import what they run inside their functions.

__all__ = ["main", "build_parser", "resolve_config"]


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that are the user's doing: printed as one line (hw.energy.EnergyError is a
    ConfigError). Imported on demand so the parser stays light."""
    from compiler.frontends.scalesim_cfg import ScaleSimConfigError
    from compiler.frontends.scalesim_topology import TopologyError
    from compiler.ir import IRError
    from compiler.tiling import TilingError
    from hw.systolic.config import ConfigError
    return (UserError, ConfigError, IRError, TopologyError, ScaleSimConfigError, FileNotFoundError,
            TilingError)


DEFAULT_MODEL = "resnet18"


class UserError(Exception):
    """An error in what the user asked for; printed as one line."""


def presets_dir():
    """Where the shipped presets are (:func:`hw.presets.presets_dir`)."""
    from hw.presets import presets_dir as find
    return find()


def preset_names() -> list[str]:
    """Chip presets for ``npulab run`` (NVDLA builds, ``nv_*.toml``, are listed apart)."""
    return chip_preset_names()


def presets_help() -> str:
    """The preset list every ``--config`` help shows, made from the files that ship."""
    return (f"presets: {', '.join(chip_preset_names())}; NVDLA builds: "
            f"{', '.join(nvdla_preset_names())}")


def resolve_config(name_or_path: str | None) -> Path | None:
    """A config path, or the file of a shipped preset (``tpu_v1_like``, ``nv_full``), or None
    (default): :func:`hw.configfile.resolve_chip_path`, as the Python API resolves it."""
    if name_or_path is None:
        return None
    from hw.configfile import resolve_chip_path
    from hw.systolic.config import ConfigError
    try:
        return resolve_chip_path(name_or_path)
    except ConfigError:
        raise UserError(f"--config {name_or_path}: no such file or preset; {presets_help()}") \
            from None


def _load_nvdla(path: Path | None, overrides: list[str]):
    """The NVDLA build in ``path`` (a file with an ``[nvdla]`` table), or None for a systolic
    chip config (or the default chip)."""
    if path is None or path.suffix != ".toml" or not path.is_file():
        return None
    from hw.nvdla.config import is_nvdla_config, load_nvdla_config
    from hw.validate import read_toml
    if not is_nvdla_config(read_toml(path)):
        return None
    return load_nvdla_config(path, overrides)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE|PRESET",
                   help="chip config TOML file or preset name (default: built-in default; "
                        + presets_help() + ")")
    _add_set_arg(p)


from hw.energy.tech import DEFAULT_TECHNOLOGY as DEFAULT_TECH  # noqa: E402  (one home: hw.energy)


def _add_energy_args(p: argparse.ArgumentParser) -> None:
    from hw.energy import DRAM_KINDS, LINK_KINDS, technology_names
    p.add_argument("--tech", metavar="NAME|FILE", default=DEFAULT_TECH,
                   help=f"energy table: {', '.join(technology_names())} or a TOML file of the "
                        f"same format (default {DEFAULT_TECH}; docs/energy.md)")
    p.add_argument("--dram-type", choices=DRAM_KINDS,
                   help="DRAM device for energy (default: from the DRAM preset; ddr4 when the "
                        "config names none)")
    p.add_argument("--link-type", choices=LINK_KINDS, default="pcie",
                   help="host link for energy (default pcie)")


#: The sentinel a bare ``--gemm`` (no M,N,K) parses to; it is an error with a hint.
BARE_GEMM = "<bare>"


def _add_op_args(group) -> None:
    """``--gemm M,N,K`` and ``--conv SPEC``: one op as the workload, with the same meaning in
    every command that takes them (``run``, ``map``)."""
    group.add_argument("--gemm", metavar="M,N,K", nargs="?", const=BARE_GEMM,
                       help="one GEMM out(MxN) = A(MxK) @ B(KxN) as the workload, e.g. "
                            "--gemm 1024,1024,1024 (--batch N: N independent GEMMs)")
    group.add_argument("--conv", metavar="SPEC",
                       help="one convolution as the workload: HxWxCIN-COUTkK[xKW][sS][pP][gG], "
                            "e.g. 56x56x64-64k3s1p1 (ResNet-18's conv2_1)")


def _add_topology_format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology-format", choices=("conv", "gemm"),
                   help="read the topology CSV as conv layers or as GEMM rows (M, N, K) "
                        "(default: detected from its columns)")


def check_bare_gemm(gemm: str | None) -> None:
    """``--gemm`` used to mark a topology CSV as GEMM rows; it now takes M,N,K everywhere."""
    if gemm == BARE_GEMM:
        raise UserError("--gemm takes M,N,K (one GEMM as the workload, e.g. --gemm 1024,1024,1024);"
                        " to read a --topology CSV as GEMM rows use --topology-format gemm")


def _add_set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. --set array.rows=16 (repeatable)")


#: Every command and its one-line help, in the order ``npulab --help`` lists them. A command's
#: own options are built only when it runs or shows its help (see :func:`build_parser`);
#: tests/npulab/test_cli_startup.py checks this text equals the help each command registers.
COMMANDS = {
    "run": "simulate a model on a chip (the main job)",
    "scalesim": "run SCALE-Sim inputs, write SCALE-Sim reports",
    "config": "inspect configs",
    "report": "regenerate report.html (and the other reports) from a saved run",
    "dram": "DRAM timing model: replay a trace, list presets",
    "rtl": "systolic-array RTL: Verilog, synthesis, co-simulation",
    "nvdla": "NVDLA models: NVIDIA's performance spreadsheet and trace tests",
    "soc": "accelerators sharing one DRAM: slowdown vs alone",
    "collective": "time a collective on a multi-chip system",
    "system": "plan a training step over many chips",
    "sweep": "run a design-space sweep (or report on one)",
    "map": "search the mapping space of one op (tilings, loop orders, dataflows)",
}


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

    def full(name: str) -> bool:
        """Build ``name``'s options now; else register a stub that lists it."""
        if argv is None or name == wanted:
            return True
        sub.add_parser(name, help=COMMANDS[name])
        return False

    if full("run"):
        _add_run_parser(sub, fmt)
    if full("scalesim"):
        _add_scalesim_parser(sub, fmt)
    if full("config"):
        _add_config_parser(sub, fmt)
    for name in ("report", "dram", "rtl", "nvdla", "soc"):
        if full(name):
            importlib.import_module(f"npulab.{name}_cmd").add_parser(sub)
    if argv is None or wanted in ("collective", "system"):
        from npulab import system_cmd
        system_cmd.add_parsers(sub)
    else:
        full("collective")
        full("system")
    for name in ("sweep", "map"):
        if full(name):
            importlib.import_module(f"npulab.{name}_cmd").add_parser(sub)
    return parser


def _add_run_parser(sub, fmt) -> None:
    from compiler.frontends import zoo
    run = sub.add_parser(
        "run", formatter_class=fmt, help="simulate a model on a chip (the main job)",
        description="Simulate a model from the zoo (or a SCALE-Sim topology CSV, or an ONNX file) "
                    "on a chip and print per-layer cycles, compute and stall cycles by cause, SRAM, "
                    "DRAM and link traffic, achieved bandwidth, arithmetic intensity and what "
                    "bounds each layer.",
        epilog="examples:\n  npulab run                                  # ResNet-18 on the default chip\n"
               "  npulab run --model bert_base_layer --seq-len 256 --format json\n"
               "  npulab run --config eyeriss_like --set array.dataflow=os -o results/\n"
               "  npulab run --topology sim_configs/scalesim_resnet18.csv --timing scalesim\n"
               "  npulab run --config nv_full --model resnet50   # an NVDLA build\n"
               f"\nmodels: {', '.join(zoo.names())}",
    )
    _add_config_args(run)
    src = run.add_mutually_exclusive_group()
    src.add_argument("--model", "-m", help=f"zoo model name (default {DEFAULT_MODEL})")
    src.add_argument("--topology", "-t", metavar="CSV", help="SCALE-Sim topology CSV")
    src.add_argument("--onnx", metavar="MODEL", help="ONNX model file (needs the onnx extra)")
    _add_op_args(src)
    run.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="with --onnx: the size of the model's symbolic input dimension NAME "
                          "(repeatable), e.g. --dim sequence=128; the batch dimension is --batch")
    run.add_argument("--skip-unsupported", action="store_true",
                     help="with --onnx: skip unsupported ONNX ops (listed) instead of failing")
    _add_topology_format_arg(run)
    run.add_argument("--batch", type=int,
                     help="batch size for zoo models, --onnx, --gemm and --conv")
    run.add_argument("--image-size", type=int, help="input height/width for zoo CNNs")
    run.add_argument("--seq-len", type=int, help="sequence length for transformer models")
    run.add_argument("--timing", choices=TIMING_MODES, default="native",
                     help="native (default: full chip with SRAM tiling, DRAM, host link, stalls), "
                          "compute (array only, operands assumed in SRAM) or scalesim "
                          "(SCALE-Sim's compute formulas)")
    run.add_argument("--conv-lowering", choices=CONV_LOWERINGS, default="direct",
                     help="native timing: read conv inputs as NHWC patches (direct, default) or "
                          "as an expanded im2col matrix in DRAM")
    run.add_argument("--loop-order", choices=ORDERS,
                     help="native timing: force the tile loop order (default: chosen per layer)")
    run.add_argument("--no-keep-on-chip", action="store_true",
                     help="native timing: always write layer outputs to DRAM")
    run.add_argument("--sram-layout", choices=SRAM_LAYOUTS, default="matched",
                     help="native timing: tile layout in SRAM (row-major can cause bank conflicts)")
    run.add_argument("--map", choices=tuple(MAP_MODES),
                     help="native timing: tile every layer with the mapper, which searches "
                          "tile sizes and loop orders for the lowest estimated latency, energy "
                          "(with --tech's table) or energy-delay product, and on an array with "
                          "array.reconfigurable=true the dataflow too (default: the tiler's "
                          "latency heuristic)")
    run.add_argument("--precision", choices=("int8", "int16", "fp16"),
                     help="NVDLA builds: data type of the network (default int8; int16/fp16 "
                          "need nv_full); systolic chips take --set array.precision=...")
    run.add_argument("--format", "-f", choices=RUN_FORMATS, default="table", help="stdout format")
    run.add_argument("--output", "-o", metavar="DIR",
                     help="also write summary.json, layers.csv, report.txt, report.html and "
                          "trace.json (Perfetto timeline) into DIR")
    _add_energy_args(run)
    run.add_argument("--quiet", "-q", action="store_true",
                     help="no progress bar and no 'wrote' message (the bar is drawn only on a "
                          "terminal anyway)")



def _add_scalesim_parser(sub, fmt) -> None:
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
    _add_topology_format_arg(ss)
    ss.add_argument("--gemm", nargs="?", const=BARE_GEMM, help=argparse.SUPPRESS)
    ss.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the reports")
    ss.add_argument("--scalesim-issue-166", action="store_true",
                    help="report OS ofmap writes as SCALE-Sim does (over-counted by folds*(R+C))")
    _add_set_arg(ss)



def _add_config_parser(sub, fmt) -> None:
    cfg = sub.add_parser("config", help="inspect configs",
                         description="Inspect chip configs.")
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    show = cfg_sub.add_parser(
        "show", formatter_class=fmt, help="print the effective config as TOML",
        description="Print the effective chip config (file + --set overrides) as TOML.",
        epilog="examples:\n  npulab config show\n  npulab config show --config tpu_v1_like --set array.rows=128",
    )
    _add_config_args(show)
    cfg_sub.add_parser("list", help="list the shipped presets", description="List the shipped presets.")


def _zoo_params(args) -> dict:
    params = {}
    for key in ("batch", "image_size", "seq_len"):
        value = getattr(args, key)
        if value is not None:
            params[key] = value
    return params


_SYSTOLIC_ONLY = (("timing", "native"), ("conv_lowering", "direct"), ("loop_order", None),
                  ("no_keep_on_chip", False), ("sram_layout", "matched"), ("map", None))


def _native_only(args) -> None:
    """Options that only the native (tiled, full-chip) timing reads are errors elsewhere, not
    silently ignored."""
    if args.timing == "native":
        return
    for key, default in _SYSTOLIC_ONLY:
        if key != "timing" and getattr(args, key) != default:
            raise UserError(f"--{key.replace('_', '-')} applies to --timing native (it tiles "
                            f"layers for the full chip); --timing {args.timing} does not tile")


def _workload(args):
    """The graph ``npulab run`` simulates: a zoo model (default), a topology CSV, an ONNX file,
    or one ``--gemm``/``--conv`` op."""
    from compiler.frontends import zoo
    if args.onnx:
        if any(v is not None for v in (args.image_size, args.seq_len)):
            raise UserError("--image-size/--seq-len apply to zoo models, not --onnx")
        return _import_onnx(args)
    if args.topology_format is not None and not args.topology:
        raise UserError("--topology-format applies to --topology CSV files")
    if args.topology:
        from compiler.frontends.scalesim_topology import read_topology
        if any(v is not None for v in (args.batch, args.image_size, args.seq_len)):
            raise UserError("--batch/--image-size/--seq-len apply to zoo models, not --topology")
        return read_topology(args.topology, gemm=_topology_gemm(args))
    if args.gemm or args.conv:
        if any(v is not None for v in (args.image_size, args.seq_len)):
            raise UserError("--image-size/--seq-len apply to zoo models, not --gemm/--conv")
        from compiler.ir import Graph
        from npulab.map_cmd import op_from_spec
        op = op_from_spec(args.gemm, args.conv, args.batch)
        return Graph(name=op.name.replace(" ", "_"), ops=(op,))
    try:
        return zoo.get(args.model or DEFAULT_MODEL, **_zoo_params(args))
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _topology_gemm(args) -> bool | None:
    return None if args.topology_format is None else args.topology_format == "gemm"


def _check_run_paths(args) -> None:
    """Before any work: the input files are readable files, the output directory can be made,
    the energy table loads (it is used only after the simulation)."""
    from hw.energy import load_technology
    from hw.files import check_input_file, check_output_dir
    if args.topology:
        check_input_file(args.topology, "topology CSV", flag="--topology")
    if args.onnx:
        check_input_file(args.onnx, "ONNX model", flag="--onnx")
    if args.output:
        check_output_dir(args.output, flag="--output")
    load_technology(args.tech)


def cmd_run(args) -> int:
    from hw.configfile import load_chip_config
    check_bare_gemm(args.gemm)
    _check_run_paths(args)
    if args.dim and not args.onnx:
        raise UserError("--dim applies to --onnx models (symbolic input dimensions); zoo "
                        "models take --batch, --image-size and --seq-len")
    path = resolve_config(args.config)
    nvdla = _load_nvdla(path, args.set)
    if nvdla is not None:
        for key, default in _SYSTOLIC_ONLY:
            if getattr(args, key) != default:
                raise UserError(f"--{key.replace('_', '-')} applies to systolic chips; "
                                f"{nvdla.name} is an NVDLA build (its cycle model is fixed)")
        chip = None
    else:
        if args.precision is not None:
            raise UserError("--precision applies to NVDLA builds; for a systolic chip use "
                            "--set array.precision=int8|int16|fp16")
        _native_only(args)
        chip = load_chip_config(path, args.set)
    if args.skip_unsupported and not args.onnx and nvdla is None:
        raise UserError("--skip-unsupported applies to --onnx models (and to any model on an "
                        "NVDLA build)")
    graph = _workload(args)
    from npulab.progress import Progress, compile_notice
    progress = Progress(quiet=args.quiet)
    with compile_notice(progress):
        if nvdla is not None:
            from hw.nvdla.lower import NvdlaLoweringError
            from npulab.nvdla_run import simulate_nvdla
            try:
                result = simulate_nvdla(graph, nvdla, args.precision or "int8",
                                        skip_unsupported=args.skip_unsupported,
                                        progress=progress)
            except NvdlaLoweringError as exc:
                message = str(exc).split("; pass skip_unsupported=True")[0]
                raise UserError(f"{message} (--skip-unsupported leaves such ops out and lists "
                                f"them)") from None
        else:
            from compiler.options import CompileOptions
            from npulab.simulate import simulate
            options = CompileOptions(conv_lowering=args.conv_lowering,
                                     loop_order=args.loop_order,
                                     keep_on_chip=not args.no_keep_on_chip,
                                     sram_layout=args.sram_layout, map=args.map, tech=args.tech)
            result = simulate(graph, chip, args.timing, progress=progress, options=options)
        metrics = _metrics(result, args)
    from npulab.report import render
    sys.stdout.write(render(result, args.format, metrics))
    if args.output:
        from npulab.output import write_run_outputs
        paths = write_run_outputs(result, metrics, args.output)
        if not args.quiet:
            print(f"npulab: wrote {', '.join(p.name for p in paths)} to {args.output}",
                  file=sys.stderr)
    return 0


def _metrics(result, args):
    from npulab.metrics import compute_metrics
    return compute_metrics(result, args.tech, dram_kind=args.dram_type, link_kind=args.link_type)


def _import_onnx(args):
    try:
        from compiler.frontends.onnx_import import OnnxImportError, import_onnx
    except ModuleNotFoundError as exc:
        raise UserError(f"--onnx needs the onnx package ({exc}); install it with "
                        f"pip install 'npulab[onnx]'") from None
    try:
        graph, report = import_onnx(args.onnx, batch=args.batch,
                                    skip_unsupported=args.skip_unsupported,
                                    dims=parse_dims(args.dim))
    except OnnxImportError as exc:
        raise UserError(str(exc)) from None
    if report.skipped:
        skipped = ", ".join(f"{op} ({node})" for op, node in report.skipped)
        print(f"npulab: skipped unsupported ONNX ops: {skipped}", file=sys.stderr)
    return graph


def parse_dims(texts: list[str]) -> dict[str, int]:
    """``--dim NAME=SIZE`` options as ``{NAME: SIZE}``; UserError for a malformed one, a size
    that is not an integer >= 1, or a NAME given twice."""
    dims: dict[str, int] = {}
    for text in texts:
        name, eq, size = (part.strip() for part in text.partition("="))
        if not eq or not name:
            raise UserError(f"--dim {text}: expected NAME=SIZE, e.g. --dim sequence=128")
        if name in dims:
            raise UserError(f"--dim {text}: {name} is given twice")
        if not size.isdecimal() or int(size) < 1:
            raise UserError(f"--dim {text}: SIZE {size!r} must be an integer >= 1")
        dims[name] = int(size)
    return dims


def cmd_scalesim(args) -> int:
    from npulab.scalesim_cmd import run_scalesim
    check_bare_gemm(args.gemm)
    if args.gemm is not None:
        raise UserError("npulab scalesim reads its layers from -t CSV; --gemm M,N,K is for "
                        "npulab run and npulab map (GEMM rows in the CSV: --topology-format gemm)")

    from hw.files import check_input_file, check_output_dir
    check_input_file(args.config, "SCALE-Sim .cfg", flag="--config")
    check_input_file(args.topology, "topology CSV", flag="--topology")
    check_output_dir(args.output, flag="--output")

    layers = run_scalesim(args.config, args.topology, args.output, gemm=_topology_gemm(args),
                          overrides=args.set, issue_166=args.scalesim_issue_166)
    total = sum(layer.timing.total_cycles for layer in layers)
    print(f"npulab scalesim: {len(layers)} layers, {total:,} total cycles (CALC mode); "
          f"wrote COMPUTE_REPORT.csv and DETAILED_ACCESS_REPORT.csv to {args.output}")
    return 0


def cmd_config(args, parser) -> int:
    if args.config_command == "show":
        from hw.configfile import chip_config_to_toml, load_chip_config
        sys.stdout.write(chip_config_to_toml(load_chip_config(resolve_config(args.config), args.set)))
        return 0
    if args.config_command == "list":
        print("\n".join(preset_names()))
        print("# NVDLA builds (hw.nvdla.config.load_nvdla_config): "
              + ", ".join(nvdla_preset_names()))
        return 0
    parser.parse_args(["config", "--help"])
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "scalesim":
            return cmd_scalesim(args)
        if args.command == "config":
            return cmd_config(args, parser)
        if args.command == "report":
            from npulab import report_cmd
            return report_cmd.main(args)
        if args.command == "dram":
            from npulab import dram_cmd
            return dram_cmd.main(args)
        if args.command == "rtl":
            from npulab import rtl_cmd
            return rtl_cmd.main(args)
        if args.command == "nvdla":
            from npulab import nvdla_cmd
            return nvdla_cmd.main(args)
        if args.command in ("system", "collective"):
            from npulab import system_cmd
            return system_cmd.main(args)
        if args.command == "soc":
            from npulab import soc_cmd
            return soc_cmd.main(args)
        if args.command == "sweep":
            from npulab import sweep_cmd
            return sweep_cmd.main(args)
        if args.command == "map":
            from npulab import map_cmd
            return map_cmd.main(args)
        parser.print_help()
        return 2
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
