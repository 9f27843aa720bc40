"""A sweep's results as a table: which points are feasible and on the Pareto front.

:func:`load_results` reads a sweep directory's store into :class:`SweepResults`;
:func:`csv_table` is the one definition of the ``points.csv`` columns, shared by the report
(:mod:`npulab.sweep.report`) and :meth:`SweepResults.to_pandas`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from npulab.sweep.errors import SweepError
from npulab.sweep.plots import _pareto_plot, _sensitivity_plot
from npulab.sweep.points import _fmt_value
from npulab.sweep.spec import _OPS, _canonical
from npulab.sweep.store import SCHEMA, STORE_NAME, SweepStore

__all__ = ["SweepResults", "load_results", "csv_table", "feasible", "pareto_front"]


def feasible(metrics: dict | None, constraints) -> bool:
    """True when every constraint ``(metric, op, number)`` holds (a missing value fails)."""
    if metrics is None:
        return False
    for metric, op, number in constraints:
        value = metrics.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if not _OPS[op](value, number):
            return False
    return True


def pareto_front(values: list, directions: list[str]) -> list[int]:
    """Indices (ascending) of the non-dominated rows of ``values`` (one tuple of objective
    values per row; ``directions`` "min"/"max" per objective). A row is dominated when another
    is at least as good in every objective and better in one; equal rows are all kept. Rows
    with a missing or NaN value are never on the front."""
    import numpy as np
    if not directions:
        raise ValueError("pareto_front: need at least one objective")
    sign = np.array([1.0 if d == "min" else -1.0 for d in directions])
    keep = [i for i, v in enumerate(values)
            if len(v) == len(directions) and all(x is not None and not
                                                 (isinstance(x, float) and math.isnan(x))
                                                 for x in v)]
    if not keep:
        return []
    a = np.array([values[i] for i in keep], dtype=float) * sign
    front = []
    for row, i in enumerate(keep):
        le = np.all(a <= a[row], axis=1)
        lt = np.any(a < a[row], axis=1)
        if not np.any(le & lt):
            front.append(i)
    return front


def _flat_params(info: dict, params: dict) -> dict:
    out = {"workload": params["workload"]}
    for axis in info["axes"]:
        value = params[axis["name"]]
        if len(axis["keys"]) > 1:
            out.update(zip(axis["keys"], value))
        else:
            out[axis["keys"][0]] = value
    return out


def _report_rows(store: SweepStore, info: dict) -> list[dict]:
    """Rows with ``feasible`` and ``pareto`` decided per workload."""
    rows = store.rows()
    objectives = [tuple(o) for o in info["objectives"]]
    constraints = [tuple(c) for c in info["constraints"]]
    for r in rows:
        r["feasible"] = r["status"] == "done" and feasible(r["metrics"], constraints)
        r["pareto"] = False
    for workload in info["workloads"]:
        group = [r for r in rows if r["feasible"] and r["params"]["workload"] == workload]
        vals = [tuple(r["metrics"].get(m) for m, _ in objectives) for r in group]
        for i in pareto_front(vals, [d for _, d in objectives]):
            group[i]["pareto"] = True
    return rows


def csv_table(rows: list[dict], info: dict) -> tuple[list[str], list[list]]:
    """The header and rows of ``points.csv`` as Python values (``None`` for an empty cell);
    :meth:`SweepResults.to_pandas` builds its DataFrame from the same rows."""
    param_cols = ["workload"] + [k for a in info["axes"] for k in a["keys"]]
    metric_cols = list(info["metrics"])
    # a metric named like a parameter column gets a suffix in the header
    names = [f"{c}_metric" if c in param_cols else c for c in metric_cols]
    header = (["index", "id"] + param_cols + ["status", "feasible", "pareto"] + names
              + ["elapsed_s", "worker", "error"])
    out = []
    for r in rows:
        flat = _flat_params(info, r["params"])
        m = r["metrics"] or {}
        out.append([r["index"], r["id"]] + [flat[c] for c in param_cols]
                   + [r["status"], r["feasible"], r["pareto"]]
                   + [m.get(c) for c in metric_cols]
                   + [r["elapsed_s"], r["worker"], r["error"]])
    return header, out


def load_results(out_dir: str | Path) -> "SweepResults":
    """The points stored in ``out_dir`` (a directory :func:`~npulab.sweep.run.run_sweep`
    wrote), with ``feasible`` and ``pareto`` decided as
    :func:`~npulab.sweep.report.write_report` does."""
    out = Path(out_dir)
    store_path = out / STORE_NAME
    if not store_path.is_file():
        raise SweepError(f"{out}: no {STORE_NAME} (run npulab sweep SPEC -o {out} first)")
    with SweepStore(store_path) as store:
        meta = store.meta()
        if meta.get("schema") != SCHEMA:
            raise SweepError(f"{store_path}: not an npulab sweep store")
        info = meta["spec"]
        rows = _report_rows(store, info)
    return SweepResults(out_dir=str(out), info=info, rows=rows)


@dataclass(frozen=True)
class SweepResults:
    """A sweep's points as a table (:func:`load_results`,
    :meth:`~npulab.sweep.run.SweepSummary.results`): ``info`` is the spec as the store keeps it
    (name, kind, axes, workloads, metrics, objectives, constraints), ``rows`` one dict per
    point in index order (``params``, ``status``, ``metrics``, ``feasible``, ``pareto``,
    ...)."""

    out_dir: str
    info: dict = field(repr=False)
    rows: list = field(repr=False)

    def counts(self) -> dict[str, int]:
        out = {"done": 0, "failed": 0, "pending": 0}
        for r in self.rows:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    @property
    def objectives(self) -> list[tuple[str, str]]:
        return [tuple(o) for o in self.info["objectives"]]

    def best(self, metric: str | None = None, workload: str | None = None) -> dict | None:
        """The feasible done point (a row dict) with the best ``metric`` (default: the first
        objective, in its direction; other metrics are minimised), None when there is none."""
        objectives = dict(self.objectives)
        metric = metric or self.objectives[0][0]
        if metric not in self.info["metrics"]:
            raise ValueError(f"metric = {metric!r}: not a metric of this sweep; metrics: "
                             f"{', '.join(self.info['metrics'])}")
        sign = -1.0 if objectives.get(metric) == "max" else 1.0
        rows = [r for r in self.rows if r["feasible"] and r["metrics"].get(metric) is not None
                and (workload is None or r["params"]["workload"] == workload)]
        return min(rows, key=lambda r: (sign * r["metrics"][metric], r["index"])) if rows else None

    def table(self, pareto_only: bool = False) -> tuple[list[str], list[list]]:
        return csv_table([r for r in self.rows if r["pareto"] or not pareto_only], self.info)

    def to_pandas(self, pareto_only: bool = False):
        """One row per design point, the columns of ``points.csv`` (``pareto_only``: the rows
        of ``pareto.csv``). Needs pandas."""
        from hw._notebook import frame
        return frame(*self.table(pareto_only))

    def _summary_lines(self) -> list[str]:
        c = self.counts()
        axes = ", ".join(f"{a['name']} ({len({_canonical(r['params'][a['name']]) for r in self.rows})}"
                         f" values)" for a in self.info["axes"])
        objs = ", ".join(f"{m} {d}" for m, d in self.objectives)
        lines = [f"{len(self.rows)} points: {c['done']} done, {c['failed']} failed, "
                 f"{c['pending']} pending; {sum(1 for r in self.rows if r['pareto'])} on the "
                 f"Pareto front",
                 f"workloads: {', '.join(self.info['workloads'])}",
                 f"axes: {axes or '-'}",
                 f"objectives: {objs or '-'}"]
        if self.objectives:
            best = self.best()
            if best is not None:
                m = self.objectives[0][0]
                lines.append(f"best {m}: {best['metrics'][m]:.4g} at point {best['index']} "
                             f"({_point_label(self.info, best['params'])})")
        return lines

    def __repr__(self) -> str:
        head = f"SweepResults: {self.info['name']} ({self.info['kind']}) in {self.out_dir}"
        return "\n".join([head] + ["  " + line for line in self._summary_lines()])

    def _repr_html_(self) -> str:
        from hw._notebook import html_table
        header, rows = self.table()
        drop = {"id", "elapsed_s", "worker", "error"}
        keep = [i for i, h in enumerate(header) if h not in drop]
        return html_table(f"SweepResults: {self.info['name']} ({self.info['kind']})",
                          [header[i] for i in keep], [[r[i] for i in keep] for r in rows],
                          lines=self._summary_lines())

    def _group(self, workload: str | None) -> tuple[list[dict], str]:
        workloads = self.info["workloads"]
        if workload is None:
            workload = workloads[0]
        elif workload not in workloads:
            raise ValueError(f"workload = {workload!r}: not in this sweep; workloads: "
                             f"{', '.join(workloads)}")
        return ([r for r in self.rows if r["params"]["workload"] == workload],
                f"{self.info['name']}: {workload}")

    def plot_pareto(self, x: str | None = None, y: str | None = None,
                    workload: str | None = None):
        """Scatter of two metrics (default: the first two objectives) with the Pareto front,
        for one workload (default: the first): a matplotlib Figure."""
        directions = dict(self.objectives)
        names = [m for m, _ in self.objectives]
        x = x or (names[0] if names else None)
        y = y or (names[1] if len(names) > 1 else None)
        for key, value in (("x", x), ("y", y)):
            if value not in self.info["metrics"]:
                raise ValueError(f"{key} = {value!r}: not a metric of this sweep; metrics: "
                                 f"{', '.join(self.info['metrics'])}")
        rows, title = self._group(workload)
        return _pareto_plot(rows, [(x, directions.get(x, "min")), (y, directions.get(y, "min"))],
                            title)

    def plot_sensitivity(self, metric: str | None = None, workload: str | None = None):
        """Per varied axis: the median and range of ``metric`` (default: the first objective)
        over the other points, per value of the axis."""
        metric = metric or self.objectives[0][0]
        rows, title = self._group(workload)
        varied = [a["name"] for a in self.info["axes"]
                  if len({_canonical(r["params"][a["name"]]) for r in rows}) > 1]
        return _sensitivity_plot(rows, varied, metric, title)


def _point_label(info: dict, params: dict) -> str:
    return ", ".join(f"{k}={_fmt_value(v)}" for k, v in _flat_params(info, params).items())
