"""The report of a sweep directory: ``points.csv``, ``pareto.csv`` and the PNG plots.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from npulab.sweep.errors import SweepError
from npulab.sweep.plots import _heatmap_plot, _pareto_plot, _sensitivity_plot
from npulab.sweep.results import csv_table, load_results
from npulab.sweep.spec import _canonical

__all__ = ["write_report"]


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def _write_csv(path: Path, rows: list[dict], info: dict) -> None:
    header, table = csv_table(rows, info)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in table:
            w.writerow([_csv_value(v) for v in row])


def write_report(out_dir: str | Path, *, heatmap: tuple[str, str] | None = None,
                 objective: str | None = None) -> list[Path]:
    """Write ``points.csv``, ``pareto.csv`` and the plots (``pareto*.png``, ``heatmap*.png``,
    ``sensitivity*.png``; one per workload, suffixed ``_<workload>`` when there are several)
    into ``out_dir`` from its store. ``heatmap``: two axis names (default: the first two axes
    with more than one value); ``objective``: the metric of the heatmap and sensitivity plots
    (default: the first objective). Returns the paths written."""
    out = Path(out_dir)
    loaded = load_results(out)
    info, rows = loaded.info, loaded.rows
    objectives = [tuple(o) for o in info["objectives"]]
    directions = dict(objectives)
    if objective is None:
        objective = objectives[0][0]
    elif objective not in info["metrics"]:
        raise SweepError(f"--objective {objective}: unknown metric; metrics: "
                         f"{', '.join(info['metrics'])}")
    direction = directions.get(objective, "min")
    varied = [a["name"] for a in info["axes"]
              if len({_canonical(r["params"][a["name"]]) for r in rows}) > 1]
    names = [a["name"] for a in info["axes"]]
    if heatmap is not None:
        for name in heatmap:
            if name not in names:
                raise SweepError(f"--heatmap {','.join(heatmap)}: {name!r} is not an axis; "
                                 f"axes: {', '.join(names)}")
        if heatmap[0] == heatmap[1]:
            raise SweepError(f"--heatmap {','.join(heatmap)}: give two different axes")
    elif len(varied) >= 2:
        heatmap = (varied[0], varied[1])
    paths = [out / "points.csv", out / "pareto.csv"]
    _write_csv(paths[0], rows, info)
    _write_csv(paths[1], [r for r in rows if r["pareto"]], info)
    several = len(info["workloads"]) > 1
    for workload in info["workloads"]:
        group = [r for r in rows if r["params"]["workload"] == workload]
        suffix = f"_{re.sub(r'[^A-Za-z0-9_.+-]', '_', workload)}" if several else ""
        title = f"{info['name']}: {workload}"
        if len(objectives) >= 2:
            paths.append(_save(_pareto_plot(group, objectives[:2], title),
                               out / f"pareto{suffix}.png"))
        if heatmap is not None:
            paths.append(_save(_heatmap_plot(group, heatmap, objective, direction, title),
                               out / f"heatmap{suffix}.png"))
        if varied:
            paths.append(_save(_sensitivity_plot(group, varied, objective, title),
                               out / f"sensitivity{suffix}.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path
