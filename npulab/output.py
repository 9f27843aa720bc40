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
from npulab.summary_io import (
    SCHEMA, metrics_from_dict, read_summary, recost, result_from_dict, summary_dict,
)

__all__ = ["write_run_outputs", "write_summary_outputs", "OUTPUT_FILES", "SUMMARY_FILES",
           # the summary's format lives in npulab.summary_io; kept importable from here
           "SCHEMA", "summary_dict", "read_summary", "result_from_dict", "metrics_from_dict",
           "recost"]

OUTPUT_FILES = ("summary.json", "layers.csv", "report.txt", "report.html", "trace.json")
#: The files regenerated from ``summary.json`` alone (``npulab report DIR``).
SUMMARY_FILES = OUTPUT_FILES[:4]


def write_run_outputs(result, metrics, directory) -> list[Path]:
    """Write :data:`OUTPUT_FILES` into ``directory`` (created); return their paths."""
    from npulab.timeline import write_trace

    out = Path(directory)
    paths = _write(result, metrics, summary_dict(result, metrics), out)
    paths.append(out / OUTPUT_FILES[4])
    write_trace(result, paths[-1])
    return paths


def write_summary_outputs(summary: dict, directory, where: str = "summary") -> list[Path]:
    """Write :data:`SUMMARY_FILES` into ``directory`` from a checked summary dict (the run
    and metrics as saved); return their paths. The bytes equal :func:`write_run_outputs`'
    for the same run and metrics."""
    return _write(result_from_dict(summary["run"], f"{where}: run"),
                  metrics_from_dict(summary["metrics"]),
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
