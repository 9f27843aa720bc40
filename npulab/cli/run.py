"""``npulab run``: simulate a workload on a chip and print (and write) the reports."""

from __future__ import annotations

import argparse
import sys

from compiler.options import CONV_LOWERINGS, MAP_MODES, MAX_STAGES, ORDERS, PLACEMENTS, SRAM_LAYOUTS
from npulab.choices import ARRAY_PRECISIONS, RUN_FORMATS, TIMING_MODES
from npulab.cli.common import (
    DEFAULT_MODEL, UserError, add_config_args, add_energy_args, add_op_args,
    add_topology_format_arg, check_bare_gemm, resolve_config, topology_gemm,
)

def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
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
               "  npulab run --op softmax:1536,128 --format json   # one op\n"
               f"\nmodels: {', '.join(zoo.names())}",
    )
    add_config_args(run)
    src = run.add_mutually_exclusive_group()
    src.add_argument("--model", "-m", help=f"zoo model name (default {DEFAULT_MODEL})")
    src.add_argument("--topology", "-t", metavar="CSV", help="SCALE-Sim topology CSV")
    src.add_argument("--onnx", metavar="MODEL", help="ONNX model file (needs the onnx extra)")
    add_op_args(src)
    src.add_argument("--op", metavar="KIND:DIMS",
                     help="one op of any engine as the workload: gemm:M,N,K, conv:SPEC, "
                          "softmax:ROWS,COLS, layernorm:ROWS,COLS, rmsnorm:ROWS,COLS, "
                          "gelu:ELEMENTS (any activation), add:ELEMENTS, reduce_mean:ROWS,COLS, "
                          "maxpool:HxWxC-kK[sS][pP], transpose:ELEMENTS")
    run.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="with --onnx: the size of the model's symbolic input dimension NAME "
                          "(repeatable), e.g. --dim sequence=128; the batch dimension is --batch")
    run.add_argument("--sparsity-from-weights", action="store_true",
                     help="with --onnx: read the weights and give each conv and matrix layer "
                          "the N:M structure its zeros have along K (run compressed on "
                          "array.sparse_m PEs; see --sparsity)")
    run.add_argument("--skip-unsupported", action="store_true",
                     help="with --onnx: skip unsupported ONNX ops (listed) instead of failing")
    add_topology_format_arg(run)
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
    run.add_argument("--no-fusion", action="store_true",
                     help="native timing: run every op alone, each intermediate tensor through "
                          "DRAM (default: GEMM/conv epilogues, FlashAttention-style attention, "
                          "add + norm and conv + pool fused on chips with a vector engine)")
    run.add_argument("--placement", choices=PLACEMENTS, default="split",
                     help="native timing on a multi-core chip: split every op over all the "
                          "cores (split, default) or run consecutive layers in pipeline stages, "
                          "each on its own cores, inputs streaming through (pipeline: reports "
                          "the period and inputs/s of the steady state)")
    run.add_argument("--stages", type=int, metavar="N",
                     help=f"with --placement pipeline: the number of stages, 1..{MAX_STAGES} "
                          f"(default: the planner's choice, the shortest estimated period)")
    run.add_argument("--sparsity", metavar="N:M|LO-HI:M",
                     help="native timing: take every layer's stored weights as N:M pruned along "
                          "K (e.g. 2:4) and run them compressed on the array's N:M sparse PEs "
                          "(needs array.sparse_m = M); 'LO-HI:M' (e.g. 1-2:4) is row-wise: the "
                          "output channels take each N from LO to HI in equal shares; 'dense' "
                          "ignores the model's own sparsity (default: each layer's, from "
                          "--sparsity-from-weights)")
    run.add_argument("--act-zeros", metavar="RATIO|PATTERN=RATIO,...",
                     help="native timing: the fraction of each matrix layer's input activations "
                          "that are zero (e.g. 0.5 after a ReLU), or per layer as "
                          "'conv*=0.6,fc=0.3' (op-name patterns, first match wins); zero "
                          "activations gate the PEs' MAC energy, not cycles (default: each "
                          "layer's own, else 0)")
    run.add_argument("--weight-bits", type=int, choices=(4, 8, 16),
                     help="native timing: store every conv and linear layer's weights in this "
                          "many bits, widened to the array's precision as they are loaded "
                          "(weight-only quantization: 4 on an int8 array is W4A8)")
    run.add_argument("--weight-format", metavar="FORMAT[:DENSITY]",
                     help="native timing: keep every layer's stored weights in an unstructured-"
                          "sparse format (dense, bitmask, csr, csc, ellpack), in DRAM and the "
                          "filter scratchpad, decompressed at its port; DENSITY (0..1) is the "
                          "fraction of nonzero weights (default: each layer's, from "
                          "--sparsity-from-weights, else 1); bytes change, MACs do not")
    run.add_argument("--sram-layout", choices=SRAM_LAYOUTS, default="matched",
                     help="native timing: tile layout in SRAM (row-major can cause bank conflicts)")
    run.add_argument("--map", choices=tuple(MAP_MODES),
                     help="native timing: tile every layer with the mapper, which searches "
                          "tile sizes and loop orders for the lowest estimated latency, energy "
                          "(with --tech's table) or energy-delay product, and on an array with "
                          "array.reconfigurable=true the dataflow too (default: the tiler's "
                          "latency heuristic)")
    run.add_argument("--precision", choices=ARRAY_PRECISIONS,
                     help="data type of the network: NVDLA builds int8, int16 or fp16 (default "
                          "int8; int16/fp16 need nv_full); on a systolic chip the array's "
                          "precision (as --set array.precision=...; int4 and binary are packed "
                          "two and eight per byte in the chip's memories)")
    run.add_argument("--format", "-f", choices=RUN_FORMATS, default="table", help="stdout format")
    run.add_argument("--output", "-o", metavar="DIR",
                     help="also write summary.json, layers.csv, report.txt, report.html and "
                          "trace.json (Perfetto timeline) into DIR")
    add_energy_args(run)
    run.add_argument("--quiet", "-q", action="store_true",
                     help="no progress bar and no 'wrote' message (the bar is drawn only on a "
                          "terminal anyway)")


