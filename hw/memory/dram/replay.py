"""Trace replay: DRAMsim3 trace files in, each request's completion out (:func:`replay`).

:func:`read_trace` reads DRAMsim3's trace format; :func:`replay` offers the requests in order to a
fresh :class:`~hw.memory.dram.DramModel` and returns a :class:`ReplayResult` (per-request
completion and latency, row-buffer and command counters, bandwidth; optionally the command log).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hw._lazy import lazy_module
from hw.memory.dram.config import DramConfig
from hw.memory.dram.model import DramModel
from hw.systolic.config import ConfigError
from hw.validate import read_config_text

np = lazy_module("numpy")                     # loaded when a model first runs,
K = lazy_module("hw.memory._dram_requests")   # so reading presets stays light

__all__ = ["TraceError", "ReplayResult", "replay", "replay_summary", "read_trace",
           "MAX_TRACE_CYCLE"]


class TraceError(ConfigError):
    """A malformed trace line; the message names the file and line."""


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of :func:`replay`. Cycles are DRAM clock cycles (tCK); see :mod:`hw.memory.dram`
    for what a completion includes.

    ``finish_cycles``/``latency_cycles``: per request, completion cycle and completion - issue.
    ``total_cycles``: from the first request's issue cycle to the last completion.
    ``bandwidth_gbps``: requests * request_bytes / (total_cycles * tck_ns); 0 if no time passed.
    ``commands`` (only with ``command_log=True``): one row per command, columns ``cycle,
    channel, rank, bankgroup, bank, row, kind`` with kind 0 ACT, 1 PRE, 2 RD, 3 WR, 4 RDA,
    5 WRA, 6 REF (row -1 for REF).
    """

    finish_cycles: np.ndarray
    latency_cycles: np.ndarray
    total_cycles: int
    reads: int
    writes: int
    row_hits: int
    row_misses: int
    row_conflicts: int
    activates: int
    precharges: int
    refreshes: int
    mean_latency_cycles: float
    bandwidth_gbps: float
    commands: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (arrays as lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v = v.tolist()
            if v is not None:
                out[f.name] = v
        return out

    def __repr__(self) -> str:
        n = self.reads + self.writes
        hits = 100 * self.row_hits / n if n else 0.0
        return (f"ReplayResult: {n:,} requests ({self.reads:,} reads, {self.writes:,} writes) in "
                f"{self.total_cycles:,} DRAM cycles, {self.bandwidth_gbps:.4g} GB/s\n"
                f"  row buffer {self.row_hits:,} hits ({hits:.1f} %), {self.row_misses:,} misses, "
                f"{self.row_conflicts:,} conflicts; {self.activates:,} ACT, "
                f"{self.precharges:,} PRE, {self.refreshes:,} REF\n"
                f"  latency mean {self.mean_latency_cycles:.1f} cycles, max "
                f"{int(self.latency_cycles.max()) if len(self.latency_cycles) else 0:,}")

    def to_pandas(self):
        """One row per request, in the order given: ``index``, ``issue_cycle``,
        ``finish_cycle``, ``latency_cycles`` (the columns of ``npulab dram replay
        --per-request`` without the address and op, which the caller holds). Needs pandas."""
        from hw._notebook import import_pandas
        pd = import_pandas()
        fin = np.asarray(self.finish_cycles, dtype=np.int64)
        lat = np.asarray(self.latency_cycles, dtype=np.int64)
        return pd.DataFrame({"index": np.arange(len(fin), dtype=np.int64),
                             "issue_cycle": fin - lat, "finish_cycle": fin,
                             "latency_cycles": lat})


def replay_summary(cfg: DramConfig, result: ReplayResult, trace: str) -> dict[str, Any]:
    """Headline figures of a :func:`replay` of ``trace`` (a name) on ``cfg`` as plain data
    (``npulab dram replay --json``): requests, total cycles and ns, bandwidth against peak,
    row-buffer and command counts, mean and max latency."""
    n = int(len(result.finish_cycles))
    lat = result.latency_cycles
    return {
        "trace": trace, "dram": cfg.preset, "requests": n, "reads": result.reads,
        "writes": result.writes, "request_bytes": cfg.request_bytes,
        "total_cycles": result.total_cycles, "total_ns": result.total_cycles * cfg.tck_ns,
        "tck_ns": cfg.tck_ns, "bandwidth_gbps": result.bandwidth_gbps,
        "peak_gbps": cfg.peak_gbps if not cfg.is_ideal else None,
        "row_hits": result.row_hits, "row_misses": result.row_misses,
        "row_conflicts": result.row_conflicts, "activates": result.activates,
        "precharges": result.precharges, "refreshes": result.refreshes,
        "mean_latency_cycles": result.mean_latency_cycles,
        "max_latency_cycles": int(lat.max()) if n else 0,
    }


#: The latest issue cycle a trace or :func:`replay` may give: 2**60 (a 2**62 sentinel is the
#: kernel's "never"); idle gaps of any length up to it cost a few refresh rounds (the kernel
#: skips idle time).
MAX_TRACE_CYCLE = 1 << 60


def _as_requests(addresses, is_write, issue_cycles):
    a = np.ascontiguousarray(addresses, dtype=np.int64).reshape(-1)
    w = np.ascontiguousarray(is_write).reshape(-1).astype(np.uint8)
    t = np.ascontiguousarray(issue_cycles, dtype=np.int64).reshape(-1)
    if not len(a) == len(w) == len(t):
        raise ValueError(f"replay: addresses, is_write and issue_cycles differ in length "
                         f"({len(a)}, {len(w)}, {len(t)})")
    if len(a) and (a.min() < 0 or t.min() < 0):
        raise ValueError("replay: addresses and issue cycles must be >= 0")
    if len(a) and t.max() > MAX_TRACE_CYCLE:
        raise ValueError(f"replay: issue cycle {int(t.max())}: must be <= {MAX_TRACE_CYCLE} "
                         f"(2**60)")
    return a, w, t


def replay(cfg: DramConfig, addresses, is_write, issue_cycles, *,
           command_log: bool = False) -> ReplayResult:
    """Replay requests on a fresh model. Requests are offered in the given order, request k at
    ``max(issue_cycles[k], cycle request k-1 was offered)`` (in-order front end, as DRAMsim3's
    trace reader) and later while its channel's transaction queue is full."""
    a, w, t = _as_requests(addresses, is_write, issue_cycles)
    n = len(a)
    cap = 4 * n + 64 if command_log else 0
    while True:
        model = DramModel(cfg)
        finish = np.empty(max(n, 1), np.int64)
        log = np.empty((cap, K.LOG_FIELDS), np.int64)
        logn = np.zeros(1, np.int64)
        if n:
            K.run_requests(model.params, model.state, model.stats, a, w, t, 0, False, 0, n, n,
                           finish, log, logn)
        if not command_log or logn[0] <= cap:
            break
        cap = int(logn[0])
    finish = finish[:n].copy()
    latency = finish - t
    total = int(finish.max() - t.min()) if n else 0
    c = model.counters()
    return ReplayResult(
        finish_cycles=finish, latency_cycles=latency, total_cycles=total, reads=c["reads"],
        writes=c["writes"], row_hits=c["row_hits"], row_misses=c["row_misses"],
        row_conflicts=c["row_conflicts"], activates=c["activates"], precharges=c["precharges"],
        refreshes=c["refreshes"], mean_latency_cycles=float(latency.mean()) if n else 0.0,
        bandwidth_gbps=n * cfg.request_bytes / (total * cfg.tck_ns) if total > 0 else 0.0,
        commands=log[:int(logn[0])].copy() if command_log else None)


def read_trace(path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a DRAMsim3 trace: one request per line, ``<hex address> READ|WRITE <cycle>``
    (e.g. ``0x12345680 READ 10``); blank lines and ``#`` comments are skipped. Returns
    (addresses, is_write, issue_cycles). TraceError names the file and line of bad input."""
    path = Path(path)
    text = read_config_text(path, "no such trace file", what="trace file", error=TraceError)
    addrs, writes, cycles = [], [], []
    kinds = {"READ": False, "R": False, "WRITE": True, "W": True}
    for lineno, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        parts = body.split()
        if len(parts) != 3:
            raise TraceError(f"{path}:{lineno}: {line.strip()!r}: expected "
                             f"'<hex address> READ|WRITE <cycle>'")
        try:
            addr = int(parts[0], 16)
        except ValueError:
            raise TraceError(f"{path}:{lineno}: address {parts[0]!r}: must be hexadecimal, "
                             f"e.g. 0x1f40") from None
        kind = kinds.get(parts[1].upper())
        if kind is None:
            raise TraceError(f"{path}:{lineno}: operation {parts[1]!r}: must be READ or WRITE")
        try:
            cycle = int(parts[2], 10)
        except ValueError:
            cycle = -1
        if not 0 <= cycle <= MAX_TRACE_CYCLE:
            raise TraceError(f"{path}:{lineno}: cycle {parts[2]!r}: must be a decimal integer "
                             f"in 0..{MAX_TRACE_CYCLE} (2**60)")
        if not 0 <= addr < 1 << 62:
            raise TraceError(f"{path}:{lineno}: address {parts[0]!r}: must be in 0x0.."
                             f"{(1 << 62) - 1:#x} (below 2**62)")
        addrs.append(addr)
        writes.append(kind)
        cycles.append(cycle)
    return (np.array(addrs, np.int64), np.array(writes, bool), np.array(cycles, np.int64))
