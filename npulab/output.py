"""The files ``npulab run -o DIR`` writes, and the summary they share.

* ``summary.json``: ``{"schema": "npulab.summary/1", "run": RunResult.to_dict(), "metrics":
  Metrics.to_dict()}`` -- everything else is regenerated from it (``npulab report DIR``);
* ``layers.csv``: one row per layer, the run's columns plus the per-layer metrics;
* ``report.txt``: the table ``npulab run`` prints;
* ``report.html``: the self-contained report (tables, plots, the energy table with citations);
* ``trace.json``: the timeline in the Chrome/Perfetto trace-event format.
"""

from __future__ import annotations

import json
from pathlib import Path

from npulab.report import render

__all__ = ["SCHEMA", "summary_dict", "write_run_outputs", "read_summary", "OUTPUT_FILES"]

SCHEMA = "npulab.summary/1"
OUTPUT_FILES = ("summary.json", "layers.csv", "report.txt", "report.html", "trace.json")


def summary_dict(result, metrics) -> dict:
    return {"schema": SCHEMA, "run": result.to_dict(), "metrics": metrics.to_dict()}


def write_run_outputs(result, metrics, directory) -> list[Path]:
    """Write :data:`OUTPUT_FILES` into ``directory`` (created); return their paths."""
    from npulab.html_report import render_html
    from npulab.timeline import write_trace

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    summary = summary_dict(result, metrics)
    paths = [out / name for name in OUTPUT_FILES]
    paths[0].write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(render(result, "csv", metrics), encoding="utf-8")
    paths[2].write_text(render(result, "table", metrics), encoding="utf-8")
    paths[3].write_text(render_html(summary), encoding="utf-8")
    write_trace(result, paths[4])
    return paths


def read_summary(directory) -> dict:
    """``DIR/summary.json``, checked (:func:`npulab.html_report.load_summary`: a missing file is
    a FileNotFoundError naming it, bad JSON or a wrong schema a ConfigError naming the file)."""
    from npulab.html_report import load_summary
    if not Path(directory).is_dir():
        raise FileNotFoundError(2, "no such directory", str(directory))
    return load_summary(Path(directory) / "summary.json")
