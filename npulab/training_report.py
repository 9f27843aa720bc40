"""A training step's views: Perfetto trace and HTML report (``npulab system -o DIR``).

:func:`perfetto` turns :attr:`compiler.parallel.StepReport.timeline` (from
``plan_step(..., timeline=True)``, :mod:`compiler.parallel.timeline`) into the Chrome / Perfetto
Trace Event Format: one process (track group) per rank, ``rank R (stage S)``, when the whole
trace stays under :data:`MAX_EVENTS` events, else one per pipeline stage named after its first
rank (every rank of a stage runs the same schedule); one thread per track (``compute``,
``tp collectives``, ``pp sends``, ``dp collectives``, ``optimizer``, ``input``); complete
events (``ph`` X) in microseconds, nested by time (a task's region holds its layers' regions). :func:`render_html` is one self-contained page
from the same dictionary ``--format json`` prints: the step's parts (the terminal's numbers), a
bar chart of them, memory per stage, and the stages' timeline as a Gantt chart.
"""

from __future__ import annotations

from npulab.html_report import _e

__all__ = ["perfetto", "render_html", "write_outputs", "MAX_EVENTS"]

#: Most events a trace holds with one track group per rank (above: one per pipeline stage).
MAX_EVENTS = 400_000

def perfetto(timeline: dict, title: str) -> dict:
    """The trace document of a step's timeline (module docstring)."""
    tracks = timeline["tracks"]
    meta, body = [], []
    per_rank = sum(len(g["events"]) * len(g["ranks"]) for g in timeline["stages"]) <= MAX_EVENTS
    procs = [(g, r) for g in timeline["stages"] for r in (g["ranks"] if per_rank else
                                                           [g["rank"]])]
    for g, rank in procs:
        pid = rank + 1
        meta.append({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                     "args": {"name": f"rank {rank} (stage {g['stage']})"}})
        meta.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                     "args": {"sort_index": pid}})
        for i, name in enumerate(tracks, 1):
            meta.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": i,
                         "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": i,
                         "args": {"sort_index": i}})
        for ev in g["events"]:
            ts = round(ev["start"] * 1e6, 6)
            body.append({"name": ev["name"], "cat": ev["track"], "ph": "X", "ts": ts,
                         "dur": round((ev["start"] + ev["dur"]) * 1e6, 6) - ts, "pid": pid,
                         "tid": tracks.index(ev["track"]) + 1, "args": ev.get("args", {})})
    body.sort(key=lambda e: (e["ts"], -e["dur"]))
    return {"traceEvents": meta + body, "displayTimeUnit": "ms",
            "otherData": {"title": title, "step_s": timeline["step_s"],
                          "ranks": timeline["n_ranks"],
                          "track_groups": "rank" if per_rank else "pipeline stage",
                          "note": "every rank of a pipeline stage runs the same schedule"}}


def _gantt(timeline: dict):
    from npulab.plots import _figure
    stages = timeline["stages"]
    fig = _figure(9.0, 1.2 + 0.5 * len(stages))
    ax = fig.add_subplot()
    colors = {"compute": "#1f77b4", "tp collectives": "#ff7f0e", "pp sends": "#2ca02c",
              "dp collectives": "#d62728", "optimizer": "#9467bd", "input": "#8c564b"}
    rows = []
    for g in stages:
        for track in timeline["tracks"]:
            evs = [e for e in g["events"] if e["track"] == track and not (
                track == "compute" and (e["name"].startswith(("forward", "backward"))))]
            if not evs:
                continue
            y = len(rows)
            rows.append(f"stage {g['stage']}: {track}")
            ax.broken_barh([(e["start"] * 1e3, e["dur"] * 1e3) for e in evs], (y - 0.4, 0.8),
                           color=colors[track])
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the start of the step")
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def render_html(doc: dict, timeline: dict | None) -> str:
    """The report page of ``SystemPlan.to_dict()`` (module docstring)."""
    from npulab.html_report import simple_page, svg_of
    st = doc["strategy"]
    title = (f"{doc['model']} on {doc['system']}: dp={st['dp']} tp={st['tp']} pp={st['pp']}, "
             f"{doc['microbatches']} micro-batches")
    mfu = f", MFU {100 * doc['mfu']:.1f} %" if doc.get("mfu") is not None else ""
    parts = [f"<p>Step <b>{doc['step_s'] * 1e3:,.3f} ms</b>: {doc['samples_per_s']:,.2f} "
             f"samples/s, {doc['tokens_per_s']:,.0f} tokens/s{mfu}; scaling efficiency "
             f"{100 * doc['scaling_efficiency']:.1f} % against one chip "
             f"({doc['baseline_step_s'] * 1e3:,.3f} ms for the same batch).</p>"]
    parts.append("<h2>Where the step goes</h2><table><tr><th>part</th><th>ms</th></tr>")
    parts += [f"<tr><td>{_e(k)}</td><td>{v * 1e3:,.3f}</td></tr>"
              for k, v in doc["breakdown"].items()]
    parts.append("</table>")
    from npulab.plots import _figure
    fig = _figure(6.5, 3.0)
    ax = fig.add_subplot()
    ax.barh(list(doc["breakdown"]), [v * 1e3 for v in doc["breakdown"].values()])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (busiest rank)")
    parts.append(f'<div class="plot">{svg_of(fig, "breakdown")}</div>')
    fig.clear()
    parts.append("<h2>Memory per stage</h2><table><tr><th>stage</th><th>params GB</th>"
                 "<th>grads GB</th><th>optimizer GB</th><th>activations GB</th><th>total GB"
                 "</th></tr>")
    for m in doc["stage_memory_bytes"]:
        parts.append(f"<tr><td>{m['stage']}</td>" + "".join(
            f"<td>{m[k] / 1e9:,.3f}</td>" for k in ("params", "grads", "optimizer",
                                                     "activations", "total")) + "</tr>")
    parts.append("</table>")
    if timeline is not None:
        fig = _gantt(timeline)
        parts.append(f'<h2>Timeline</h2><div class="plot">{svg_of(fig, "gantt")}</div>'
                     "<p>Every task, layer and collective: trace.json (open it in "
                     "ui.perfetto.dev).</p>")
        fig.clear()
    return simple_page(f"npulab system: {title}", parts)


def write_outputs(out_dir, doc: dict, timeline: dict | None, title: str) -> None:
    """summary.json (``doc``), trace.json and report.html into ``out_dir``."""
    import json
    from pathlib import Path

    from npulab.timeline import validate_trace
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if timeline is not None:
        trace = perfetto(timeline, title)
        validate_trace(trace)
        (d / "trace.json").write_text(json.dumps(trace, separators=(",", ":")) + "\n")
    (d / "report.html").write_text(render_html(doc, timeline))
