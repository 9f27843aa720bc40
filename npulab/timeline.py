"""The run's timeline as a Chrome / Perfetto trace (``trace.json``).

:func:`chrome_trace` turns a :class:`~npulab.record.RunRecord` into the JSON *Trace Event
Format* (``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``) that
ui.perfetto.dev and chrome://tracing open. Times: ``ts``/``dur`` in microseconds (floats) =
core cycles / clock (MHz); every event also carries its cycles in ``args``.

One process (pid 1, named after the chip and the model) holds every track:

* **native** systolic runs (``result.execution.trace``, :mod:`hw.executor`): one thread track
  per engine, ``load DMA``, ``array``, ``store DMA``, plus ``host link in`` / ``host link out``
  for the link side of host copies (the link is full duplex; the DMA track keeps the copy's DRAM
  side). One complete event per command, named by layer and tile
  (``conv1 compute g0 m2 n0 k1``, ``conv1 load filter n0 k1``, ``conv1 store ofmap m2 n0``).
* every mode: a ``layers`` track with each layer's accounting window (the executor's
  ``(E[i-1], E[i]]``; in the other modes the layer's own span), which never overlap and add up
  to the run's cycles; and one *region* per layer, an async nestable ``b``/``e`` pair
  (``cat`` "layer", ``id`` = layer index) from the first start to the last finish of the layer's
  work. Regions may overlap the neighbouring layer (prefetch), windows never do.
* **compute** / **scalesim**: layers back to back on the ``array`` track.
* **nvdla**: hardware layers back to back; per layer one event per unit on ``CDMA``, ``RDMA``,
  ``BDMA``, ``CSC/CMAC``, ``SDP``, ``PDP``, ``CDP``, ``WDMA`` (the units NVIDIA's architecture
  spec names, ``doc/hw/v1/hwarch.rst``: the convolution pipeline CDMA -> CBUF -> CSC -> CMAC ->
  CACC -> SDP (-> PDP on the fly) -> write DMA; standalone SDP/PDP/CDP layers read through their
  own RDMA, ``cmod/sdp/NV_NVDLA_sdp.cpp``). Each event's length is the unit's busy time from the
  cycle model (``LayerResult.units``, filled by :mod:`npulab.nvdla_run` from
  :func:`hw.nvdla.cycles.conv_cycles` / :func:`~hw.nvdla.cycles.engine_cycles`), placed inside
  the layer's window: the fetching units (CDMA, BDMA) from the window's start, the others after
  ``units["startup"]`` (first fill / DRAM latency; 0 when not given), moved earlier when needed
  to end inside the window.
* counter track ``DRAM useful GB/s`` (``ph`` C, series ``read`` and ``write``): each layer
  window's DRAM bytes read and written (useful bytes, not bus bytes) over the window's
  duration, for native and NVDLA runs. The per-layer bus and useful bandwidths of the other
  views are over the layer's busy span (:mod:`npulab.metrics`).
* a **multi-core** chip (:mod:`compiler.backends.multicore`): the engine tracks hold core 0's
  commands (the layer's other cores run the same commands on their own shares, in lockstep);
  one track per core, ``core N``, shows the window of each layer the core takes part in; counter
  tracks ``L2 GB/s`` (``read``, ``write``) and ``network GB/s`` per layer window.

:func:`validate_trace` checks a document against the format's rules that Perfetto relies on;
:func:`write_trace` validates and writes compact JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from hw.program import Engine, Kind, Operand

__all__ = ["chrome_trace", "validate_trace", "write_trace", "TRACK_NAMES", "NVDLA_UNIT_TRACKS"]

PID = 1
# Thread ids; thread_sort_index = the tid (the vector engine's: the array's, so it shows beside
# it), so tracks appear in this order.
TID_LAYERS = 1
TID_LINK_IN = 2
TID_LOAD = 3
TID_ARRAY = 4
TID_STORE = 5
TID_LINK_OUT = 6
TID_VECTOR = 7
TID_CORE0 = 100     # core N's track: TID_CORE0 + N
TID_LANE0 = 5000    # overlapping DMA transfers: TID_LANE0 + 16 x engine + lane
TRACK_NAMES = {TID_LAYERS: "layers", TID_LINK_IN: "host link in", TID_LOAD: "load DMA",
               TID_ARRAY: "array", TID_STORE: "store DMA", TID_LINK_OUT: "host link out",
               TID_VECTOR: "vector engine"}
_SORT_INDEX = {TID_VECTOR: TID_ARRAY}
_ENGINE_TID = {Engine.LOAD: TID_LOAD, Engine.ARRAY: TID_ARRAY, Engine.STORE: TID_STORE,
               Engine.VECTOR: TID_VECTOR}

#: NVDLA unit key (of a ``units`` dict) -> (thread id, track name). Readers first, then the
#: datapath in pipeline order, then the write DMA.
NVDLA_UNIT_TRACKS = {"cdma": (10, "CDMA"), "rdma": (11, "RDMA"), "bdma": (12, "BDMA"),
                     "cmac": (13, "CSC/CMAC"), "sdp": (14, "SDP"), "pdp": (15, "PDP"),
                     "cdp": (16, "CDP"), "wdma": (17, "WDMA")}
#: Units that start when the layer starts; the others start after ``units["startup"]``.
_NVDLA_READERS = ("cdma", "bdma")

_OPERAND_TILES = {Operand.IFMAP: "mk", Operand.FILTER: "nk", Operand.OFMAP: "mn",
                  Operand.PSUM: "mn", Operand.RESIDUAL: "mn", Operand.NONE: "mnk"}
_KIND_WORD = {Kind.LOAD: "load", Kind.STORE: "store", Kind.COMPUTE: "compute", Kind.MOVE: "move",
              Kind.HOST_IN: "host_in", Kind.HOST_OUT: "host_out", Kind.VECTOR: "vector"}
_PHASE_RANK = {"M": -1, "b": 0, "X": 1, "B": 1, "C": 1, "E": 2, "e": 3}


# ------------------------------------------------------------------------------ building
class _Doc:
    """Collects events; times in cycles, converted to µs once."""

    def __init__(self, clock_mhz: float):
        self.us = 1.0 / clock_mhz
        self.events: list[dict] = []
        self.tracks: dict[int, str] = {}

    def time(self, cycles: int) -> float:
        """Cycles -> µs, rounded to the picosecond (monotonic, so order and nesting hold)."""
        return round(cycles * self.us, 6)

    def track(self, tid: int, name: str) -> None:
        self.tracks[tid] = name

    def complete(self, tid: int, name: str, start: int, finish: int, args: dict) -> None:
        ts = self.time(start)
        self.events.append({"name": name, "cat": "npulab", "ph": "X", "ts": ts,
                            "dur": round(self.time(finish) - ts, 6), "pid": PID, "tid": tid,
                            "args": {**args, "start_cycle": int(start),
                                     "finish_cycle": int(finish)}})

    def region(self, index: int, name: str, start: int, finish: int) -> None:
        args = {"first_cycle": int(start), "last_cycle": int(finish)}
        for ph, t in (("b", start), ("e", finish)):
            self.events.append({"name": name, "cat": "layer", "ph": ph, "ts": self.time(t),
                                "pid": PID, "tid": TID_LAYERS, "id": index, "args": args})

    def window(self, name: str, start: int, finish: int, args: dict) -> None:
        self.complete(TID_LAYERS, name, start, finish, {"window_of": name, **args})

    def dram_counter(self, t: int, read_gbps: float, write_gbps: float,
                     name: str = "DRAM useful GB/s") -> None:
        self.events.append({"name": name, "ph": "C", "ts": self.time(t), "pid": PID,
                            "tid": 0, "args": {"read": read_gbps, "write": write_gbps}})

    def finish(self, process_name: str, other: dict) -> dict:
        meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0,
                 "args": {"name": process_name}}]
        for tid, name in sorted(self.tracks.items()):
            meta.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": tid,
                         "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": PID,
                         "tid": tid, "args": {"sort_index": _SORT_INDEX.get(tid, tid)}})
        # Time order; at equal times, region begins first and ends last, longer events first
        # (a parent before the child it contains on the same track).
        body = sorted(self.events, key=lambda e: (e["ts"], _PHASE_RANK[e["ph"]],
                                                  -e.get("dur", 0.0)))
        return {"traceEvents": meta + body, "displayTimeUnit": "ns", "otherData": other}


def chrome_trace(result) -> dict:
    """The Chrome / Perfetto trace of ``result`` (a :class:`~npulab.record.RunRecord` of any
    timing mode); see the module docstring for the tracks. Raises ValueError when the result
    cannot be drawn (no clock, a native run without its execution trace)."""
    from npulab.record import RunRecord

    if not isinstance(result, RunRecord):
        raise ValueError(f"result = {type(result).__name__}: must be a RunResult "
                         f"(npulab.simulate.simulate or npulab.nvdla_run.simulate_nvdla)")
    clock = float(result.spec.clock_mhz)
    doc = _Doc(clock)
    if result.execution is not None:
        cycles = _native(doc, result)
    elif result.timing == "native":
        raise ValueError("result.execution = None: a native run's timeline needs the "
                         "executor's trace (a RunResult straight from npulab.simulate, "
                         "not one rebuilt from run.json)")
    else:
        cycles = LAYER_TRACKS.get(result.kind, _back_to_back)(doc, result)
    other = {"model": result.model, "chip": result.chip, "timing": result.timing,
             "scope": result.scope, "clock_mhz": clock, "cycles": int(cycles)}
    return doc.finish(f"{result.chip}: {result.model} ({result.timing})", other)


def _native(doc: _Doc, result) -> int:
    run = result.execution
    tr = run.trace
    n_layers = len(tr.layer_names)
    for tid in (TID_LAYERS, TID_LOAD, TID_ARRAY, TID_STORE):
        doc.track(tid, TRACK_NAMES[tid])
    if (tr.link_start[tr.kind == Kind.HOST_IN] >= 0).any():
        doc.track(TID_LINK_IN, TRACK_NAMES[TID_LINK_IN])
    if (tr.link_start[tr.kind == Kind.HOST_OUT] >= 0).any():
        doc.track(TID_LINK_OUT, TRACK_NAMES[TID_LINK_OUT])
    if (tr.kind == Kind.VECTOR).any():
        doc.track(TID_VECTOR, TRACK_NAMES[TID_VECTOR])
    lanes = _dma_lanes(doc, tr)
    # Group tiles are named only in layers that have more than one.
    grouped = np.zeros(n_layers, np.bool_)
    if len(tr.start):
        np.logical_or.at(grouped, tr.layer, tr.tile_g > 0)
    for i in range(len(tr.start)):
        lay = int(tr.layer[i])
        layer = tr.layer_names[lay]
        kind = Kind(int(tr.kind[i]))
        operand = Operand(int(tr.operand[i]))
        tile = {"g": int(tr.tile_g[i]), "m": int(tr.tile_m[i]), "n": int(tr.tile_n[i]),
                "k": int(tr.tile_k[i])}
        s, f = int(tr.start[i]), int(tr.finish[i])
        args = {"layer": layer, "kind": _KIND_WORD[kind], "command": i,
                **{f"tile_{a}": v for a, v in tile.items()}}
        if kind == Kind.COMPUTE:
            label = " ".join(f"{a}{tile[a]}" for a in "gmnk")
            doc.complete(TID_ARRAY, f"{layer} compute {label}", s, f, {**args, "cycles": f - s})
            continue
        if kind == Kind.VECTOR:
            what = tr.work_names[int(tr.work[i])]
            doc.complete(TID_VECTOR, f"{layer} {what} t{tile['m']}", s, f,
                         {**args, "op": what, "cycles": f - s})
            continue
        axes = ("g" if grouped[lay] else "") + _OPERAND_TILES[operand]
        label = " ".join(f"{a}{tile[a]}" for a in axes)
        what = operand.name.lower()
        args.update(operand=what, bytes=int(tr.nbytes[i]))
        tid = lanes.get(i, _ENGINE_TID[Engine(int(tr.engine[i]))])
        word = _KIND_WORD[kind].replace("_", " ")
        d = int(tr.dram_finish[i])
        doc.complete(tid, f"{layer} {word} {what} {label}", s, d,
                     {**args, "side": "dram" if kind != Kind.MOVE else "on-chip",
                      "command_finish_cycle": f, "cycles": d - s})
        if tr.link_start[i] >= 0:
            ls, lf = int(tr.link_start[i]), int(tr.link_finish[i])
            link_tid = TID_LINK_IN if kind == Kind.HOST_IN else TID_LINK_OUT
            doc.complete(link_tid, f"{layer} link {'in' if kind == Kind.HOST_IN else 'out'} "
                         f"{what} {label}", ls, lf,
                         {**args, "side": "link", "command_start_cycle": s,
                          "command_finish_cycle": f, "cycles": lf - ls})
    # A multi-core chip: a track per core that runs any layer.
    multicore = bool(getattr(result.spec.config, "multicore", False))
    cores = [int(x.cores or 1) for x in result.layers]
    # a pipeline stage's cores follow the stage before's (compiler.backends.stages)
    first_core = [int(x.stage or 0) * c for x, c in zip(result.layers, cores)]
    if multicore:
        for core in range(max((f + c for f, c in zip(first_core, cores)), default=1)):
            doc.track(TID_CORE0 + core, f"core {core}")
    # Regions and the executor's accounting windows (E[i-1], E[i]].
    prev = 0
    for li, name in enumerate(tr.layer_names):
        sel = tr.layer == li
        if not sel.any():
            continue
        first, last = int(tr.start[sel].min()), int(tr.finish[sel].max())
        doc.region(li, name, first, last)
        c = run.layers[li]
        end = prev + c["cycles"]   # the executor's window (hw.executor: windows tile the run)
        doc.window(name, prev, end, {k: c[k] for k in (
            "cycles", "compute_cycles", "stall_dram_cycles", "stall_link_cycles",
            "stall_sram_cycles", "stall_vector_cycles")})
        rd = c["dram_ifmap_read_bytes"] + c["dram_filter_read_bytes"] + c["dram_psum_read_bytes"]
        wr = c["dram_ofmap_write_bytes"] + c["dram_psum_write_bytes"]
        if end > prev:
            doc.dram_counter(prev, *_gbps(rd, wr, end - prev, 1.0 / doc.us))
            if multicore:
                doc.dram_counter(prev, *_gbps(c["l2_read_bytes"], c["l2_write_bytes"],
                                              end - prev, 1.0 / doc.us), "L2 GB/s")
                doc.dram_counter(prev, *_gbps(c["noc_bytes"], 0, end - prev, 1.0 / doc.us)[:1],
                                 0.0, "network GB/s")
        if multicore and end > prev:     # the layer's window on each of its cores
            for core in range(first_core[li], first_core[li] + cores[li]):
                doc.complete(TID_CORE0 + core, name, prev, end,
                             {"layer": name, "core": core, "cores": int(cores[li])})
        prev = end
    if prev:
        doc.dram_counter(prev, 0.0, 0.0)
        if multicore:
            doc.dram_counter(prev, 0.0, 0.0, "L2 GB/s")
            doc.dram_counter(prev, 0.0, 0.0, "network GB/s")
    assert prev == run.cycles, (prev, run.cycles)
    return run.cycles


def _dma_lanes(doc: _Doc, tr) -> dict[int, int]:
    """A multi-core chip's DMA engines start a transfer before the previous one has finished
    (hw.executor): transfers that overlap go on extra tracks ``load DMA 2``, ``3``, ... (each
    on the first whose last transfer has ended). Command index -> thread id, for those."""
    out: dict[int, int] = {}
    for engine in (Engine.LOAD, Engine.STORE):
        idx = np.flatnonzero(tr.engine == engine)
        ends: list[int] = []              # per lane, the cycle its last transfer ends
        for i in idx[np.argsort(tr.start[idx], kind="stable")]:
            s, f = int(tr.start[i]), int(tr.dram_finish[i])
            lane = next((k for k, e in enumerate(ends) if e <= s), len(ends))
            if lane == len(ends):
                ends.append(f)
            ends[lane] = max(f, s)
            if lane:
                tid = TID_LANE0 + 16 * int(engine) + lane
                out[int(i)] = tid
                doc.track(tid, f"{TRACK_NAMES[_ENGINE_TID[engine]]} {lane + 1}")
    return out


def _gbps(read_bytes: int, write_bytes: int, cycles: int, clock_mhz: float) -> tuple[float, float]:
    """Bytes over ``cycles`` at ``clock_mhz`` in GB/s (1e9 B/s)."""
    scale = clock_mhz * 1e6 / cycles / 1e9
    return read_bytes * scale, write_bytes * scale


def _back_to_back(doc: _Doc, result) -> int:
    doc.track(TID_LAYERS, TRACK_NAMES[TID_LAYERS])
    doc.track(TID_ARRAY, TRACK_NAMES[TID_ARRAY])
    t = 0
    for li, layer in enumerate(result.layers):
        if layer.cycles is None:
            continue
        end = t + layer.cycles
        doc.complete(TID_ARRAY, f"{layer.name} compute", t, end,
                     {"layer": layer.name, "kind": "compute", "op": layer.op,
                      "cycles": layer.cycles, "macs": layer.macs})
        doc.region(li, layer.name, t, end)
        doc.window(layer.name, t, end, {"cycles": layer.cycles})
        t = end
    return t


def _nvdla(doc: _Doc, result) -> int:
    doc.track(TID_LAYERS, TRACK_NAMES[TID_LAYERS])
    clock = 1.0 / doc.us
    t = 0
    for li, layer in enumerate(result.layers):
        total = int(layer.cycles)
        end = t + total
        units = getattr(layer, "units", None)
        base = {"layer": layer.name, "kind": layer.engine, "op": layer.op}
        if units is None:
            # Without the cycle model's per-unit terms only the main unit's busy time is known.
            key = "cmac" if layer.engine == "conv" else layer.engine
            units = {"startup": 0, key: layer.compute_cycles or 0}
            base["units"] = "main unit only (LayerResult.units not filled)"
        startup = int(units.get("startup", 0))
        for key, busy in units.items():
            if key == "startup":
                continue
            if key not in NVDLA_UNIT_TRACKS:
                raise ValueError(f"layer {layer.name!r}: units key {key!r}: must be one of "
                                 f"startup, {', '.join(NVDLA_UNIT_TRACKS)}")
            model = int(busy)
            busy = min(model, total)   # drawn inside the window; args keep the model's number
            if busy <= 0:
                continue
            tid, track = NVDLA_UNIT_TRACKS[key]
            doc.track(tid, track)
            offset = 0 if key in _NVDLA_READERS else min(startup, total - busy)
            args = {**base, "unit": track, "cycles": model}
            if key in ("cdma", "rdma", "bdma"):
                args["bytes"] = layer.dram_read_bytes
            elif key == "wdma":
                args["bytes"] = layer.dram_write_bytes
            doc.complete(tid, f"{layer.name} {track}", t + offset, t + offset + busy, args)
        doc.region(li, layer.name, t, end)
        doc.window(layer.name, t, end, {"cycles": total, "compute_cycles": layer.compute_cycles,
                                        "bound": layer.bound})
        if total:
            doc.dram_counter(t, *_gbps(layer.dram_read_bytes or 0, layer.dram_write_bytes or 0,
                                       total, clock))
        t = end
    if t:
        doc.dram_counter(t, 0.0, 0.0)
    return t


# ------------------------------------------------------------------------------ validation
_M_NAMES = {"process_name": "name", "thread_name": "name", "process_labels": "labels",
            "thread_sort_index": "sort_index", "process_sort_index": "sort_index"}
_REQUIRED = {"X": ("name", "ph", "ts", "dur", "pid", "tid"),
             "B": ("name", "ph", "ts", "pid", "tid"), "E": ("ph", "ts", "pid", "tid"), "b": ("name", "ph", "ts", "pid", "cat", "id"),
             "e": ("ph", "ts", "pid", "cat", "id"), "C": ("name", "ph", "ts", "pid", "args"),
             "M": ("name", "ph", "pid", "args")}

#: How layers without an execution trace are drawn, by engine kind (default: back to back on
#: the array track).
LAYER_TRACKS = {"nvdla": _nvdla}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate_trace(doc: dict) -> None:
    """Check a trace document; raise ValueError listing every problem found.

    Rules: ``traceEvents`` is a list of objects; required keys per phase (X: name, ph, ts, dur,
    pid, tid; B/E: ts, pid, tid; b/e: id and cat; C: args; M: args.name for process/thread names,
    args.sort_index for sort indices); ``ts`` and ``dur`` finite and >= 0; on each (pid, tid)
    thread track the X/B/E timestamps are non-decreasing in file order, X events nest properly
    (no partial overlap) and B/E pairs match; async b/e pairs match per (pid, cat, id) with
    non-decreasing times; every event whose ``args.layer`` names a layer lies inside that
    layer's region (the ``b``/``e`` pair of ``cat`` "layer" with the layer's name), within one
    cycle at ``otherData.clock_mhz`` (1 ns when the clock is not given)."""
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise ValueError(f"trace: {type(doc).__name__}: must be a dict with 'traceEvents'")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError(f"trace: traceEvents = {type(events).__name__}: must be a list")
    unit = doc.get("displayTimeUnit", "ms")
    if unit not in ("ms", "ns"):
        problems.append(f"displayTimeUnit = {unit!r}: must be 'ms' or 'ns'")
    other = doc.get("otherData", {})
    if not isinstance(other, dict):
        problems.append(f"otherData = {type(other).__name__}: must be an object")
        other = {}
    clock = other.get("clock_mhz")
    tol = 1.0 / clock if _number(clock) and clock > 0 else 1e-3
    eps = 1e-9 + 1e-12 * max([abs(e.get("ts", 0)) for e in events
                              if isinstance(e, dict) and _number(e.get("ts"))] + [0.0])

    def where(i: int, e: dict) -> str:
        return (f"traceEvents[{i}] ({e.get('ph')!s} {e.get('name')!r} pid {e.get('pid')} "
                f"tid {e.get('tid')})")

    last_ts: dict[tuple, float] = {}
    open_x: dict[tuple, list] = {}      # per thread: stack of (end, index)
    open_b: dict[tuple, list] = {}      # per thread: stack of B indices
    open_async: dict[tuple, list] = {}  # per (pid, cat, id): stack of (name, ts, index)
    regions: dict[str, tuple[float, float]] = {}
    named: list[tuple[int, dict]] = []
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            problems.append(f"traceEvents[{i}] = {type(e).__name__}: must be an object")
            continue
        ph = e.get("ph")
        if ph not in _REQUIRED:
            problems.append(f"{where(i, e)}: ph = {ph!r}: must be one of "
                            f"{', '.join(_REQUIRED)}")
            continue
        missing = [k for k in _REQUIRED[ph] if k not in e]
        if missing:
            problems.append(f"{where(i, e)}: missing key(s) {', '.join(missing)} "
                            f"(a {ph!r} event needs {', '.join(_REQUIRED[ph])})")
            continue
        bad = False
        for key in ("ts", "dur"):
            if key in e and not (_number(e[key]) and e[key] >= 0):
                problems.append(f"{where(i, e)}: {key} = {e[key]!r}: must be a finite number "
                                f">= 0 (microseconds)")
                bad = True
        if bad:
            continue
        args = e.get("args", {})
        if ph == "M":
            need = _M_NAMES.get(e["name"])
            if need is None:
                problems.append(f"{where(i, e)}: metadata name {e['name']!r}: must be one of "
                                f"{', '.join(_M_NAMES)}")
            elif not isinstance(args, dict) or need not in args:
                problems.append(f"{where(i, e)}: a {e['name']} metadata event needs "
                                f"args.{need}")
            continue
        ts = float(e["ts"])
        if ph in "XBE":
            track = (e["pid"], e["tid"])
            if ts < last_ts.get(track, 0.0) - eps:
                problems.append(f"{where(i, e)}: ts = {ts} goes back in time on its track "
                                f"(previous event at {last_ts[track]}); events of one thread "
                                f"must be in non-decreasing ts order")
            last_ts[track] = max(ts, last_ts.get(track, 0.0))
        if ph == "X":
            stack = open_x.setdefault(track, [])
            end = ts + float(e["dur"])
            while stack and stack[-1][0] <= ts + eps:
                stack.pop()
            if stack and end > stack[-1][0] + eps:
                j = stack[-1][1]
                problems.append(f"{where(i, e)}: [{ts}, {end}] partly overlaps "
                                f"traceEvents[{j}] {events[j].get('name')!r} ending at "
                                f"{stack[-1][0]} on the same thread (events of one thread must "
                                f"nest or follow each other)")
            stack.append((end, i))
        elif ph == "B":
            open_b.setdefault(track, []).append(i)
        elif ph == "E":
            if not open_b.get(track):
                problems.append(f"{where(i, e)}: E without a matching B on its thread")
            else:
                open_b[track].pop()
        elif ph in "be":
            key = (e["pid"], e["cat"], e["id"])
            stack = open_async.setdefault(key, [])
            if ph == "b":
                stack.append((e["name"], ts, i))
            elif not stack:
                problems.append(f"{where(i, e)}: async end without a matching begin "
                                f"(cat {e['cat']!r}, id {e['id']!r})")
            else:
                name, t0, j = stack.pop()
                if "name" in e and e["name"] != name:
                    problems.append(f"{where(i, e)}: async end named {e['name']!r} closes "
                                    f"traceEvents[{j}] named {name!r}")
                if ts < t0 - eps:
                    problems.append(f"{where(i, e)}: async end at {ts} before its begin "
                                    f"(traceEvents[{j}], {t0})")
                if e["cat"] == "layer":
                    if name in regions:
                        problems.append(f"{where(i, e)}: a second region for layer {name!r}")
                    regions[name] = (t0, ts)
        if isinstance(args, dict) and "layer" in args and ph in "XBC":
            named.append((i, e))
    for track, stack in open_b.items():
        for j in stack:
            problems.append(f"{where(j, events[j])}: B without a matching E")
    for key, stack in open_async.items():
        for name, _, j in stack:
            problems.append(f"{where(j, events[j])}: async begin {name!r} (cat {key[1]!r}, "
                            f"id {key[2]!r}) never ends")
    for i, e in named:
        layer = e["args"]["layer"]
        if layer not in regions:
            problems.append(f"{where(i, e)}: args.layer = {layer!r} has no region (no 'b'/'e' "
                            f"pair of cat 'layer' named {layer!r})")
            continue
        lo, hi = regions[layer]
        ts = float(e["ts"])
        end = ts + float(e.get("dur", 0.0))
        if ts < lo - tol or end > hi + tol:
            problems.append(f"{where(i, e)}: [{ts}, {end}] lies outside the region of layer "
                            f"{layer!r} [{lo}, {hi}] (tolerance {tol} us = one cycle)")
    if problems:
        raise ValueError(f"invalid trace: {len(problems)} problem(s):\n  "
                         + "\n  ".join(problems))


def write_trace(result, path) -> Path:
    """Validate ``result``'s trace (:func:`chrome_trace`) and write it as compact JSON to
    ``path``; returns the path."""
    doc = chrome_trace(result)
    validate_trace(doc)
    path = Path(path)
    path.write_text(json.dumps(doc, separators=(",", ":"), allow_nan=False), encoding="utf-8")
    return path