def _zoo_params(args) -> dict:
    params = {}
    for key in ("batch", "image_size", "seq_len"):
        value = getattr(args, key)
        if value is not None:
            params[key] = value
    return params


#: The flag that sets each RunOptions field: the pipeline's OptionError names the field.
_FLAGS = {"timing": "--timing", "compile.conv_lowering": "--conv-lowering",
          "compile.loop_order": "--loop-order", "compile.keep_on_chip": "--no-keep-on-chip",
          "compile.sram_layout": "--sram-layout", "compile.map": "--map",
          "compile.fusion": "--no-fusion", "compile.placement": "--placement",
          "compile.stages": "--stages", "compile.sparsity": "--sparsity",
          "compile.act_zeros": "--act-zeros", "compile.weight_format": "--weight-format",
          "compile.weight_bits": "--weight-bits",
          "precision": "--precision", "skip_unsupported": "--skip-unsupported"}


#: Flags an error names with their value (the others' rules hold for any value).
_VALUED = ("compile.placement", "compile.stages", "compile.sparsity", "compile.act_zeros",
           "compile.weight_format", "compile.weight_bits")


def _in_flags(exc) -> str:
    """An :class:`npulab.pipeline.OptionError` worded with flags: ``--loop-order applies to
    --timing native ...``; a config key it mentions as ``--set KEY=VALUE``."""
    if exc.option == "skip_unsupported":        # the flag is the ONNX import's too
        return ("--skip-unsupported applies to --onnx models (and to any model on an NVDLA "
                "build)")
    return exc.words(lambda option, value: (f"{_FLAGS[option]} {value}" if option in _VALUED
                                            else _FLAGS.get(option, option)),
                     lambda key, value: (f"{_FLAGS[key]} {value}" if key in _FLAGS
                                         else f"--set {key}={value}"))


def _placement(args) -> dict:
    """``placement`` and ``stages`` of the compile options, checked as flags."""
    if args.stages is not None and args.placement != "pipeline":
        raise UserError(f"--stages {args.stages}: applies to --placement pipeline")
    if args.stages is not None and not 1 <= args.stages <= MAX_STAGES:
        raise UserError(f"--stages {args.stages}: must be in 1..{MAX_STAGES}")
    return {"placement": args.placement, "stages": args.stages}


def _sparsity(args) -> str | None:
    """``--sparsity`` checked as a flag (a one-line error naming it)."""
    from hw.sparsity import parse_sparsity
    if args.sparsity is None:
        return None
    try:
        parse_sparsity(args.sparsity, "--sparsity")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return args.sparsity


def _checked_flag(args, key: str, flag: str) -> str | None:
    """``args.<key>`` checked by its parser as ``flag`` (a one-line error naming it)."""
    from compiler.options import parse_act_zeros, parse_weight_format
    value = getattr(args, key)
    if value is None:
        return None
    parse = {"act_zeros": parse_act_zeros, "weight_format": parse_weight_format}[key]
    try:
        parse(value, flag)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return value


