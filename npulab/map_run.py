"""Map one op on one chip: ``map_op(op, device, MapOptions) -> OpMapping`` (``npulab map``).

The per-op view of :mod:`compiler.mapper`. :func:`map_op` resolves the device as
:func:`npulab.pipeline.run` does (:func:`~npulab.pipeline.resolve_device`), refuses a chip whose
mapping is not searched (:func:`mapped_chip`: an NVDLA build's is fixed by its convolution
pipeline), builds the op's GEMM problem as the systolic backend does, costs the default tiler's
choice with the mapper's cost model (:func:`cost_tiler_choice`) and searches the space of tile
sizes x loop orders x dataflows (:func:`compiler.mapper.map_op`). :class:`OpMapping` holds both;
its ``to_dict()`` is what ``npulab map --format json`` prints.

The op is mapped on its own: its input comes from DRAM and its output goes back to DRAM (no
on-chip residency from a neighbouring layer, which a whole-network run may use).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from compiler.ir import Conv2d, Op
from compiler.mapper import DEFAULT_EXHAUSTIVE_LIMIT, DEFAULT_SAMPLES, OBJECTIVES
from compiler.options import CONV_LOWERINGS, ORDERS
from hw.chip import ChipConfig
from hw.energy import DEFAULT_TECHNOLOGY, DRAM_KINDS
from hw.systolic.config import Dataflow
from npulab.pipeline import OptionError, resolve_device, sparse_pe_hint

__all__ = ["MapOptions", "OpMapping", "map_op", "mapped_chip", "cost_tiler_choice",
           "guarantee", "describe_op", "describe_chip", "CONFIDENCE"]

#: Confidence of the pruned search's stated guarantee (:func:`guarantee`).
CONFIDENCE = 0.99
DATAFLOW_NAMES = tuple(d.value for d in Dataflow)


@dataclass(frozen=True)
class MapOptions:
    """How to search one op's mapping space (:func:`map_op`).

    Attributes
    ----------
    objective:
        What to minimise: ``"latency"`` (estimated cycles), ``"energy"`` or ``"edp"``.
    dataflows:
        Dataflow names to search (``"os"``, ``"ws"``, ``"is"``); ``None``: the chip's own, all
        three on an array with ``array.reconfigurable = true``. Others are costed on the same
        array as a what-if.
    loop_order:
        Allow only this tile loop order, for the search and the tiler (``None``: all six).
    conv_lowering:
        Convolutions: ``"direct"`` (NHWC patches) or ``"im2col"`` (an expanded matrix in DRAM).
    samples, exhaustive_limit, seed:
        Spaces larger than ``exhaustive_limit`` get the pruned search with ``samples`` seeded
        uniform samples.
    keep:
        How many of the best mappings to keep (ranked, best first).
    tech:
        Energy table: a shipped name or a TOML path.
    dram_kind:
        DRAM device for energy (default: from the chip's DRAM preset).
    sparsity, act_zeros, weight_bits, weight_format:
        The op's compression, as :class:`compiler.options.CompileOptions`' fields: N:M sparse
        weights run compressed on the array's sparse PEs (``"2:4"``; the chip needs
        ``array.sparse_m``), the fraction of zero activations (gates MAC energy), the bits per
        stored weight (4: W4A8 on an int8 array) and a sparse storage format of the weights
        (``"bitmask:0.3"``). ``None``: the op's own.

    A bad value raises :class:`~npulab.pipeline.OptionError` naming the field.
    """

    objective: str = "latency"
    dataflows: tuple[str, ...] | None = None
    loop_order: str | None = None
    conv_lowering: str = "direct"
    samples: int = DEFAULT_SAMPLES
    exhaustive_limit: int = DEFAULT_EXHAUSTIVE_LIMIT
    seed: int = 0
    keep: int = 10
    tech: str = DEFAULT_TECHNOLOGY
    dram_kind: str | None = None
    sparsity: str | None = None
    act_zeros: float | str | None = None
    weight_bits: int | None = None
    weight_format: str | None = None

    #: The least value of each integer field (the command line parses its flags with them).
    MINIMUM: ClassVar[dict[str, int]] = {"samples": 0, "exhaustive_limit": 0, "seed": 0,
                                         "keep": 1}

    def __post_init__(self) -> None:
        for name, allowed, optional in (("objective", OBJECTIVES, False),
                                        ("conv_lowering", CONV_LOWERINGS, False),
                                        ("loop_order", ORDERS, True),
                                        ("dram_kind", DRAM_KINDS, True)):
            value = getattr(self, name)
            if value not in allowed and not (optional and value is None):
                raise OptionError(name, value, f"{{}}: must be one of {', '.join(allowed)}")
        if self.dataflows is not None and (
                not isinstance(self.dataflows, tuple) or not self.dataflows
                or any(d not in DATAFLOW_NAMES for d in self.dataflows)):
            raise OptionError("dataflows", self.dataflows, f"{{}}: must be None (the chip's "
                              f"own) or a non-empty tuple of {', '.join(DATAFLOW_NAMES)}")
        for name, lo in self.MINIMUM.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise OptionError(name, value, f"{{}}: must be an integer >= {lo}")
        if not isinstance(self.tech, str) or not self.tech:
            raise OptionError("tech", self.tech, "{}: must be an energy table name or TOML path")
        try:
            self.compile_options()
        except ValueError as exc:
            key = next(k for k in ("sparsity", "act_zeros", "weight_bits", "weight_format")
                       if getattr(self, k) is not None and str(exc).startswith(f"{k} = "))
            raise OptionError(key, getattr(self, key),
                              "{}: " + str(exc).split(": ", 1)[-1]) from None

    def compile_options(self):
        """The :class:`~compiler.options.CompileOptions` the op is tiled with."""
        from compiler.options import CompileOptions
        return CompileOptions(conv_lowering=self.conv_lowering, sparsity=self.sparsity,
                              act_zeros=self.act_zeros, weight_bits=self.weight_bits,
                              weight_format=self.weight_format)


def mapped_chip(device) -> ChipConfig:
    """The systolic chip config of ``device`` (:func:`~npulab.pipeline.resolve_device`); a
    ``ValueError`` for a chip whose mapping is not searched (an NVDLA build)."""
    spec = resolve_device(device)
    if spec.kind != "systolic":
        what = _NOT_SEARCHED.get(spec.kind, f"a {spec.kind} chip")
        raise ValueError(f"{spec.name} is {what}; npulab map searches systolic chips")
    return spec.config


#: Why a chip kind's mapping is not searched, for :func:`mapped_chip`'s error.
_NOT_SEARCHED = {"nvdla": "an NVDLA build, whose mapping is fixed by its convolution pipeline"}


def cost_tiler_choice(problem, chip: ChipConfig, objective: str, tech, *,
                      order: str | None = None, dram_kind: str | None = None):
    """``(TileChoice, Mapping)``: the default tiler's choice for ``problem``
    (:func:`compiler.backends.systolic_tiling.choose_tiling`, latency heuristic, the chip's dataflow, input from
    and output to DRAM) and the same tiling costed by the mapper's cost model
    (:mod:`compiler.mapper.cost`) for ``objective`` -- the mapping the search would report for
    it. ``tech``: a :class:`hw.energy.Technology`.

    Raises :class:`compiler.backends.systolic_tiling.TilingError` when nothing fits."""
    from compiler.mapper import cost_mapping
    from compiler.backends.systolic_tiling import choose_tiling
    choice = choose_tiling(problem, chip, order=order)
    return choice, cost_mapping(problem, chip, choice, objective, tech=tech,
                                dataflow=chip.array.dataflow, dram_kind=dram_kind)


def guarantee(samples_drawn: int, confidence: float = CONFIDENCE) -> float:
    """The fraction ``q`` of the space the pruned search's best is in with probability
    ``confidence``: ``n`` uniform samples all miss the best ``q`` fraction with probability at
    most ``(1 - q)^n``, so ``q = 1 - (1 - confidence)^(1/n)`` (n = 20,000: 0.023 %)."""
    if samples_drawn <= 0:
        return 1.0
    return -math.expm1(math.log1p(-confidence) / samples_drawn)


def describe_op(op: Op) -> str:
    """One line: ``Conv2d 56x56x64 -> 64, 3x3 s1 p1`` or ``Gemm 40x72 @ 72x24``."""
    if isinstance(op, Conv2d):
        groups = f" g{op.groups}" if op.groups > 1 else ""
        batch = f", batch {op.batch}" if op.batch > 1 else ""
        pad = f" p{op.pad_top}" if op.pad_top == op.pad_left else f" p{op.pad_top},{op.pad_left}"
        return (f"Conv2d {op.in_h}x{op.in_w}x{op.in_channels} -> {op.out_channels}, "
                f"{op.kernel_h}x{op.kernel_w} s{op.stride_h}{pad}{groups}{batch}")
    batch = f", {op.batch} GEMMs" if op.batch > 1 else ""
    return f"Gemm {op.m}x{op.k} @ {op.k}x{op.n}{batch}"


def describe_chip(chip: ChipConfig) -> str:
    """One line: name, array, scratchpads, DRAM and clock."""
    arr = chip.array
    kib = "/".join(f"{chip.sram(name).capacity_kib:g}" for name in ("ifmap", "filter", "ofmap"))
    dram = "ideal DRAM" if chip.dram.is_ideal else (chip.dram.preset or "custom DRAM")
    return (f"{chip.name}: {arr.rows}x{arr.cols} {arr.dataflow.value} {arr.precision.value}, "
            f"SRAM ifmap/filter/ofmap {kib} KiB, {dram}, {chip.clock_mhz:g} MHz")


@dataclass(frozen=True)
class OpMapping:
    """One op mapped on one chip: the search's result (``search``, a
    :class:`compiler.mapper.MapResult`) and the default tiler's choice (``tiler_choice``)
    costed by the same model (``tiler``, a :class:`compiler.mapper.Mapping`)."""

    op: Op
    chip: ChipConfig
    problem: object                     # compiler.backends.systolic_tiling.TileProblem
    options: MapOptions
    tech: object                        # hw.energy.Technology
    dataflows: tuple[Dataflow, ...]
    search: object                      # compiler.mapper.MapResult
    tiler_choice: object                # compiler.backends.systolic_tiling.TileChoice
    tiler: object                       # compiler.mapper.Mapping

    @property
    def macs(self) -> int:
        p = self.problem
        return p.count * p.m * p.n * p.k

    @property
    def pes(self) -> int:
        return self.chip.array.rows * self.chip.array.cols

    def utilization(self, mapping) -> float:
        """``MACs performed / (PEs x latency)`` of a mapping of this op (N:M sparse PEs
        perform the kept weights' MACs: their PE-busy cycles)."""
        done = mapping.counters["pe_busy_cycles"] if self.problem.nm is not None else self.macs
        return done / (self.pes * self.chip.array.macs_per_pe * mapping.latency_cycles)

    @property
    def better_pct(self) -> float:
        """How much lower the best's objective is than the tiler's, in % (negative when the
        searched dataflows leave out the chip's own and the tiler's is better)."""
        best, tiler = self.search.best.objective, self.tiler.objective
        return 0.0 if tiler == best else 100.0 * (tiler - best) / tiler

    @property
    def orders(self) -> list[str]:
        return [self.options.loop_order] if self.options.loop_order else list(ORDERS)

    def to_dict(self, source: str | None = None, *, wall_time: bool = False) -> dict:
        """Plain data (``npulab map --format json``): the search's result with each ranked
        mapping's utilization, the op and chip, the search (with the pruned search's
        guarantee), the tiler's costed choice and how much better the best is. ``source``:
        where the op came from (a zoo model's name, ``--gemm``). The search's wall-clock
        seconds and rate only with ``wall_time`` (they change from run to run)."""
        result, p = self.search, self.problem
        out = result.to_dict()
        for row, mp in zip(out["ranked"], result.ranked):
            row["utilization"] = self.utilization(mp)
        out.update(source=source, layer=self.op.name, op_kind=type(self.op).__name__,
                   op_summary=describe_op(self.op), lowering=p.lowering,
                   gemm={"count": p.count, "m": p.m, "n": p.n, "k": p.k},
                   macs=self.macs, pes=self.pes, chip=self.chip.name,
                   chip_summary=describe_chip(self.chip), tech=self.tech.name,
                   dataflows=[d.value for d in self.dataflows], orders=self.orders,
                   search="exhaustive" if result.exhaustive else "pruned")
        if not result.exhaustive:
            drawn = result.phases.get("samples_drawn", 0)
            out["guarantee"] = {"samples": drawn, "confidence": CONFIDENCE,
                                "best_fraction": guarantee(drawn)}
        out["tiler"] = dict(self.tiler.to_dict(), utilization=self.utilization(self.tiler),
                            tiler_estimated_cycles=self.tiler_choice.estimated_cycles,
                            better_pct=self.better_pct)
        out["better_than_tiler_pct"] = self.better_pct
        seconds = out.pop("seconds")
        if wall_time:
            rate = result.mappings_per_s
            out["wall_time"] = {"seconds": seconds,
                                "mappings_per_s": rate if math.isfinite(rate) else None}
        return out


def _dataflows(options: MapOptions, chip: ChipConfig) -> tuple[Dataflow, ...]:
    if options.dataflows is None:
        return tuple(Dataflow) if chip.array.reconfigurable else (chip.array.dataflow,)
    out: list[Dataflow] = []
    for name in options.dataflows:
        if Dataflow(name) not in out:
            out.append(Dataflow(name))
    return tuple(out)


def map_op(op: Op, device=None, options: MapOptions | None = None, *,
           progress=None) -> OpMapping:
    """Map ``op`` (a matrix op: ``Conv2d`` or ``Gemm``) on ``device`` (a systolic chip:
    :func:`mapped_chip`) with ``options``; ``progress(done, total, phase)`` is called before
    and after each of the two phases (costing the tiler's choice, the search).

    Raises ``ValueError`` for a chip or op that has no mapping space,
    :class:`compiler.backends.systolic_tiling.TilingError` when no tile fits the scratchpads and
    :class:`hw.energy.EnergyError` for an energy table that does not load."""
    from compiler.backends.systolic import tile_problem
    from compiler.mapper import map_op as search
    from hw.sparsity import array_nm
    from hw.energy import load_technology
    options = options if options is not None else MapOptions()
    chip = mapped_chip(device)
    if op.gemm_shape() is None:
        raise ValueError(f"{op.name}: a {type(op).__name__} op, which runs off the array; "
                         f"map a matrix op (Conv2d or Gemm)")
    tech = load_technology(options.tech)
    dataflows = _dataflows(options, chip)
    progress = progress or (lambda done, total, phase: None)
    compile_options = options.compile_options()
    nm = compile_options.weight_nm(op)
    rows = compile_options.weight_nm_rows(op)
    if rows is not None:
        lo = min(n for n, _ in rows)
        why = (f"row-wise N:M runs each N tile at its own N, not one mapping; map one N "
               f"(e.g. sparsity '{lo}:{nm[1]}') or run the model (npulab run)")
        if options.sparsity is not None:
            raise OptionError("sparsity", options.sparsity, f"{{}}: {why}")
        raise ValueError(f"{op.name}: weight_nm_rows = {op.weight_nm_rows!r}: {why}")
    if nm is not None and array_nm(nm, chip.array.sparse_m) is None and options.sparsity:
        raise OptionError("sparsity", options.sparsity,
                          f"{{}}: the array {sparse_pe_hint(nm, chip.array.sparse_m)}")
    problem = tile_problem(op, chip, compile_options)
    # the tiler's choice first: it also loads the cost kernel, so the search's time is its own
    progress(0, 2, "costing the default tiler's choice")
    choice, tiler = cost_tiler_choice(problem, chip, options.objective, tech,
                                      order=options.loop_order, dram_kind=options.dram_kind)
    progress(1, 2, "searching the mapping space")
    result = search(problem, chip, options.objective, tech=tech, dataflows=dataflows,
                    orders=options.loop_order, exhaustive_limit=options.exhaustive_limit,
                    samples=options.samples, seed=options.seed, keep=options.keep,
                    dram_kind=options.dram_kind)
    progress(2, 2, "done")
    return OpMapping(op=op, chip=chip, problem=problem, options=options, tech=tech,
                     dataflows=dataflows, search=result, tiler_choice=choice, tiler=tiler)
