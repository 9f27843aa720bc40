"""Sweep throughput: a 1,000-point design-space sweep on all cores, and the same points serially.

The sweep: ResNet-18 at 32x32 input (a small CNN, ~0.3-1 s per point with full-chip native
timing) over 5 array shapes x 2 dataflows x 5 scratchpad sizes x 4 clocks x 5 DRAM presets =
1,000 points, run with ``npulab.sweep.run_sweep`` (executor ``local``: a process pool of
``--jobs`` workers, default all cores), then the same points with executor ``serial`` (in one
process) for the parallel speed-up. Both runs write their results to SQLite as they go, as a
real sweep does; the benchmark checks they stored identical metrics.

Prints wall time, points/s and the mean time per point (measured inside the workers) for both
runs, and the speed-up. Run from the repo root (about 5 minutes for the pool and 7 for the serial run on 2 cores; ``--points N``
runs the first N points, ``--serial N`` only the first N points serially; ``busy workers`` is
the time spent in points over the wall time)::

    python benchmarks/bench_sweep.py [--points 1000] [--serial N] [--jobs J]

Writes ``benchmarks/results/bench_sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from benchutil import machine, table, write_results

from npulab.sweep import expand, run_sweep, spec_from_dict

# DRAM outermost, shape fastest: the first 200 points (``--serial 200``) are every shape x
# dataflow x SRAM x clock combination with the first DRAM preset.
AXES = [
    {"key": "dram.preset", "values": ["ddr4-3200", "lpddr4-3200", "lpddr5-6400", "hbm2", "hbm3"]},
    {"key": "chip.clock_mhz", "values": [500, 800, 1000, 1400]},
    {"key": "sram.capacity_kib", "range": {"start": 64, "stop": 1024, "factor": 2}},
    {"key": "array.dataflow", "values": ["os", "ws"]},
    {"name": "shape", "keys": ["array.rows", "array.cols"],
     "values": [[8, 8], [16, 16], [32, 32], [64, 64], [16, 64]]},
]


def spec_for():
    data = {"sweep": {"name": "bench", "timing": "native", "tech": "16nm"},
            "workload": [{"model": "resnet18", "image_size": 32}], "axis": AXES}
    return spec_from_dict(data, "bench_sweep.py")


def stored(out: Path) -> tuple[dict, list[float]]:
    con = sqlite3.connect(out / "sweep.sqlite")
    try:
        rows = con.execute("SELECT id, status, metrics, elapsed_s FROM points").fetchall()
    finally:
        con.close()
    metrics = {pid: m for pid, status, m, _ in rows if status == "done"}
    elapsed = [e for _, _, _, e in rows if e is not None]
    return metrics, elapsed


def run(spec, out: Path, executor: str, jobs: int | None, limit: int) -> dict:
    start = time.perf_counter()
    summary = run_sweep(spec, out, executor=executor, jobs=jobs, limit=limit)
    wall = time.perf_counter() - start
    metrics, elapsed = stored(out)
    return {"executor": executor, "points": summary.ran, "done": summary.done,
            "failed": summary.failed, "wall_s": wall, "points_per_s": summary.ran / wall,
            "mean_point_s": sum(elapsed) / len(elapsed),
            "busy_workers": sum(elapsed) / wall, "metrics": metrics}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=1000, help="points of the sweep (<= 1000)")
    ap.add_argument("--serial", type=int, help="serial run: only the first N points")
    ap.add_argument("--jobs", type=int, help="local executor workers (default: all cores)")
    args = ap.parse_args()
    spec = spec_for()
    total = len(expand(spec))
    points = min(args.points, total)
    serial_n = min(args.serial or points, points)
    jobs = args.jobs or os.cpu_count()
    print(f"bench_sweep: {points} points (of {total}), local executor with {jobs} workers, "
          f"then {serial_n} points serially")
    with tempfile.TemporaryDirectory() as tmp:
        # load the JIT cache and imports once, as any real session would
        run_sweep(spec_from_dict({"workload": [{"model": "resnet18", "image_size": 32}]},
                                 "warm.toml"), Path(tmp) / "warm", executor="serial")
        par = run(spec, Path(tmp) / "local", "local", jobs, points)
        ser = run(spec, Path(tmp) / "serial", "serial", None, serial_n)
    same = all(par["metrics"].get(k) == v for k, v in ser["metrics"].items())
    rows = []
    for r in (par, ser):
        rows.append([r["executor"], r["points"], r["failed"], f"{r['wall_s']:.1f}",
                     f"{r['points_per_s']:.2f}", f"{r['mean_point_s'] * 1e3:.0f}",
                     f"{r['busy_workers']:.2f}"])
    print(table(["executor", "points", "failed", "wall s", "points/s", "mean ms/point",
                 "busy workers"], rows))
    speedup = par["points_per_s"] / ser["points_per_s"]
    print(f"parallel speed-up (points/s): {speedup:.2f}x on {jobs} workers; serial and local "
          f"metrics identical: {same}")
    result = {"machine": machine(), "jobs": jobs, "speedup": speedup, "identical": same,
              "runs": [{k: v for k, v in r.items() if k != "metrics"} for r in (par, ser)]}
    print(f"wrote {write_results('bench_sweep', result)}")
    print(json.dumps(result["runs"], indent=1))


if __name__ == "__main__":
    main()
