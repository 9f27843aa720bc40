"""``summary.json``: its format (:data:`SCHEMA`), built, checked, read, and re-costed here only.

``{"schema": "npulab.summary/1", "run": RunRecord.to_dict(), "metrics": Metrics.to_dict()}``
-- every report file is regenerated from it (:mod:`npulab.output`, ``npulab report DIR``).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from hw.systolic.config import ConfigError

__all__ = ["SCHEMA", "summary_dict", "check_summary", "load_summary", "read_summary",
           "result_from_dict", "metrics_from_dict", "recost"]

SCHEMA = "npulab.summary/1"


def summary_dict(result, metrics) -> dict:
    return {"schema": SCHEMA, "run": result.to_dict(), "metrics": metrics.to_dict()}


def check_summary(summary, where: str = "summary") -> dict:
    """``summary`` if it is a summary dict this module can render, else a :class:`ConfigError`
    naming ``where`` and what is wrong."""
    if not isinstance(summary, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(summary).__name__}")
    if summary.get("schema") != SCHEMA:
        raise ConfigError(f"{where}: schema = {summary.get('schema')!r}: expected {SCHEMA!r} "
                          f"(a summary.json written by npulab run -o DIR)")
    for key, fields in (("run", ("model", "chip", "timing", "layers", "totals", "config")),
                        ("metrics", ("network", "layers", "chip", "technology"))):
        part = summary.get(key)
        if not isinstance(part, dict):
            raise ConfigError(f"{where}: no {key!r} table")
        missing = [f for f in fields if f not in part]
        if missing:
            raise ConfigError(f"{where}: {key!r} lacks {', '.join(missing)}")
    return summary


def load_summary(path: str | os.PathLike, *, need_metrics: bool = True) -> dict:
    """Read and check a ``summary.json``. A missing file is a :class:`FileNotFoundError` with
    its name; bad JSON or a wrong schema a :class:`ConfigError` naming the file.
    ``need_metrics=False`` accepts a summary without ``metrics`` (they are about to be
    recomputed)."""
    from hw.files import read_text
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    text = read_text(path, "summary file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column "
                          f"{exc.colno}") from None
    if not need_metrics and isinstance(data, dict) and "metrics" not in data:
        probe = dict(data, metrics={"network": 0, "layers": 0, "chip": 0, "technology": 0})
        check_summary(probe, str(path))
        return data
    return check_summary(data, str(path))


def read_summary(directory) -> dict:
    """``DIR/summary.json``, checked (:func:`load_summary`: a missing file is
    a FileNotFoundError naming it, bad JSON or a wrong schema a ConfigError naming the file)."""
    if not Path(directory).is_dir():
        raise FileNotFoundError(2, "no such directory", str(directory))
    return load_summary(Path(directory) / "summary.json")


def result_from_dict(run: dict, where: str = "run"):
    """The :class:`~npulab.record.RunRecord` of its ``to_dict()`` (e.g. ``summary["run"]``),
    :meth:`~npulab.record.RunRecord.from_dict`; ``npulab.simulate.RunResult.from_dict`` gives
    the notebook face instead."""
    from npulab.record import RunRecord
    return RunRecord.from_dict(run, where)


def metrics_from_dict(metrics: dict):
    """A :class:`~npulab.metrics.Metrics` from its ``to_dict()``."""
    from npulab.metrics import Metrics
    return Metrics(network=metrics["network"], layers=metrics["layers"], chip=metrics["chip"],
                   technology=metrics["technology"])


def recost(summary: dict, tech, where: str = "summary") -> dict:
    """``summary`` with its metrics recomputed from the saved run with energy table ``tech``
    (name, path or :class:`~hw.energy.Technology`). The DRAM and link energy types of the old
    metrics are kept (a DRAM type that was only assumed is derived again)."""
    from npulab.metrics import compute_metrics

    old = (summary.get("metrics") or {}).get("chip") or {}
    dram = old.get("dram") or {}
    dram_kind = None if dram.get("kind_assumed", True) else dram.get("kind")
    link_kind = (old.get("link") or {}).get("kind") or "pcie"
    from npulab.record import RunRecord
    run = RunRecord.from_dict(summary["run"], f"{where}: run")
    metrics = compute_metrics(run, tech, dram_kind=dram_kind, link_kind=link_kind)
    return {**summary, "metrics": metrics.to_dict()}
