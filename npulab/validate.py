"""Validate a chip against measurements: a CSV of ops and their measured latencies in, an error
table out (``npulab validate``; ``benchmarks/validate_a100.py`` runs it on measured A100 rows).

The CSV (UTF-8, a header row, one measurement per row)::

    family,op,latency_us
    matmul,"gemm:64,12288,12288",190.0
    softmax,"softmax:4096,32",13.1

* ``family``: a label grouping the rows (matmul, softmax, ...); the table has one line each.
* ``op``: the op as ``npulab run --op`` takes it (``KIND:DIMS``, :data:`compiler.frontends.
  opspec.OP_SYNTAX`): one op is one kernel, as a measurement times one launch.
* ``latency_us``: the measured latency in microseconds, launch overhead included (> 0).

Other columns are kept as they are (e.g. ``source``). Each row runs exactly what
``npulab run --config CHIP --op OP [--precision P]`` runs (:func:`npulab.pipeline.run`, native
timing) and is compared on ``latency_s``: the device's cycles over its clock plus the chip's
per-kernel launch overhead (``chip.launch_overhead_us``, ``[chip.launch_overhead_by_op]``).
Error = predicted / measured - 1; a family's error is the mean of its rows' absolute errors
(the measure LLMCompass reports).

Bad input is one line naming the file, the line, the column and the value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hw.errors import ConfigError
from hw.files import csv_table, read_text

__all__ = ["Measurement", "Prediction", "read_measurements", "validate", "family_errors",
           "format_table", "fit_launch_overhead", "with_launch_overhead", "COLUMNS"]

#: The columns a measurements CSV must have.
COLUMNS = ("family", "op", "latency_us")


@dataclass(frozen=True)
class Measurement:
    """One measured row: its family, the op (``KIND:DIMS``), the latency in µs, its line in the
    file and any other columns."""

    family: str
    op: str
    latency_us: float
    line: int
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Prediction:
    """A measurement and npulab's latency for it (µs, launch overhead included), with the
    device cycles and the overhead apart."""

    measured: Measurement
    latency_us: float
    cycles: int
    launch_us: float

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.latency_us / self.measured.latency_us - 1.0


def read_measurements(path: str | Path) -> list[Measurement]:
    """The rows of a measurements CSV (module docstring); a missing file, a missing column, an
    unknown op or a latency that is not a positive number is a ConfigError naming the file,
    line, column and value."""
    from compiler.frontends.opspec import OpSpecError, parse_op
    header, rows = csv_table(read_text(path, "measurements CSV", error=ConfigError))
    if header is None:
        raise ConfigError(f"{path}: empty; expected a header row with {', '.join(COLUMNS)}")
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ConfigError(f"{path}: line 1: no column {', '.join(missing)}; the header must "
                          f"name {', '.join(COLUMNS)} (found {', '.join(header) or 'nothing'})")
    out = []
    for number, row in rows:
        if len(row) != len(header):
            raise ConfigError(f"{path}: line {number}: {len(row)} fields, the header has "
                              f"{len(header)}")
        values = {h: cell.strip() for h, cell in zip(header, row)}
        try:
            parse_op(values["op"])
        except OpSpecError as exc:
            raise ConfigError(f"{path}: line {number}: op = {values['op']!r}: {exc}") from None
        try:
            latency = float(values["latency_us"])
        except ValueError:
            latency = math.nan
        if not (math.isfinite(latency) and 0 < latency <= 1e12):
            raise ConfigError(f"{path}: line {number}: latency_us = {values['latency_us']!r}: "
                              f"must be a number of microseconds in (0, 1e12]")
        if not values["family"]:
            raise ConfigError(f"{path}: line {number}: family = '': must name the row's group")
        out.append(Measurement(values["family"], values["op"], latency, number,
                               {k: v for k, v in values.items() if k not in COLUMNS}))
    if not out:
        raise ConfigError(f"{path}: no measurement rows below the header")
    return out


def validate(rows: list[Measurement], device, precision: str | None = None,
             progress=None) -> list[Prediction]:
    """Run every row's op on ``device`` (a preset name, a config file or a ChipSpec, as
    :func:`npulab.pipeline.resolve_device` takes it) with ``precision`` (as ``--precision``);
    ``progress(done, total, op)`` after each row."""
    from compiler.frontends.opspec import parse_op
    from compiler.ir import Graph
    from npulab.pipeline import RunOptions, resolve_device, run
    spec = resolve_device(device)
    options = RunOptions(precision=precision)
    out = []
    for i, m in enumerate(rows):
        op = parse_op(m.op)
        result = run(Graph(name=op.name, ops=(op,)), spec, options)
        t = result.totals
        out.append(Prediction(m, t["latency_s"] * 1e6, int(t["cycles"]),
                              t.get("launch_overhead_s", 0.0) * 1e6))
        if progress is not None:
            progress(i + 1, len(rows), m.op)
    return out


def family_errors(predictions: list[Prediction]) -> dict[str, dict]:
    """Per family, in first-seen order: rows, mean absolute error, mean (signed) error and the
    largest absolute error (fractions)."""
    fams: dict[str, list[float]] = {}
    for p in predictions:
        fams.setdefault(p.measured.family, []).append(p.error)
    return {f: {"rows": len(e), "mean_abs_error": sum(abs(x) for x in e) / len(e),
                "mean_error": sum(e) / len(e), "max_abs_error": max(abs(x) for x in e)}
            for f, e in fams.items()}


def fit_launch_overhead(predictions: list[Prediction]) -> dict[str, float]:
    """Per family, the per-kernel launch overhead (µs) that minimises the family's mean
    absolute error with the device times as simulated: the one constant a validation may fit
    (``chip.launch_overhead_by_op``). The error is convex and piecewise linear in the
    overhead, so the best value is one of the breakpoints ``measured - device time``."""
    fams: dict[str, list[Prediction]] = {}
    for p in predictions:
        fams.setdefault(p.measured.family, []).append(p)
    out = {}
    for fam, rows in fams.items():
        device = [(p.latency_us - p.launch_us, p.measured.latency_us) for p in rows]

        def cost(o):
            return sum(abs((d + o) / m - 1) for d, m in device)
        candidates = sorted({max(0.0, m - d) for d, m in device})
        out[fam] = min(candidates, key=lambda o: (cost(o), o))
    return out


def with_launch_overhead(predictions: list[Prediction], overhead: dict[str, float]) -> list[Prediction]:
    """The predictions with each family's launch overhead replaced by ``overhead[family]``
    (µs; families not in it keep theirs)."""
    out = []
    for p in predictions:
        o = overhead.get(p.measured.family, p.launch_us)
        out.append(Prediction(p.measured, p.latency_us - p.launch_us + o, p.cycles, o))
    return out


def format_table(predictions: list[Prediction], peer: dict[str, float] | None = None,
                 peer_name: str = "peer") -> str:
    """The rows (op, measured, predicted, overhead, error) and the per-family summary, with a
    peer's mean absolute error per family next to npulab's when given (fractions)."""
    lines = [f"{'family':10s} {'op':28s} {'measured us':>12s} {'npulab us':>11s} "
             f"{'launch us':>9s} {'error':>8s}"]
    for p in predictions:
        m = p.measured
        lines.append(f"{m.family:10s} {m.op:28s} {m.latency_us:12.2f} {p.latency_us:11.2f} "
                     f"{p.launch_us:9.1f} {100 * p.error:+7.1f}%")
    lines.append("")
    head = f"{'family':10s} {'rows':>4s} {'mean |error|':>12s} {'mean error':>10s} {'max |error|':>11s}"
    if peer:
        head += f" {peer_name + ' mean |error|':>22s}"
    lines.append(head)
    for fam, e in family_errors(predictions).items():
        line = (f"{fam:10s} {e['rows']:4d} {100 * e['mean_abs_error']:11.1f}% "
                f"{100 * e['mean_error']:+9.1f}% {100 * e['max_abs_error']:10.1f}%")
        if peer:
            value = peer.get(fam)
            line += f" {'' if value is None else f'{100 * value:.1f}%':>22s}"
        lines.append(line)
    return "\n".join(lines) + "\n"
