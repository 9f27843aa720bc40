"""One run pipeline: ``run(workload, device, options) -> RunResult``.

``npulab run``, sweeps, the multi-chip planner's simulated chips and the Python API run a
workload on a chip through :func:`run`; ``npulab map`` (:mod:`npulab.map_run`) and the SoC
(:mod:`npulab.soc_run`) resolve their devices with :func:`resolve_device`, as it does. The
device is a :class:`hw.spec.ChipSpec` (or a preset name, a TOML path, or an in-memory config,
loaded with :func:`hw.configfile.load_chip`); the chip's engine kind picks its option check
from :data:`CHECKS` and its runner from :data:`RUNNERS` (a new kind registers both with
:func:`register_runner`). A runner compiles the graph with its kind's compiler backend and
times it with its kind's model:

* ``systolic``: :func:`npulab.simulate.simulate` (:mod:`compiler.backends.systolic` tiles, :mod:`hw.executor`
  times; or the compute-only / SCALE-Sim timing modes);
* ``nvdla``: :func:`npulab.nvdla_run.simulate_nvdla` (NVDLA lowering and cycle model).

Options are one typed :class:`RunOptions`; a field a kind does not read is an
:class:`OptionError` naming the field (it would otherwise be silently ignored; the command line
words it with its flags), as is a misspelt field (``RunOptions(timng=...)`` is a ``TypeError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from compiler.ir import Graph
from compiler.options import CompileOptions
from hw.configfile import load_chip
from hw.spec import ENGINE_KINDS, ChipSpec, chip_spec
from hw.sparsity import array_mix, array_nm, parse_sparsity
from npulab.choices import ARRAY_PRECISIONS, TIMING_MODES
from npulab.option_error import OptionError, literal

__all__ = ["RunOptions", "run", "RUNNERS", "register_runner", "resolve_device", "OptionError",
           "check_options", "sparse_pe_hint"]

#: Precisions an NVDLA build can run (``RunOptions.precision``).
NVDLA_PRECISIONS = ("int8", "int16", "fp16")


@dataclass(frozen=True)
class RunOptions:
    """How to run a workload.

    Attributes
    ----------
    timing:
        Systolic chips: ``"native"`` (full chip), ``"compute"`` or ``"scalesim"``
        (:data:`npulab.choices.TIMING_MODES`). An NVDLA build has one cycle model: leave it
        ``"native"``.
    compile:
        The compiler's choices (:class:`compiler.options.CompileOptions`): tiling, loop order,
        mapper. Systolic chips, native timing only.
    precision:
        NVDLA builds: ``"int8"`` (default), ``"int16"`` or ``"fp16"``. Systolic chips take the
        array's ``precision`` from the chip config.
    skip_unsupported:
        NVDLA builds: leave out ops the build has no unit for (listed in the totals) instead of
        failing.
    """

    timing: str = "native"
    compile: CompileOptions = field(default_factory=CompileOptions)
    precision: str | None = None
    skip_unsupported: bool = False

    def __post_init__(self) -> None:
        if self.timing not in TIMING_MODES:
            raise OptionError("timing", self.timing,
                              f"{{}}: must be one of {', '.join(TIMING_MODES)}")
        if not isinstance(self.compile, CompileOptions):
            raise OptionError("compile", self.compile, "{}: must be a CompileOptions")
        if self.precision is not None and self.precision not in ARRAY_PRECISIONS:
            raise OptionError("precision", self.precision,
                              f"{{}}: must be one of {', '.join(ARRAY_PRECISIONS)}")


def _compile_choices(compile_options: CompileOptions):
    """``(field, value)`` of every tiling choice that differs from the default, in field
    order (the energy table ``tech`` is only the mapper's and is no choice of its own)."""
    default = CompileOptions()
    for f in fields(CompileOptions):
        value = getattr(compile_options, f.name)
        if f.name != "tech" and value != getattr(default, f.name):
            yield f"compile.{f.name}", value


def _systolic_precision(spec: ChipSpec, precision: str | None) -> ChipSpec:
    """A systolic chip with ``precision`` as its array's (``--precision`` is
    ``--set array.precision=...``; the accumulators take that precision's default width
    unless it is the chip's own precision)."""
    if precision is None or spec.kind != "systolic":
        return spec
    cfg = spec.config
    arr = cfg.array
    if precision == arr.precision.value:
        return spec
    return chip_spec(replace(cfg, array=replace(arr, precision=precision, acc_bits=None)),
                     spec.source)


def _check_systolic(spec: ChipSpec, options: RunOptions) -> None:
    if options.skip_unsupported:
        raise OptionError("skip_unsupported", True, "{} applies to NVDLA builds")
    choice = next(_compile_choices(options.compile), None)
    if options.timing != "native" and choice is not None:
        raise OptionError(*choice, "{} applies to {native} (it tiles layers for the full chip); "
                          "{timing} does not tile",
                          {"native": ("timing", "native"), "timing": ("timing", options.timing)})
    sparsity = options.compile.sparsity
    sparse_m = spec.config.array.sparse_m
    nm, mix = parse_sparsity(sparsity) if sparsity is not None else (None, None)
    if nm is not None and not skips(nm, mix, sparse_m):
        raise OptionError("compile.sparsity", sparsity, f"{{}}: {literal(spec.name)}'s array "
                          f"{sparse_pe_hint(nm, sparse_m, mix)}")
    bits = options.compile.weight_bits
    arr = spec.config.array
    if bits is not None and bits >= arr.precision.bits:
        raise OptionError("compile.weight_bits", bits, f"{{}}: {literal(spec.name)}'s array "
                          f"takes {arr.precision.bits}-bit {arr.precision.value} operands; "
                          f"weight-only storage must be narrower (4, or 8 on a 16-bit array)")
    cores = spec.config.cores
    if options.compile.placement == "pipeline" and cores < 2:
        raise OptionError("compile.placement", "pipeline", f"{{}} needs a chip with 2 or more "
                          f"cores ({literal(spec.name)} has {cores})")


def skips(nm: tuple[int, int], mix, sparse_m: int) -> bool:
    """PEs with groups of ``sparse_m`` skip some of ``nm``'s weights (row-wise: of some channel
    of ``mix``, :func:`hw.sparsity.array_mix`)."""
    if mix is None:
        return array_nm(nm, sparse_m) is not None
    return bool(sparse_m) and any(n < sparse_m for n, _ in array_mix(mix, nm[1], sparse_m))


def sparse_pe_hint(nm: tuple[int, int], sparse_m: int, mix=None) -> str:
    """Why an array cannot skip any of ``nm`` (row-wise: of any channel of ``mix``), and what
    would."""
    from hw.systolic.config import MAX_SPARSE_M
    n, m = nm
    lo = n if mix is None else min(v for v, _ in mix)
    what = f"{n}:{m}" if mix is None else f"{lo}-{n}:{m}"
    why = ("has dense PEs" if not sparse_m else
           f"has {sparse_m}-element sparse groups, which cannot skip any of {what}")
    if lo == m:
        return f"{why}; {n}:{m} keeps every weight: it is dense (--sparsity dense)"
    if m <= MAX_SPARSE_M:
        return f"{why}; set array.sparse_m = {m} for N:M sparse PEs"
    for g in range(MAX_SPARSE_M, 1, -1):      # the largest group that still skips some
        runs = array_nm((lo, m), g)
        if runs is not None:
            return (f"{why}; sparse PEs group at most {MAX_SPARSE_M} weights: array.sparse_m "
                    f"= {g} runs it as {runs[0]}:{runs[1]}")
    return f"{why}; no sparse PE group of 2..{MAX_SPARSE_M} weights skips any of {n}:{m}"


def _check_nvdla(spec: ChipSpec, options: RunOptions) -> None:
    if options.precision is not None and options.precision not in NVDLA_PRECISIONS:
        raise OptionError("precision", options.precision,
                          f"{{}}: an NVDLA build runs {', '.join(NVDLA_PRECISIONS)}")
    choice = (("timing", options.timing) if options.timing != "native"
              else next(_compile_choices(options.compile), None))
    if choice is not None:
        raise OptionError(*choice, f"{{}} applies to systolic chips; {literal(spec.name)} is "
                          f"an NVDLA build (its cycle model is fixed)")


#: The option check of each engine kind: ``check(spec, options)`` raises :class:`OptionError`
#: for a field the kind does not read. :func:`run` calls it before the runner;
#: :func:`check_options` too.
CHECKS: dict[str, Callable[[ChipSpec, RunOptions], None]] = {
    "systolic": _check_systolic, "nvdla": _check_nvdla}


def check_options(device, options: RunOptions) -> None:
    """Raise :class:`OptionError` when ``options`` set a field ``device``
    (:func:`resolve_device`) does not read, as :func:`run` would, before any work."""
    _check(resolve_device(device), options)


def _check(spec: ChipSpec, options: RunOptions) -> None:
    check = CHECKS.get(spec.kind)
    if check is not None:
        check(spec, options)


def _systolic(graph: Graph, spec: ChipSpec, options: RunOptions, progress):
    from npulab.simulate import simulate
    _check_act_zeros(graph, options.compile.act_zeros)
    return simulate(graph, spec, options.timing, progress=progress,
                    options=options.compile)


def _nvdla(graph: Graph, spec: ChipSpec, options: RunOptions, progress):
    from npulab.nvdla_run import simulate_nvdla
    return simulate_nvdla(graph, spec, options.precision or "int8",
                          skip_unsupported=options.skip_unsupported, progress=progress)


def _check_act_zeros(graph: Graph, spec) -> None:
    """Every ``PATTERN=RATIO`` of ``act_zeros`` names at least one matrix layer of ``graph``
    (a pattern that matches none would be lost without a word)."""
    if spec is None:
        return
    import fnmatch
    from compiler.options import parse_act_zeros
    names = [op.name for op in graph.ops if op.gemm_shape() is not None]
    if not names:
        raise OptionError("compile.act_zeros", spec, f"{{}}: {literal(graph.name)} has no "
                          f"matrix layer (Conv2d, Gemm) whose MACs zeros could gate")
    for pattern, _ in parse_act_zeros(spec):
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            some = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise OptionError("compile.act_zeros", spec, f"{{}}: {literal(pattern)} matches no "
                              f"matrix layer of {literal(graph.name)} ({literal(some)})")


#: The runner of each engine kind: ``runner(graph, spec, options, progress) -> RunResult``.
#: A new engine kind registers its runner here (docs/architecture.md).
RUNNERS: dict[str, Callable] = {"systolic": _systolic, "nvdla": _nvdla}


def register_runner(kind: str, runner: Callable, check: Callable | None = None) -> None:
    """Run chips of engine kind ``kind`` with ``runner(graph, spec, options, progress) ->
    RunRecord`` (a new engine kind's one entry point into the pipeline; docs/architecture.md,
    "Adding an engine"), after ``check(spec, options)`` (raises :class:`OptionError` for an
    option the kind does not read; ``None``: it reads every option). A kind npulab ships cannot
    be replaced."""
    if kind in ENGINE_KINDS:
        raise ValueError(f"kind = {kind!r}: a shipped engine kind; its runner is fixed")
    if not callable(runner):
        raise ValueError(f"runner = {runner!r}: must be callable")
    if check is not None and not callable(check):
        raise ValueError(f"check = {check!r}: must be callable")
    RUNNERS[kind] = runner
    if check is not None:
        CHECKS[kind] = check
    else:
        CHECKS.pop(kind, None)


def resolve_device(device) -> ChipSpec:
    """The :class:`~hw.spec.ChipSpec` of ``device``: a ChipSpec, an in-memory chip config, a
    preset name or a TOML path (``None``: the default chip)."""
    if device is None or isinstance(device, (str, Path)):
        return load_chip(device)
    return chip_spec(device)


def run(workload: Graph, device=None, options: RunOptions | None = None, *,
        progress=None):
    """Run ``workload`` on ``device`` (:func:`resolve_device`) with ``options``; returns the
    :class:`~npulab.simulate.RunResult`. ``progress(done, total, name)`` is called as layers
    finish."""
    options = options if options is not None else RunOptions()
    spec = _systolic_precision(resolve_device(device), options.precision)
    runner = RUNNERS.get(spec.kind)
    if runner is None:
        raise ValueError(f"{spec.name}: engine kind {spec.kind!r} has no runner; registered: "
                         f"{', '.join(RUNNERS)}")
    _check(spec, options)
    result = runner(workload, spec, options, progress)
    from npulab.simulate import RunResult
    if not isinstance(result, RunResult):       # a registered kind's plain RunRecord
        result = RunResult(**{f.name: getattr(result, f.name) for f in fields(result)})
    return result
