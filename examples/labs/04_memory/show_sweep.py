#!/usr/bin/env python3
"""Lab 4: print a sweep's points.csv as a short table and recompute its Pareto front.

Reads ``DIR/points.csv`` written by ``npulab sweep report DIR`` and prints one row per point:
the axis values, latency, area, energy, DRAM bytes, DRAM stall cycles and the report's
``pareto`` flag, next to ``front``: whether the point is non-dominated among the done, feasible
points of its workload in the objectives given (default ``latency_s,area_mm2``, all minimised),
recomputed here by brute force (a point is dominated when another is at least as good in every
objective and better in one).

    python examples/labs/04_memory/show_sweep.py lab04_out/sweep
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def read_points(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def non_dominated(points: list[dict], objectives: list[str]) -> set[str]:
    """Ids of the done, feasible points no other point of the same workload dominates."""
    ok = [p for p in points if p["status"] == "done" and p["feasible"] == "true"]
    front = set()
    for p in ok:
        mine = [float(p[o]) for o in objectives]
        dominated = False
        for q in ok:
            if q is p or q["workload"] != p["workload"]:
                continue
            other = [float(q[o]) for o in objectives]
            if all(b <= a for a, b in zip(mine, other)) and any(b < a for a, b in zip(mine, other)):
                dominated = True
                break
        if not dominated:
            front.add(p["id"])
    return front


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Print a sweep's points.csv compactly and recompute the Pareto front.")
    ap.add_argument("dir", help="the sweep directory (after 'npulab sweep report DIR')")
    ap.add_argument("--objectives", default="latency_s,area_mm2",
                    help="comma-separated metrics, all minimised (default latency_s,area_mm2)")
    args = ap.parse_args(argv)
    path = Path(args.dir) / "points.csv"
    if not path.is_file():
        print(f"show_sweep.py: error: {path}: no such file; run 'npulab sweep report {args.dir}' "
              f"first", file=sys.stderr)
        return 2
    fields, points = read_points(path)
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    missing = [o for o in objectives if o not in fields]
    if missing or not objectives:
        print(f"show_sweep.py: error: --objectives {args.objectives!r}: {missing[0] if missing else ''!r} "
              f"is not a column of {path}", file=sys.stderr)
        return 2
    start = fields.index("workload") + 1
    axes = fields[start:fields.index("status")]
    front = non_dominated(points, objectives)
    widths = [max(len(a), 9) for a in axes]
    print("  ".join(f"{a:<{w}}" for a, w in zip(axes, widths))
          + f"  {'latency us':>10} {'area mm2':>8} {'energy uJ':>9} {'DRAM MB':>8} "
            f"{'DRAM stall':>10}  pareto front")
    for p in points:
        cells = "  ".join(f"{p[a]:<{w}}" for a, w in zip(axes, widths))
        if p["status"] != "done":
            print(f"{cells}  {p['status']}: {p['error']}")
            continue
        print(f"{cells}  {float(p['latency_s']) * 1e6:>10.1f} {float(p['area_mm2']):>8.3f} "
              f"{float(p['energy_j']) * 1e6:>9.1f} {int(p['dram_bytes']) / 1e6:>8.2f} "
              f"{int(p['stall_dram_cycles']):>10,}  {'yes' if p['pareto'] == 'true' else '-':<6} "
              f"{'yes' if p['id'] in front else '-'}")
    agree = all((p["pareto"] == "true") == (p["id"] in front) for p in points)
    print(f"{len(front)} points on the front of ({', '.join(objectives)}); the report's pareto "
          f"column {'agrees' if agree else 'DISAGREES'} with the brute-force filter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
