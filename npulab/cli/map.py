"""``npulab map``: search the mapping space of ONE op on one chip and print the best mappings.

The op is a zoo model's layer (``--model NAME --layer LAYER``), one GEMM (``--gemm M,N,K``) or
one convolution (``--conv 56x56x64-64k3s1p1``, grammar in
:func:`compiler.frontends.opspec.parse_conv`); the chip is ``npulab run``'s (``--config``,
``--set``). :func:`npulab.map_run.map_op` maps it (the tiler's choice costed, the space of
tile sizes x loop orders x dataflows searched for ``--objective``); this module prints a
header (op, GEMM shape, chip, space size, mappings costed, exhaustive or pruned with the pruned
search's guarantee, search time and rate), the top-K table with utilization ``MACs performed / (PEs x
latency)``, and a last line comparing the best with the default tiler's choice; or the JSON of
:meth:`npulab.map_run.OpMapping.to_dict`.

Only light modules are imported by :func:`add_parser`; the mapper, and its Numba kernel, load
when the command runs. The op specs are :mod:`compiler.frontends.opspec`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from compiler.options import CONV_LOWERINGS

__all__ = ["add_parser", "main", "OBJECTIVES", "DEFAULT_SAMPLES", "DEFAULT_EXHAUSTIVE_LIMIT"]

#: The mapper's objectives (:data:`compiler.mapper.OBJECTIVES`; repeated here so building the
#: parser does not import the mapper -- a test keeps them equal).
OBJECTIVES = ("latency", "energy", "edp")
#: :data:`compiler.mapper.DEFAULT_SAMPLES` and :data:`~compiler.mapper.DEFAULT_EXHAUSTIVE_LIMIT`.
DEFAULT_SAMPLES = 20_000
DEFAULT_EXHAUSTIVE_LIMIT = 1_000_000
DEFAULT_MODEL = "resnet18"
DEFAULT_LAYER = "layer1.0.conv1"       # ResNet-18 conv2_1: 56x56x64 -> 64, 3x3, pad 1
DEFAULT_TOP = 10
DATAFLOW_NAMES = ("os", "ws", "is")
FORMATS = ("table", "json")
#: The flag that sets each :class:`npulab.map_run.MapOptions` field.
_FLAGS = {"objective": "--objective", "dataflows": "--dataflows", "loop_order": "--loop-order",
          "conv_lowering": "--conv-lowering", "samples": "--samples",
          "exhaustive_limit": "--exhaustive-limit", "seed": "--seed", "keep": "--top",
          "tech": "--tech", "dram_kind": "--dram-type", "sparsity": "--sparsity",
          "act_zeros": "--act-zeros", "weight_format": "--weight-format",
          "weight_bits": "--weight-bits"}


def add_parser(subparsers) -> None:
    """Register ``map`` on an argparse subparsers object."""
    from compiler.frontends.opspec import CONV_SYNTAX
    from hw.energy.tech import DEFAULT_TECHNOLOGY as DEFAULT_TECH
    from npulab.cli.common import add_config_args, add_op_args
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "map", formatter_class=fmt, help="search the mapping space of one op (tilings, loop "
                                         "orders, dataflows)",
        description="Map one op on one chip: search DRAM->scratchpad tile sizes, the six tile\n"
                    "loop orders and (optionally) dataflows with the mapper's cost model (timing\n"
                    "engine cycles, DRAM traffic, npulab's energies); print the best mappings,\n"
                    "the size of the space, how much of it was costed, and how much better the\n"
                    "best is than the default tiler's choice. The op is mapped on its own (input\n"
                    "from DRAM, output to DRAM).",
        epilog="examples:\n"
               "  npulab map                                   # ResNet-18 layer1.0.conv1, "
               "default chip\n"
               "  npulab map --model resnet50 --layer layer3.0.conv2 --objective edp\n"
               "  npulab map --gemm 512,768,768 --config tpu_v1_like --top 5\n"
               "  npulab map --conv 56x56x64-64k3s1p1 --dataflows all --format json\n"
               "  npulab map --conv 28x28x128-128k3p1 --conv-lowering im2col --exhaustive-limit 0\n"
               f"\nconv spec: {CONV_SYNTAX}\n"
               "more: docs/mapper.md")
    add_config_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", "-m", metavar="NAME",
                     help=f"zoo model the op comes from (default {DEFAULT_MODEL}, with --layer "
                          f"{DEFAULT_LAYER} when no op is given)")
    add_op_args(src)
    p.add_argument("--layer", "-l", metavar="LAYER",
                   help="op name in the zoo model (a Conv2d or Gemm), e.g. layer1.0.conv1")
    p.add_argument("--batch", metavar="N", help="batch size (zoo model, --conv images, --gemm "
                                               "independent GEMMs)")
    p.add_argument("--image-size", metavar="N", help="input height/width for zoo CNNs")
    p.add_argument("--seq-len", metavar="N", help="sequence length for transformer models")
    p.add_argument("--conv-lowering", metavar="|".join(CONV_LOWERINGS), default="direct",
                   help="convolutions: NHWC patches read directly (default) or an expanded "
                        "im2col matrix in DRAM")
    p.add_argument("--objective", metavar="|".join(OBJECTIVES), default="latency",
                   help="what to minimise: estimated latency (default), energy, or "
                        "energy-delay product")
    p.add_argument("--top", metavar="K", default=str(DEFAULT_TOP),
                   help=f"how many mappings to print (default {DEFAULT_TOP})")
    p.add_argument("--dataflows", metavar="chip|all|os,ws,is", default="chip",
                   help="dataflows to search: the chip's own (default; all three when "
                        "array.reconfigurable=true); 'all' or a list costs the others on the "
                        "same array as a what-if (a fixed array runs the chip's dataflow: "
                        "change it with --set array.dataflow=...)")
    p.add_argument("--loop-order", metavar="ORDER",
                   help="allow only this tile loop order (mnk, nmk, mkn, kmn, nkm, knm; "
                        "outermost first), for the mapper and the tiler (default: all six)")
    p.add_argument("--samples", metavar="N", default=str(DEFAULT_SAMPLES),
                   help=f"pruned search: seeded uniform samples (default {DEFAULT_SAMPLES:,})")
    p.add_argument("--exhaustive-limit", metavar="N", default=str(DEFAULT_EXHAUSTIVE_LIMIT),
                   help=f"largest space costed exhaustively (default "
                        f"{DEFAULT_EXHAUSTIVE_LIMIT:,}); larger spaces get the pruned search")
    p.add_argument("--seed", metavar="N", default="0", help="pruned search: sampling seed "
                                                            "(default 0)")
    p.add_argument("--sparsity", metavar="N:M",
                   help="the op's weights are N:M pruned along K and run compressed on the "
                        "array's sparse PEs (needs --set array.sparse_m=M; 'dense' ignores the "
                        "op's own)")
    p.add_argument("--act-zeros", metavar="RATIO",
                   help="fraction of the op's activations that are zero (gates MAC energy)")
    p.add_argument("--weight-bits", type=int, choices=(4, 8, 16),
                   help="store the weights in this many bits, widened as they are loaded")
    p.add_argument("--weight-format", metavar="FORMAT[:DENSITY]",
                   help="keep the weights in a sparse storage format: dense, bitmask, csr, "
                        "csc, ellpack, with the fraction of nonzero weights")
    p.add_argument("--tech", metavar="NAME|FILE", default=DEFAULT_TECH,
                   help=f"energy table: a shipped one (45nm, 16nm, 7nm) or a TOML file "
                        f"(default {DEFAULT_TECH}, as npulab run; docs/energy.md)")
    p.add_argument("--dram-type", metavar="KIND",
                   help="DRAM device for energy: ddr4, lpddr4, lpddr5, hbm2, hbm3 (default: "
                        "from the DRAM preset, as npulab run)")
    p.add_argument("--wall-time", action="store_true",
                   help="with --format json: add the search's wall-clock seconds and mappings "
                        "per second under \"wall_time\" (left out by default, so the same "
                        "search gives byte-identical JSON)")
    p.add_argument("--format", "-f", metavar="|".join(FORMATS), default="table",
                   help="stdout format (default table)")


# ---------------------------------------------------------------- argument checks


def _error(message: str) -> Exception:
    from npulab.cli.common import UserError
    return UserError(message)


def _choice(option: str, value: str, allowed) -> str:
    if value not in allowed:
        raise _error(f"{option} {value}: must be one of {', '.join(allowed)}")
    return value


def _int(option: str, value, lo: int) -> int | None:
    """An integer option >= ``lo`` (``_`` separators allowed); None when not given."""
    from compiler.frontends.opspec import int_option
    return int_option(option, value, lo)


def _dataflows(spec: str) -> tuple[str, ...] | None:
    """``--dataflows``: None for ``chip`` (the chip's own), else the dataflow names."""
    text = spec.strip().lower()
    if text == "chip":
        return None
    if text == "all":
        return DATAFLOW_NAMES
    names = [x.strip() for x in text.split(",")]
    bad = [x for x in names if x not in DATAFLOW_NAMES]
    if bad or not names:
        raise _error(f"--dataflows {spec}: must be chip, all, or a comma list of "
                     f"{', '.join(DATAFLOW_NAMES)}")
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------- the op


def _op(args):
    """``(op, source)``: the op to map and a label of where it came from."""
    batch = _int("--batch", args.batch, 1)
    image_size = _int("--image-size", args.image_size, 1)
    seq_len = _int("--seq-len", args.seq_len, 1)
    if args.layer is not None and (args.gemm or args.conv):
        raise _error("--layer applies to --model (a zoo model's op), not --gemm/--conv")
    if args.gemm or args.conv:
        if image_size is not None or seq_len is not None:
            raise _error("--image-size/--seq-len apply to zoo models, not --gemm/--conv")
        from compiler.frontends.opspec import op_from_spec
        from npulab.cli.common import check_bare_gemm
        check_bare_gemm(args.gemm)
        op = op_from_spec(args.gemm, args.conv, batch)
        return op, ("--gemm" if args.gemm else "--conv")
    from compiler.frontends import zoo
    model = args.model or DEFAULT_MODEL
    if args.model is not None and args.layer is None:
        layer = None
    else:
        layer = args.layer or DEFAULT_LAYER
    params = {key: value for key, value in (("batch", batch), ("image_size", image_size),
                                            ("seq_len", seq_len)) if value is not None}
    try:
        graph = zoo.get(model, **params)
    except ValueError as exc:
        raise _error(f"--model {model}: {exc}") from None
    matrix = [op.name for op in graph.ops if op.gemm_shape() is not None]
    if layer is None:
        raise _error(f"--model {model}: give --layer LAYER, one of its {len(matrix)} matrix "
                     f"ops: {_few(matrix)}")
    try:
        op = graph.op(layer)
    except KeyError:
        import difflib
        near = difflib.get_close_matches(layer, matrix, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise _error(f"--layer {layer}: no such op in {model}{hint} ({len(matrix)} matrix ops: "
                     f"{_few(matrix)})") from None
    if op.gemm_shape() is None:
        raise _error(f"--layer {layer}: a {type(op).__name__} op of {model}, which runs off "
                     f"the array; pick a matrix op (Conv2d or Gemm): {_few(matrix)}")
    return op, model


def _few(names: list[str], head: int = 6) -> str:
    if len(names) <= head + 1:
        return ", ".join(names)
    return f"{', '.join(names[:head])}, ..., {names[-1]}"


def _options(args):
    """The :class:`~npulab.map_run.MapOptions` the flags ask for; a bad value is an error
    naming its flag."""
    from npulab.map_run import MapOptions
    from npulab.pipeline import OptionError
    texts = {"keep": args.top, "samples": args.samples,
             "exhaustive_limit": args.exhaustive_limit, "seed": args.seed}
    ints = {name: _int(_FLAGS[name], text, MapOptions.MINIMUM[name])
            for name, text in texts.items()}
    try:
        return MapOptions(objective=args.objective, dataflows=_dataflows(args.dataflows),
                          loop_order=args.loop_order, conv_lowering=args.conv_lowering,
                          tech=args.tech, dram_kind=args.dram_type, sparsity=args.sparsity,
                          act_zeros=args.act_zeros, weight_format=args.weight_format,
                          weight_bits=args.weight_bits, **ints)
    except OptionError as exc:
        raise _error(exc.words(lambda option, value: f"{_FLAGS[option]} {value}",
                               lambda key, value: f"{key} {value}")) from None


def _chip(args):
    """The :class:`~hw.spec.ChipSpec` ``--config`` and ``--set`` name, loaded once; an NVDLA build is refused as it
    is without ``--set`` (its mapping is not searched), not for keys it does not have."""
    from hw.configfile import load_chip
    from hw.systolic.config import ConfigError
    from npulab.cli.common import presets_help, resolve_config
    from npulab.map_run import mapped_chip
    path = resolve_config(args.config)
    try:
        spec = load_chip(path, args.set)
    except ConfigError:
        if not args.set or load_chip(path).kind == "systolic":
            raise
        spec = load_chip(path)             # the build's own error below, not a --set key's
    try:
        mapped_chip(spec)
        return spec
    except ValueError as exc:
        raise _error(f"--config {args.config}: {exc} "
                     f"({presets_help().split('; NVDLA')[0]})") from None


def main(args) -> int:
    """Run ``npulab map`` from parsed arguments."""
    from hw.energy import EnergyError, load_technology
    fmt = _choice("--format", args.format, FORMATS)
    options = _options(args)
    chip = _chip(args)
    try:
        load_technology(args.tech)
    except EnergyError as exc:
        raise _error(f"--tech {args.tech}: {exc}") from None
    op, source = _op(args)
    from npulab.map_run import map_op
    from npulab.progress import Progress
    # A phase bar on a terminal (nothing in pipes): a GEMM near the size limits (2**24 rows)
    # takes about a minute to cost and search.
    from npulab.pipeline import OptionError
    try:
        mapping = map_op(op, chip, options, progress=Progress())
    except OptionError as exc:
        raise _error(exc.words(lambda option, value: f"{_FLAGS[option]} {value}",
                               lambda key, value: f"--set {key}={value}")) from None
    doc = mapping.to_dict(source, wall_time=args.wall_time)
    if fmt == "json":
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(_table(mapping.search, doc, mapping.tiler, mapping.better_pct,
                                options.keep, options.objective, mapping.utilization))
    return 0


def _table(result, info: dict, tiler, better: float, top: int, objective: str,
           utilization) -> str:
    g = info["gemm"]
    src = "" if info["source"] in ("--gemm", "--conv") else f" of {info['source']}"
    low = f"; {info['lowering']} lowering" if info["op_kind"] == "Conv2d" else ""
    lines = [
        f"npulab map: {info['layer']}{src} ({info['op_summary']}{low}), "
        f"GEMM {g['count']} x M {g['m']:,} x N {g['n']:,} x K {g['k']:,} = {info['macs']:,} MACs",
        f"chip {info['chip_summary']}; objective {objective}, energy table {info['tech']}, "
        f"dataflows {','.join(info['dataflows'])}",
    ]
    rate = f"{result.mappings_per_s / 1e6:.2f} M" if result.mappings_per_s < math.inf else "inf"
    timing = f"in {result.seconds:.3f} s ({rate} mappings/s)"
    if result.exhaustive:
        lines.append(f"space {result.space_size:,} mappings; evaluated {result.evaluated:,} "
                     f"(exhaustive: the best is optimal under the cost model) {timing}")
    else:
        ph = result.phases
        gt = info["guarantee"]
        if gt["samples"] > 0:
            sentence = (f"the best is in the best {100 * gt['best_fraction']:.3g} % of the "
                        f"space with probability >= {100 * gt['confidence']:g} %")
        else:
            sentence = "no samples: no probabilistic guarantee"
        lines.append(
            f"space {result.space_size:,} mappings; evaluated {result.evaluated:,} "
            f"(pruned: {ph.get('grid', 0):,} on the tiler's grid, {ph.get('samples', 0):,} from "
            f"{gt['samples']:,} uniform samples, {ph.get('refine', 0):,} in local refinement) "
            f"{timing}; never worse than the tiler's grid, and {sentence}")
    head = (f"{'#':>3}  {'tile (g m n k)':<22} {'order':<5} {'df':<3} {'latency cyc':>12} "
            f"{'energy uJ':>11} {'EDP J*s':>10} {'DRAM B':>12} {'tiles':>7} {'util':>6}")
    lines += ["", head]

    def row(label, mp):
        tile = f"g{mp.group_tile} m{mp.m_tile} n{mp.n_tile} k{mp.k_tile}"
        util = utilization(mp)         # the JSON's (OpMapping.utilization)
        return (f"{label:>3}  {tile:<22} {mp.order:<5} {mp.dataflow.value:<3} "
                f"{mp.latency_cycles:>12,} {mp.energy_j * 1e6:>11,.3f} {mp.edp_js:>10.3e} "
                f"{mp.dram_bytes:>12,} {mp.tiles:>7,} {100 * util:>5.1f}%")

    for i, mp in enumerate(result.top(top), 1):
        lines.append(row(str(i), mp))
    lines.append("")
    what = {"latency": "latency", "energy": "energy", "edp": "EDP"}[objective]
    if better == 0.0:
        verdict = f"the best ties it in {what}"
    elif better > 0:
        verdict = f"the best is {better:.2f} % lower in {what}"
    else:   # only when the searched dataflows leave out the chip's own
        verdict = (f"the best is {-better:.2f} % higher in {what} (the tiler uses the chip's "
                   f"dataflow, which was not searched)")
    lines.append(f"default tiler (choose_tiling): g{tiler.group_tile} m{tiler.m_tile} "
                 f"n{tiler.n_tile} k{tiler.k_tile} {tiler.order} {tiler.dataflow.value}: latency "
                 f"{tiler.latency_cycles:,} cyc, energy {tiler.energy_j * 1e6:,.3f} uJ, EDP "
                 f"{tiler.edp_js:.3e} J*s; {verdict}")
    return "\n".join(lines) + "\n"
