"""The files ``npulab run -o DIR`` writes, and the summary they share.

* ``summary.json``: ``{"schema": "npulab.summary/1", "run": RunResult.to_dict(), "metrics":
  Metrics.to_dict()}`` -- everything else is regenerated from it (``npulab report DIR``);
* ``layers.csv``: one row per layer, the run's columns plus the per-layer metrics;
* ``report.txt``: the table ``npulab run`` prints;
* ``report.html``: the self-contained report (tables, plots, the energy table with citations);
* ``trace.json``: the timeline in the Chrome/Perfetto trace-event format.

:func:`write_summary_outputs` writes every file that derives from the summary (all but the
timeline, which needs the executor's trace and carries no energy), so ``npulab report DIR
--tech T`` leaves the directory exactly as ``npulab run --tech T -o DIR`` would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from npulab.report import render

__all__ = ["SCHEMA", "summary_dict", "write_run_outputs", "write_summary_outputs",
           "read_summary", "result_from_dict", "metrics_from_dict", "OUTPUT_FILES",
           "SUMMARY_FILES"]

SCHEMA = "npulab.summary/1"
OUTPUT_FILES = ("summary.json", "layers.csv", "report.txt", "report.html", "trace.json")
#: The files regenerated from ``summary.json`` alone (``npulab report DIR``).
SUMMARY_FILES = OUTPUT_FILES[:4]


def summary_dict(result, metrics) -> dict:
    return {"schema": SCHEMA, "run": result.to_dict(), "metrics": metrics.to_dict()}


def write_run_outputs(result, metrics, directory) -> list[Path]:
    """Write :data:`OUTPUT_FILES` into ``directory`` (created); return their paths."""
    from npulab.timeline import write_trace

    out = Path(directory)
    paths = _write(result, metrics, summary_dict(result, metrics), out)
    paths.append(out / OUTPUT_FILES[4])
    write_trace(result, paths[-1])
    return paths


def write_summary_outputs(summary: dict, directory) -> list[Path]:
    """Write :data:`SUMMARY_FILES` into ``directory`` from a checked summary dict (the run
    and metrics as saved); return their paths. The bytes equal :func:`write_run_outputs`'
    for the same run and metrics."""
    return _write(result_from_dict(summary["run"]), metrics_from_dict(summary["metrics"]),
                  summary, Path(directory))


def _write(result, metrics, summary: dict, out: Path) -> list[Path]:
    from npulab.html_report import render_html

    out.mkdir(parents=True, exist_ok=True)
    saved = json.dumps(summary, indent=1) + "\n"
    # the page renders what summary.json holds (tuples become lists), so a later
    # `npulab report DIR` writes the same bytes
    texts = (saved, render(result, "csv", metrics), render(result, "table", metrics),
             render_html(json.loads(saved)))
    paths = [out / name for name in SUMMARY_FILES]
    for path, text in zip(paths, texts):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return paths


def result_from_dict(run: dict):
    """A :class:`~npulab.simulate.RunResult` from its ``to_dict()`` (e.g. ``summary["run"]``);
    keys a layer no longer has (older summaries) are dropped, missing ones take defaults."""
    from dataclasses import fields

    from npulab.simulate import LayerResult, RunResult
    names = {f.name for f in fields(LayerResult)}
    layers = tuple(LayerResult(**{k: v for k, v in layer.items() if k in names})
                   for layer in run["layers"])
    return RunResult(model=run["model"], chip=run["chip"], config=run["config"],
                     timing=run["timing"], scope=run.get("scope", ""), layers=layers,
                     totals=run.get("totals") or {}, dram=run.get("dram") or {})


def metrics_from_dict(metrics: dict):
    """A :class:`~npulab.metrics.Metrics` from its ``to_dict()``."""
    from npulab.metrics import Metrics
    return Metrics(network=metrics["network"], layers=metrics["layers"], chip=metrics["chip"],
                   technology=metrics["technology"])


def read_summary(directory) -> dict:
    """``DIR/summary.json``, checked (:func:`npulab.html_report.load_summary`: a missing file is
    a FileNotFoundError naming it, bad JSON or a wrong schema a ConfigError naming the file)."""
    from npulab.html_report import load_summary
    if not Path(directory).is_dir():
        raise FileNotFoundError(2, "no such directory", str(directory))
    return load_summary(Path(directory) / "summary.json")
