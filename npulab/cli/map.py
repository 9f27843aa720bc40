"""``npulab map``: search the mapping space of ONE op on one chip and print the best mappings.

The per-op view of :mod:`compiler.mapper` (what ZigZag's or Timeloop's mapper shows for one
layer): the op is a zoo model's layer (``--model NAME --layer LAYER``), one GEMM (``--gemm
M,N,K``) or one convolution (``--conv 56x56x64-64k3s1p1``, grammar in :func:`compiler.frontends.opspec.parse_conv`); the
chip is ``npulab run``'s (``--config``, ``--set``). :func:`compiler.mapper.map_op` searches tile
sizes x loop orders x dataflows for ``--objective``; the output is a header (op, GEMM shape,
chip, space size, mappings costed, exhaustive or pruned with the pruned search's guarantee,
search time and rate), the top-K table with utilization ``MACs / (PEs x latency)``, and a last
line comparing the best with the default tiler's choice (:func:`compiler.tiling.choose_tiling`)
costed by the same cost model.

The op is mapped on its own: its input comes from DRAM and its output goes back to DRAM (no
on-chip residency from a neighbouring layer, which ``npulab run`` may use).

Only light modules are imported by :func:`add_parser`; the mapper, and its Numba kernel, load
when the command runs. The op specs are :mod:`compiler.frontends.opspec`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from compiler.options import CONV_LOWERINGS

__all__ = ["add_parser", "main", "cost_tiler_choice", "OBJECTIVES", "DEFAULT_SAMPLES",
           "DEFAULT_EXHAUSTIVE_LIMIT"]

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
#: Confidence of the pruned search's stated guarantee.
CONFIDENCE = 0.99



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


def _dataflows(spec: str, chip):
    from hw.systolic.config import Dataflow
    text = spec.strip().lower()
    if text == "chip":
        return tuple(Dataflow) if chip.array.reconfigurable else (chip.array.dataflow,)
    if text == "all":
        return tuple(Dataflow(d) for d in DATAFLOW_NAMES)
    names = [x.strip() for x in text.split(",")]
    bad = [x for x in names if x not in DATAFLOW_NAMES]
    if bad or not names:
        raise _error(f"--dataflows {spec}: must be chip, all, or a comma list of "
                     f"{', '.join(DATAFLOW_NAMES)}")
    out = []
    for x in names:
        if Dataflow(x) not in out:
            out.append(Dataflow(x))
    return tuple(out)


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


def _describe_op(op) -> str:
    from compiler.ir import Conv2d
    if isinstance(op, Conv2d):
        groups = f" g{op.groups}" if op.groups > 1 else ""
        batch = f", batch {op.batch}" if op.batch > 1 else ""
        pad = f" p{op.pad_top}" if op.pad_top == op.pad_left else f" p{op.pad_top},{op.pad_left}"
        return (f"Conv2d {op.in_h}x{op.in_w}x{op.in_channels} -> {op.out_channels}, "
                f"{op.kernel_h}x{op.kernel_w} s{op.stride_h}{pad}{groups}{batch}")
    batch = f", {op.batch} GEMMs" if op.batch > 1 else ""
    return f"Gemm {op.m}x{op.k} @ {op.k}x{op.n}{batch}"


def _describe_chip(chip) -> str:
    arr = chip.array
    kib = "/".join(f"{chip.sram(name).capacity_kib:g}" for name in ("ifmap", "filter", "ofmap"))
    dram = "ideal DRAM" if chip.dram.is_ideal else (chip.dram.preset or "custom DRAM")
    return (f"{chip.name}: {arr.rows}x{arr.cols} {arr.dataflow.value} {arr.precision.value}, "
            f"SRAM ifmap/filter/ofmap {kib} KiB, {dram}, {chip.clock_mhz:g} MHz")


# ---------------------------------------------------------------- the default tiler, costed


def cost_tiler_choice(problem, chip, objective: str, tech, *, order: str | None = None,
                      dram_kind: str | None = None):
    """``(TileChoice, Mapping)``: the default tiler's choice for ``problem``
    (:func:`compiler.tiling.choose_tiling`, latency heuristic, the chip's dataflow, input from
    and output to DRAM) and the same tiling costed by the mapper's cost model
    (:mod:`compiler.mapper.cost`) for ``objective`` -- the mapping ``map_op`` would report for
    it. ``tech``: a :class:`hw.energy.Technology`.

    Raises :class:`compiler.tiling.TilingError` when nothing fits."""
    from compiler.mapper import cost_mapping
    from compiler.backends.systolic_tiling import choose_tiling
    choice = choose_tiling(problem, chip, order=order)
    return choice, cost_mapping(problem, chip, choice, objective, tech=tech,
                                dataflow=chip.array.dataflow, dram_kind=dram_kind)


# ---------------------------------------------------------------- the command


def guarantee(samples_drawn: int, confidence: float = CONFIDENCE) -> float:
    """The fraction ``q`` of the space the pruned search's best is in with probability
    ``confidence``: ``n`` uniform samples all miss the best ``q`` fraction with probability at
    most ``(1 - q)^n``, so ``q = 1 - (1 - confidence)^(1/n)`` (n = 20,000: 0.023 %)."""
    if samples_drawn <= 0:
        return 1.0
    return -math.expm1(math.log1p(-confidence) / samples_drawn)


def _pct_better(best: float, tiler: float) -> float:
    return 0.0 if tiler == best else 100.0 * (tiler - best) / tiler


def main(args) -> int:
    """Run ``npulab map`` from parsed arguments."""
    from hw.configfile import load_chip, load_chip_config
    from npulab.cli.common import presets_help, resolve_config
    objective = _choice("--objective", args.objective, OBJECTIVES)
    fmt = _choice("--format", args.format, FORMATS)
    lowering = _choice("--conv-lowering", args.conv_lowering, CONV_LOWERINGS)
    top = _int("--top", args.top, 1)
    samples = _int("--samples", args.samples, 0)
    limit = _int("--exhaustive-limit", args.exhaustive_limit, 0)
    seed = _int("--seed", args.seed, 0)
    from compiler.options import ORDERS
    if args.loop_order is not None:
        _choice("--loop-order", args.loop_order, ORDERS)
    from hw.energy import DRAM_KINDS, EnergyError, load_technology
    if args.dram_type is not None:
        _choice("--dram-type", args.dram_type, DRAM_KINDS)
    path = resolve_config(args.config)
    kind = load_chip(path)                 # NVDLA builds are refused before reading --set
    if kind.kind != "systolic":
        raise _error(f"--config {args.config}: {kind.name} is an NVDLA build, whose mapping is "
                     f"fixed by its convolution pipeline; npulab map searches systolic chips "
                     f"({presets_help().split('; NVDLA')[0]})")
    chip = load_chip_config(path, args.set)
    dataflows = _dataflows(args.dataflows, chip)
    try:
        tech = load_technology(args.tech)
    except EnergyError as exc:
        raise _error(f"--tech {args.tech}: {exc}") from None
    op, source = _op(args)

    from compiler.backends.systolic import _problem
    from compiler.options import CompileOptions
    from compiler.mapper import map_op
    problem = _problem(op, chip, CompileOptions(conv_lowering=lowering))
    # the tiler's choice first: it also loads the cost kernel, so the search time below is
    # the search's alone
    # A phase bar on a terminal (nothing in pipes): a GEMM near the size limits (2**24 rows)
    # takes about a minute to cost and search.
    from npulab.progress import Progress
    progress = Progress()
    progress(0, 2, "costing the default tiler's choice")
    choice, tiler = cost_tiler_choice(problem, chip, objective, tech, order=args.loop_order,
                                      dram_kind=args.dram_type)
    progress(1, 2, "searching the mapping space")
    result = map_op(problem, chip, objective, tech=tech, dataflows=dataflows,
                    orders=args.loop_order, exhaustive_limit=limit, samples=samples, seed=seed,
                    keep=top, dram_kind=args.dram_type)
    progress(2, 2, "done")
    macs = problem.count * problem.m * problem.n * problem.k
    pes = chip.array.rows * chip.array.cols
    better = _pct_better(result.best.objective, tiler.objective)
    info = dict(source=source, layer=op.name, op_kind=type(op).__name__,
                op_summary=_describe_op(op), lowering=problem.lowering,
                gemm={"count": problem.count, "m": problem.m, "n": problem.n, "k": problem.k},
                macs=macs, pes=pes, chip=chip.name, chip_summary=_describe_chip(chip),
                tech=tech.name, dataflows=[d.value for d in dataflows],
                orders=[args.loop_order] if args.loop_order else list(ORDERS),
                search="exhaustive" if result.exhaustive else "pruned")
    if not result.exhaustive:
        info["guarantee"] = {"samples": result.phases.get("samples_drawn", 0),
                             "confidence": CONFIDENCE,
                             "best_fraction": guarantee(result.phases.get("samples_drawn", 0))}
    if fmt == "json":
        out = result.to_dict()
        for row, mp in zip(out["ranked"], result.ranked):
            row["utilization"] = macs / (pes * mp.latency_cycles)
        out.update(info)
        out["tiler"] = dict(tiler.to_dict(), utilization=macs / (pes * tiler.latency_cycles),
                            tiler_estimated_cycles=choice.estimated_cycles,
                            better_pct=better)
        out["better_than_tiler_pct"] = better
        # Wall-clock figures change from run to run: only on request, so JSON can be diffed.
        seconds = out.pop("seconds")
        if args.wall_time:
            rate = result.mappings_per_s
            out["wall_time"] = {"seconds": seconds,
                                "mappings_per_s": rate if math.isfinite(rate) else None}
        sys.stdout.write(json.dumps(out, indent=2, allow_nan=False) + "\n")
        return 0
    sys.stdout.write(_table(result, info, tiler, better, top, objective))
    return 0


def _table(result, info: dict, tiler, better: float, top: int, objective: str) -> str:
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
                        f"space with probability >= {100 * CONFIDENCE:g} %")
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
        util = info["macs"] / (info["pes"] * mp.latency_cycles)
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