def _run_options(args, spec):
    """The :class:`~npulab.pipeline.RunOptions` the flags ask for, checked against the chip
    (:func:`npulab.pipeline.check_options`) before any work: a flag that the chip's kind or
    the timing mode does not read is an error naming it, not silently ignored."""
    from dataclasses import replace

    from compiler.options import CompileOptions
    from npulab.pipeline import OptionError, RunOptions, check_options
    compile_options = CompileOptions(
        conv_lowering=args.conv_lowering, loop_order=args.loop_order,
        keep_on_chip=not args.no_keep_on_chip, sram_layout=args.sram_layout, map=args.map,
        tech=args.tech, fusion=not args.no_fusion, sparsity=_sparsity(args),
        act_zeros=_checked_flag(args, "act_zeros", "--act-zeros"),
        weight_format=_checked_flag(args, "weight_format", "--weight-format"),
        weight_bits=args.weight_bits,
        **_placement(args))
    options = RunOptions(timing=args.timing, compile=compile_options, precision=args.precision,
                         skip_unsupported=args.skip_unsupported)
    if args.skip_unsupported and args.onnx:
        try:
            check_options(spec, options)
        except OptionError as exc:
            if exc.option == "skip_unsupported":    # the ONNX import's flag alone on this chip
                options = replace(options, skip_unsupported=False)
    try:
        check_options(spec, options)
    except OptionError as exc:
        raise UserError(_in_flags(exc)) from None
    return options


def _workload(args, sparse_m: int = 0):
    """The graph ``npulab run`` simulates: a zoo model (default), a topology CSV, an ONNX file,
    or one ``--gemm``/``--conv`` op. ``sparse_m``: the chip's N:M group size, which
    ``--sparsity-from-weights`` finds each layer's N for (0: the sparsest over 2, 4, 8, 16)."""
    from compiler.frontends import zoo
    if args.onnx:
        if any(v is not None for v in (args.image_size, args.seq_len)):
            raise UserError("--image-size/--seq-len apply to zoo models, not --onnx")
        return _import_onnx(args, sparse_m)
    if args.sparsity_from_weights:
        raise UserError("--sparsity-from-weights applies to --onnx models (it reads their "
                        "weights); use --sparsity N:M for the others")
    if args.topology_format is not None and not args.topology:
        raise UserError("--topology-format applies to --topology CSV files")
    if args.topology:
        from compiler.frontends.scalesim_topology import read_topology
        if any(v is not None for v in (args.batch, args.image_size, args.seq_len)):
            raise UserError("--batch/--image-size/--seq-len apply to zoo models, not --topology")
        return read_topology(args.topology, gemm=topology_gemm(args))
    if args.op:
        if any(v is not None for v in (args.batch, args.image_size, args.seq_len)):
            raise UserError("--batch/--image-size/--seq-len apply to zoo models, not --op")
        from compiler.ir import Graph
        from compiler.frontends.opspec import parse_op
        op = parse_op(args.op)
        return Graph(name=op.name.replace(" ", "_").replace(":", "_"), ops=(op,))
    if args.gemm or args.conv:
        if any(v is not None for v in (args.image_size, args.seq_len)):
            raise UserError("--image-size/--seq-len apply to zoo models, not --gemm/--conv")
        from compiler.ir import Graph
        from compiler.frontends.opspec import op_from_spec
        op = op_from_spec(args.gemm, args.conv, args.batch)   # --gemm checked in main
        return Graph(name=op.name.replace(" ", "_"), ops=(op,))
    try:
        return zoo.get(args.model or DEFAULT_MODEL, **_zoo_params(args))
    except ValueError as exc:
        raise UserError(str(exc)) from None


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


def main(args) -> int:
    from hw.configfile import load_chip
    check_bare_gemm(args.gemm)
    _check_run_paths(args)
    if args.dim and not args.onnx:
        raise UserError("--dim applies to --onnx models (symbolic input dimensions); zoo "
                        "models take --batch, --image-size and --seq-len")
    spec = load_chip(resolve_config(args.config), args.set)
    options = _run_options(args, spec)
    sparse_m = spec.config.array.sparse_m if spec.kind == "systolic" else 0
    graph = _workload(args, sparse_m)
    from npulab.pipeline import OptionError, run
    from npulab.progress import Progress, compile_notice
    progress = Progress(quiet=args.quiet)
    with compile_notice(progress):
        from compiler.backends.nvdla import NvdlaLoweringError
        try:
            result = run(graph, spec, options, progress=progress)
        except OptionError as exc:      # one the graph decides (a pipeline's stages)
            raise UserError(_in_flags(exc)) from None
        except NvdlaLoweringError as exc:
            message = str(exc).split("; pass skip_unsupported=True")[0]
            raise UserError(f"{message} (--skip-unsupported leaves such ops out and lists "
                            f"them)") from None
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


def _import_onnx(args, sparse_m: int = 0):
    try:
        from compiler.frontends.onnx_import import OnnxImportError, import_onnx
    except ModuleNotFoundError as exc:
        raise UserError(f"--onnx needs the onnx package ({exc}); install it with "
                        f"pip install 'npulab[onnx]'") from None
    try:
        graph, report = import_onnx(args.onnx, batch=args.batch,
                                    skip_unsupported=args.skip_unsupported,
                                    dims=parse_dims(args.dim),
                                    sparsity_from_weights=args.sparsity_from_weights,
                                    nm_groups=(sparse_m,) if sparse_m else None)
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
