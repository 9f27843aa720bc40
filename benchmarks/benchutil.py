"""Small helpers shared by the hand-run benchmark scripts in ``benchmarks/``: best-of-N timing,
plain-text tables, geometric means and the JSON results files in ``benchmarks/results/``."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def best_of(fn: Callable[[], object], repeat: int, warmup: int = 1, inner: int = 1) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` timed runs (each ``inner`` calls,
    averaged) after ``warmup`` untimed calls. Best-of filters out noise from other processes."""
    for _ in range(warmup):
        fn()
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def calibrated_inner(fn: Callable[[], object], min_seconds: float = 0.02) -> int:
    """How many calls of a fast ``fn`` make one timed run last at least ``min_seconds``."""
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(10_000, math.ceil(min_seconds / one)))


def geomean(values: Iterable[float]) -> float:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned plain-text table (first column left-aligned)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg_at_start": load}


def write_results(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path
