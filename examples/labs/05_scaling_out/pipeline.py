#!/usr/bin/env python3
"""Lab 5: draw a pipeline-parallel schedule and measure its bubble.

``p`` stages each run the forward (``--tf``) and backward (``--tb``) of ``m`` micro-batches in
the order a schedule prescribes: GPipe (all forwards, then all backwards; Huang et al. 2019) or
1F1B (PipeDream-Flush: a few warm-up forwards, then one forward / one backward alternately;
Narayanan et al. 2021 §2.2.1). The task order per stage is npulab's
(``compiler.parallel.pipeline.schedule_order``); this script replays it with explicit start times
(a task starts when its stage is free and its input has arrived: the forward of micro-batch j on
stage s after stage s-1's, the backward after stage s+1's) and prints, per schedule, the
makespan, each stage's idle fraction (the bubble), the closed form ``(p-1)/(m+p-1)`` and the most
activations a stage holds at once. It checks its makespan against npulab's
``simulate_pipeline`` and saves ``pipeline.png`` (one row per stage, F and B boxes).

    python examples/labs/05_scaling_out/pipeline.py --stages 4 --microbatches 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def replay(p: int, m: int, schedule: str, tf: float, tb: float):
    """Start/end of every task: a list of ``(stage, is_backward, micro_batch, start, end)``
    plus the peak number of stored activations per stage."""
    from compiler.parallel.pipeline import schedule_order

    orders = [schedule_order(p, m, schedule, 1, s) for s in range(p)]
    f_end, b_end = {}, {}
    free = [0.0] * p
    ptr = [0] * p
    tasks, live, peak = [], [0] * p, [0] * p
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for s in range(p):
            while ptr[s] < len(orders[s]):
                back, _, j = orders[s][ptr[s]]
                if back:
                    deps = [f_end.get((s, j))] + ([b_end.get((s + 1, j))] if s < p - 1 else [])
                else:
                    deps = [f_end.get((s - 1, j))] if s > 0 else [0.0]
                if any(d is None for d in deps):
                    break
                start = max([free[s]] + deps)
                end = start + (tb if back else tf)
                free[s] = end
                (b_end if back else f_end)[(s, j)] = end
                live[s] += -1 if back else 1
                peak[s] = max(peak[s], live[s])
                tasks.append((s, back, j, start, end))
                ptr[s] += 1
                left -= 1
                moved = True
        if not moved:
            raise RuntimeError(f"{schedule}: schedule deadlocked")
    return tasks, peak


def summarize(p: int, m: int, schedule: str, tf: float, tb: float) -> dict:
    from compiler.parallel.formulas import bubble_fraction
    from compiler.parallel.pipeline import simulate_pipeline

    tasks, peak = replay(p, m, schedule, tf, tb)
    makespan = max(t[4] for t in tasks)
    busy = m * (tf + tb)
    npulab = simulate_pipeline(tf, tb, m, p=p, schedule=schedule)
    return {"schedule": schedule, "tasks": tasks, "makespan": makespan,
            "bubble": 1.0 - busy / makespan, "formula": bubble_fraction(p, m),
            "peak": peak, "npulab_makespan": npulab.makespan_s,
            "npulab_peak": [int(x) for x in npulab.max_in_flight]}


def plot(results, p: int, path: Path, tf: float, tb: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 1.0 + 0.55 * p * len(results)),
                             squeeze=False)
    for ax, res in zip(axes[:, 0], results):
        for s, back, j, start, end in res["tasks"]:
            ax.barh(s, end - start, left=start, color="#dd8452" if back else "#4c72b0",
                    edgecolor="white")
            ax.text((start + end) / 2, s, f"{'B' if back else 'F'}{j}", ha="center",
                    va="center", fontsize=7, color="white")
        ax.set_yticks(range(p), [f"stage {s}" for s in range(p)])
        ax.invert_yaxis()
        ax.set_xlim(0, max(r["makespan"] for r in results))
        ax.set_title(f"{res['schedule']}: makespan {res['makespan']:g}, bubble "
                     f"{100 * res['bubble']:.1f} % (F = {tf:g}, B = {tb:g} time units)",
                     fontsize=9)
    axes[-1, 0].set_xlabel("time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Replay GPipe and 1F1B pipeline schedules, print the bubble against "
                    "(p-1)/(m+p-1) and draw them.")
    ap.add_argument("--stages", "-p", type=int, default=4, help="pipeline stages (default 4)")
    ap.add_argument("--microbatches", "-m", type=int, default=8,
                    help="micro-batches per step (default 8)")
    ap.add_argument("--schedule", choices=("gpipe", "1f1b", "both"), default="both")
    ap.add_argument("--tf", type=float, default=1.0, help="forward time per stage (default 1)")
    ap.add_argument("--tb", type=float, default=2.0, help="backward time per stage (default 2)")
    ap.add_argument("-o", "--out", default="lab05_out", help="output directory (default lab05_out)")
    args = ap.parse_args(argv)
    for key, lo in (("stages", 1), ("microbatches", 1)):
        value = getattr(args, key)
        if value < lo or value > 64:
            ap.error(f"--{key} {value}: must be an integer in {lo}..64")
    for key in ("tf", "tb"):
        value = getattr(args, key)
        if not value > 0 or value > 1e6:
            ap.error(f"--{key} {value}: must be a number in (0, 1e6]")
    schedules = ("gpipe", "1f1b") if args.schedule == "both" else (args.schedule,)
    p, m = args.stages, args.microbatches
    results = [summarize(p, m, s, args.tf, args.tb) for s in schedules]
    print(f"pipeline: p = {p} stages, m = {m} micro-batches, F = {args.tf:g}, B = {args.tb:g}; "
          f"ideal (no bubble) m(F+B) = {m * (args.tf + args.tb):g}")
    print(f"{'schedule':<8} {'makespan':>9} {'(m+p-1)(F+B)':>13} {'bubble %':>9} "
          f"{'(p-1)/(m+p-1) %':>16} {'npulab makespan':>16}  peak activations per stage")
    for r in results:
        print(f"{r['schedule']:<8} {r['makespan']:>9g} {(m + p - 1) * (args.tf + args.tb):>13g} "
              f"{100 * r['bubble']:>9.2f} {100 * r['formula']:>16.2f} "
              f"{r['npulab_makespan']:>16g}  {' '.join(str(x) for x in r['peak'])}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pipeline.png"
    plot(results, p, path, args.tf, args.tb)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
