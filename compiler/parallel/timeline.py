"""The timeline of one training step: what every pipeline stage does, when.

:func:`step_timeline` turns what :func:`~compiler.parallel.step.plan_step` simulated into events
(seconds from the start of the step), one group per pipeline stage: its tensor- and
data-parallel ranks (``ranks``, physical ids) run the same schedule at the same times, so the
events are kept once per stage and every rank of it shows them. Tracks of a group:

* ``compute``: each task of the schedule (``forward mb 3``, ``backward mb 3``; with ``chunk c``
  when interleaved) as a region, and inside it one region per layer (``layer 12``; the
  embedding and the logits ``head`` on the first and last stage), NVTX-style; a layer's region
  holds its compute and then its tensor-parallel collectives;
* ``tp collectives``: the part of each layer's region spent in its collectives;
* ``pp sends``: each activation (after a forward) and gradient (after a backward) sent to the
  neighbouring stage;
* ``dp collectives``: each gradient bucket's all-reduce (or reduce-scatter), placed as the step
  planner overlaps it with the last backward, and ZeRO's exposed gathers;
* ``optimizer``: the tied-embedding sync (first and last stage) and the optimizer update;
* ``input``: the loader's batch (with prefetch: the next batch, during the step; without: this
  batch, before it), and the wait for it when the step is input-bound.

The last event ends at the step time.
"""

from __future__ import annotations

__all__ = ["step_timeline", "TRACKS"]

TRACKS = ("compute", "tp collectives", "pp sends", "dp collectives", "optimizer", "input")


def step_timeline(*, tasks, pp: int, nv: int, segs_f, segs_b, send, dp_events, emb_sync: float,
                  opt, makespan: float, dp_s: float, input_load_s: float, input_s: float,
                  prefetch: int | None, step_s: float, ranks, n_ranks: int) -> dict:
    """Events of the step (module docstring): ``{"step_s", "stages": [{"stage", "rank",
    "ranks", "events": [{"track", "name", "start", "dur"}]}]}`` (``rank``: the stage's first
    rank; ``ranks``: all of them)."""
    shift = input_load_s if prefetch == 0 else 0.0
    groups = [{"stage": s, "rank": int(ranks[s][0]), "ranks": [int(r) for r in ranks[s]],
               "events": []} for s in range(pp)]

    def add(s: int, track: str, name: str, start: float, end: float, **args) -> None:
        if end > start:
            ev = {"track": track, "name": name, "start": start + shift, "dur": end - start}
            if args:
                ev["args"] = args
            groups[s]["events"].append(ev)

    for s, back, k, j, start, end in tasks or ():
        label = f"{'backward' if back else 'forward'} mb {j}" + (
            f" chunk {k // pp}" if nv > pp else "")
        add(s, "compute", label, start, end, stage=k)
        t = start
        for name, comp, comm in (segs_b[k] if back else segs_f[k]):
            add(s, "compute", name, t, t + comp + comm)
            if comm > 0:
                add(s, "tp collectives", f"{name} {'backward' if back else 'forward'}",
                    t + comp, t + comp + comm)
            t += comp + comm
        if not back and k < nv - 1 and (k + 1) % pp != s:
            add(s, "pp sends", f"activations mb {j} to stage {(k + 1) % pp}", end,
                end + float(send[k]))
        if back and k > 0 and (k - 1) % pp != s:
            add(s, "pp sends", f"gradients mb {j} to stage {(k - 1) % pp}", end,
                end + float(send[k - 1]))
    for s in range(pp):
        for name, start, end in dp_events[s]:
            add(s, "dp collectives", name, start, end)
    t_sync = makespan + dp_s
    for s in range(pp):
        if emb_sync and s in (0, pp - 1):
            add(s, "optimizer", "tied embedding all-reduce", t_sync, t_sync + emb_sync)
        add(s, "optimizer", "optimizer step", t_sync + emb_sync, t_sync + emb_sync + float(opt[s]))
    if prefetch is not None:
        for s in (0,):
            if prefetch == 0:
                groups[s]["events"].append({"track": "input", "name": "load this batch",
                                            "start": 0.0, "dur": input_load_s})
            else:
                add(s, "input", "load the next batch", 0.0, input_load_s)
                if input_s > 0:
                    add(s, "input", "waiting for input", step_s - input_s, step_s)
    for g in groups:
        g["events"].sort(key=lambda e: (TRACKS.index(e["track"]), e["start"], -e["dur"]))
    return {"step_s": step_s, "n_ranks": n_ranks, "tracks": list(TRACKS), "stages": groups}
