"""Design points: the expansion of a spec and the plain-data job of each point.

:func:`expand` lists the points in a stable order (workloads outermost, then the axes in file
order, the last axis fastest); each point's ``id`` is the first 16 hex digits of the SHA-256 of
its canonical parameter JSON, so a resumed sweep matches stored points whatever their order.
:func:`point_job` turns a point into the picklable dict a worker runs
(:func:`npulab.sweep.evaluation.run_job`).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npulab.sweep.spec import (_CHIP_SETTINGS, _SYSTEM_BASE_KEYS, SweepSpec, _canonical,
                               _relative, _resolve_chip_config, _tech_names)

__all__ = ["DesignPoint", "expand", "point_job"]


@dataclass(frozen=True)
class DesignPoint:
    """One point: ``params`` = ``{"workload": label, axis name: value, ...}`` (zipped axis
    values are lists); ``id`` = hash of the canonical JSON of the workload's full parameters
    and the axis values."""

    index: int
    id: str
    params: dict

    def label(self) -> str:
        parts = [str(self.params["workload"])]
        for k, v in self.params.items():
            if k != "workload":
                parts.append(f"{k}={_fmt_value(v)}")
        return " ".join(parts)


def _fmt_value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "x".join(_fmt_value(x) for x in v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v)) if abs(v) < 1e15 else repr(v)
    return str(v)


def expand(spec: SweepSpec) -> list[DesignPoint]:
    """Every design point in the stable order (workloads outermost, last axis fastest)."""
    points = []
    workloads = dict(spec.workloads)
    combos = itertools.product([w[0] for w in spec.workloads], *[a.values for a in spec.axes])
    for index, combo in enumerate(combos):
        params = {"workload": combo[0]}
        for axis, value in zip(spec.axes, combo[1:]):
            params[axis.name] = list(value) if axis.zipped else value
        identity = {"workload": workloads[combo[0]],
                    "axes": {k: v for k, v in params.items() if k != "workload"}}
        pid = hashlib.sha256(_canonical(identity).encode()).hexdigest()[:16]
        points.append(DesignPoint(index=index, id=pid, params=params))
    return points


def _assignments(spec: SweepSpec, point: DesignPoint) -> dict[str, Any]:
    out = {}
    for axis in spec.axes:
        out.update(axis.assignments(point.params[axis.name]))
    return out


def point_job(spec: SweepSpec, point: DesignPoint) -> dict:
    """The plain-data job a worker runs for ``point`` (picklable, no spec object)."""
    assign = _assignments(spec, point)
    base_dir = None if spec.base_dir is None else Path(spec.base_dir)
    workload = dict(dict(spec.workloads)[point.params["workload"]])
    for key, value in assign.items():
        if key.startswith("workload."):
            workload[key[9:]] = value
    job = {"kind": spec.kind, "id": point.id, "where": spec.path, "workload": workload}
    if spec.kind == "chip":
        settings = {**spec.settings, **{k: v for k, v in assign.items() if k in _CHIP_SETTINGS}}
        run = dict(spec.run)
        run.update({k[4:]: v for k, v in assign.items() if k.startswith("run.")})
        # the spec's own [base] set texts, then the point's values as typed overrides
        overrides = list(spec.base["set"]) + [
            (k, v) for k, v in assign.items()
            if "." in k and not k.startswith(("run.", "workload."))]
        config = spec.base["config"]
        if "config" in assign:
            config = _resolve_chip_config(assign["config"], spec.path, "config", base_dir)
        if "tech" in assign and assign["tech"] not in _tech_names():
            settings["tech"] = _relative(assign["tech"], base_dir)
        job.update(config=config, overrides=overrides, run=run, **settings)
    else:
        base = dict(spec.base)
        base.update({k: v for k, v in assign.items() if k in _SYSTEM_BASE_KEYS})
        for key in ("system", "device"):
            if key in assign and isinstance(base[key], str) and base[key].endswith(".toml"):
                base[key] = _relative(base[key], base_dir)
        job.update(base)
    return job
