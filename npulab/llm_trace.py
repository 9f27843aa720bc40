"""LLM request traces (``npulab llm serve``'s input): a CSV of ``arrival_s, prompt_tokens,
output_tokens`` (:func:`read_trace`) or a seeded Poisson process (:func:`poisson_trace`), and
the check every trace passes before it is served (:func:`checked_trace`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.frontends.llm_step import check_int

__all__ = ["Request", "TraceError", "read_trace", "poisson_trace", "checked_trace"]


class TraceError(ValueError):
    """A bad trace file or generator setting: the message names the file, row, key and value."""


@dataclass(frozen=True)
class Request:
    """One request: it arrives at ``arrival_s`` with ``prompt`` tokens and generates
    ``output`` tokens."""

    id: int
    arrival_s: float
    prompt: int
    output: int


_TRACE_KEYS = ("arrival_s", "prompt_tokens", "output_tokens")


def read_trace(path: str | Path) -> list[Request]:
    """A CSV trace: a header with ``arrival_s``, ``prompt_tokens`` and ``output_tokens`` (other
    columns are ignored), one request per row, arrival times in seconds."""
    from hw.files import csv_table, read_text   # (a byte-order mark and bad encodings handled)
    p = Path(path)
    header, rows = csv_table(read_text(p, "trace CSV", missing="no such file", error=TraceError))
    if header is None:
        raise TraceError(f"{p}: empty; expected a header {','.join(_TRACE_KEYS)}")
    missing = [k for k in _TRACE_KEYS if k not in header]
    if missing:
        raise TraceError(f"{p}: the header lacks {', '.join(missing)}; expected columns "
                         f"{', '.join(_TRACE_KEYS)}")
    col = {k: header.index(k) for k in _TRACE_KEYS}
    out = []
    for line, row in rows:
        vals = {}
        for key, i in col.items():
            raw = row[i].strip() if i < len(row) else ""
            try:
                v = float(raw) if key == "arrival_s" else int(raw)
            except ValueError:
                raise TraceError(f"{p}: row {line}: {key} = {raw!r}: must be "
                                 + ("a number of seconds" if key == "arrival_s"
                                    else "a whole number of tokens")) from None
            if key == "arrival_s" and not (math.isfinite(v) and 0 <= v <= 1e9):
                raise TraceError(f"{p}: row {line}: arrival_s = {raw}: must be in 0..1e9 s")
            if key != "arrival_s" and not 1 <= v <= 1 << 24:
                raise TraceError(f"{p}: row {line}: {key} = {raw}: must be in 1..{1 << 24:,}")
            vals[key] = v
        out.append(Request(len(out), vals["arrival_s"], vals["prompt_tokens"],
                           vals["output_tokens"]))
    if not out:
        raise TraceError(f"{p}: no requests after the header")
    if len(out) > 1_000_000:
        raise TraceError(f"{p}: {len(out):,} requests: at most 1,000,000")
    return sorted(out, key=lambda r: (r.arrival_s, r.id))


def _length(value, key: str) -> tuple[int, int]:
    """A token length: an integer, or ``(lo, hi)`` for uniform integers in lo..hi."""
    lo, hi = (value, value) if isinstance(value, int) and not isinstance(value, bool) else (
        tuple(value) if isinstance(value, (tuple, list)) and len(value) == 2 else (None, None))
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 24:
            raise TraceError(f"{key} = {value!r}: must be a token count in 1..{1 << 24:,} or "
                             f"a range lo:hi")
    if hi < lo:
        raise TraceError(f"{key} = {value!r}: the range end must be >= its start")
    return lo, hi


def poisson_trace(requests: int, rate: float, prompt=512, output=128,
                  seed: int = 0) -> list[Request]:
    """``requests`` arrivals of a Poisson process of ``rate`` requests/s (exponential gaps,
    the first at 0), prompt and output lengths fixed or uniform over ``(lo, hi)``; seeded."""
    check_int("requests", requests, 1, 1_000_000)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1e6:
        raise TraceError(f"rate = {rate!r}: must be a number of requests/s in (0, 1e6]")
    check_int("seed", seed, 0, 2**63 - 1)
    p, o = _length(prompt, "prompt"), _length(output, "output")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, requests)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    prompts = rng.integers(p[0], p[1] + 1, requests)
    outputs = rng.integers(o[0], o[1] + 1, requests)
    return [Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i]))
            for i in range(requests)]


def checked_trace(trace) -> list[Request]:
    """The trace's requests, each checked as :func:`read_trace` checks a row, in arrival
    order (ties by id)."""
    if not isinstance(trace, (list, tuple)) or not trace:
        raise TraceError("the trace has no requests")
    ids = set()
    for r in trace:
        if not isinstance(r, Request):
            raise TraceError(f"trace entry {r!r}: must be a Request")
        a = r.arrival_s
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not (
                math.isfinite(a) and 0 <= a <= 1e9):
            raise TraceError(f"request {r.id}: arrival_s = {a!r}: must be in 0..1e9 s")
        for key in ("prompt", "output"):
            check_int(f"request {r.id}: {key}", getattr(r, key), 1, 1 << 24)
        if r.id in ids:
            raise TraceError(f"request id {r.id!r} appears twice; ids must be unique")
        ids.add(r.id)
    return sorted(trace, key=lambda r: (r.arrival_s, r.id))
