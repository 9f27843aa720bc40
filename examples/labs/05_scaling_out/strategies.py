#!/usr/bin/env python3
"""Lab 5: one training step of a model split over many chips, several ways.

For every ``--strategy`` (data, tensor, pipeline parallelism and hybrids) this plans one training
step with npulab's planner (``npulab.system_run.plan``: the device model for compute, the
network simulation for collectives) and prints, per strategy, the step time and where it goes:
compute, exposed communication (TP, PP, DP), pipeline bubble, optimizer; per-chip memory; bytes
each chip sends; scaling efficiency against one chip running the same global batch. A strategy
the model cannot be split by (e.g. ``tp=8`` with 12 heads) is listed with the reason.

It saves ``breakdown.png`` (a stacked bar per strategy) into the output directory.

    python examples/labs/05_scaling_out/strategies.py
    python examples/labs/05_scaling_out/strategies.py --system switch:8 --link-gbps 25
    python examples/labs/05_scaling_out/strategies.py --strategy dp=4 --strategy tp=4 -o out/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_STRATEGIES = ("dp=8", "dp=8,overlap_dp=false", "tp=8", "pp=8", "dp=2,tp=4", "dp=2,pp=4", "tp=4,pp=2",
                      "dp=2,tp=2,pp=2")
PARTS = ("compute", "tp", "pp", "dp", "bubble", "optimizer")


def plan_all(system_name: str, model_name: str, strategies, *, global_batch: int | None,
             seq_len: int | None, link_gbps: float | None = None, comm: str = "sim"):
    """``(system, model, rows)``: per strategy a dict with the report's numbers, or its error."""
    from hw.system.system import load_system
    from npulab.system_run import plan, resolve_model

    system = load_system(system_name, link_gbps=link_gbps)
    model = resolve_model(model_name, global_batch=global_batch, seq_len=seq_len)
    rows = []
    for text in strategies:
        try:
            result = plan(system, model, text, comm_mode=comm)
        except ValueError as exc:
            rows.append({"strategy": text, "error": str(exc)})
            continue
        r = result.report
        rows.append({
            "strategy": text, "error": None, "chips": r.n_ranks, "microbatches": r.microbatches,
            "step": r.step_s, "compute": r.compute_s, "tp": r.exposed_tp_s,
            "pp": r.exposed_pp_s, "dp": r.exposed_dp_s, "bubble": r.bubble_s,
            "optimizer": r.optimizer_s, "pipeline": r.pipeline_s,
            "memory_gb": r.memory["total"] / 1e9, "fits": r.fits,
            "sent_gb": sum(r.sent_bytes.values()) / 1e9, "grad_bytes": r.comm_bytes["dp"],
            "efficiency": result.scaling_efficiency, "baseline": result.baseline.step_s,
            "report": r,
        })
    return system, model, rows


def print_table(system, model, rows, out=sys.stdout) -> None:
    name = getattr(model, "name", str(model))
    batch = getattr(model, "global_batch", None)
    print(f"{name} on {system.name} ({system.topology.n_ranks} chips), global batch {batch}, "
          f"one training step; times in ms", file=out)
    head = (f"{'strategy':<22} {'m':>4} {'step':>9} {'compute':>9} {'tp':>8} {'pp':>7} "
            f"{'dp':>7} {'bubble':>8} {'optim':>6} {'GB/chip':>8} {'sent GB':>8} {'eff %':>6}")
    print(head, file=out)
    print("-" * len(head), file=out)
    for row in rows:
        if row["error"]:
            reason = row["error"].removeprefix("strategy: ")
            print(f"{row['strategy']:<22} not possible: {reason}", file=out)
            continue
        ms = {k: row[k] * 1e3 for k in ("step",) + PARTS}
        print(f"{row['strategy']:<22} {row['microbatches']:>4} {ms['step']:>9.2f} "
              f"{ms['compute']:>9.2f} {ms['tp']:>8.2f} {ms['pp']:>7.2f} {ms['dp']:>7.2f} "
              f"{ms['bubble']:>8.2f} {ms['optimizer']:>6.2f} {row['memory_gb']:>8.2f} "
              f"{row['sent_gb']:>8.2f} {100 * row['efficiency']:>6.1f}", file=out)
    ok = [r for r in rows if not r["error"]]
    if ok:
        print(f"one chip, same global batch: {ok[0]['baseline'] * 1e3:.2f} ms", file=out)
        dp_rows = [r for r in ok if r["report"].strategy["tp"] == 1
                   and r["report"].strategy["pp"] == 1 and r["grad_bytes"] > 0]
        for r in dp_rows[:1]:
            print(f"DP gradient all-reduce ({r['strategy']}): {int(r['grad_bytes']):,} bytes per "
                  f"replica", file=out)


def plot(rows, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if not r["error"]]
    colors = {"compute": "#4c72b0", "tp": "#dd8452", "pp": "#937860", "dp": "#c44e52",
              "bubble": "#bbbbbb", "optimizer": "#55a868"}
    labels = {"compute": "compute", "tp": "exposed TP comm", "pp": "exposed PP comm",
              "dp": "exposed DP comm", "bubble": "pipeline bubble", "optimizer": "optimizer"}
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(ok) + 2.2))
    y = list(range(len(ok)))
    left = [0.0] * len(ok)
    for part in PARTS:
        vals = [r[part] * 1e3 for r in ok]
        ax.barh(y, vals, left=left, color=colors[part], label=labels[part])
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(y, [r["strategy"] for r in ok])
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Plan one training step under several parallel strategies and compare step "
                    "time, exposed communication, pipeline bubble and per-chip memory.",
        epilog="example: python examples/labs/05_scaling_out/strategies.py --system dgx-a100 "
               "--model gpt2-small --global-batch 32")
    ap.add_argument("--system", default="dgx-a100",
                    help="a system preset, inline topology (switch:8, ring:8 ...) or system TOML "
                         "(default dgx-a100)")
    ap.add_argument("--link-gbps", type=float,
                    help="inline topologies: link bandwidth per direction, GB/s")
    ap.add_argument("--model", default="gpt2-small", help="an LLM preset (default gpt2-small)")
    ap.add_argument("--global-batch", type=int, default=32,
                    help="sequences per step (default 32)")
    ap.add_argument("--seq-len", type=int, help="sequence length (default: the preset's)")
    ap.add_argument("--strategy", action="append", metavar="dp=..,tp=..,pp=..",
                    help="repeatable; default: " + " ".join(DEFAULT_STRATEGIES))
    ap.add_argument("--comm", choices=("sim", "analytic"), default="sim",
                    help="collectives simulated with contention (default) or in closed form")
    ap.add_argument("-o", "--out", default="lab05_out", help="output directory (default lab05_out)")
    args = ap.parse_args(argv)
    for key in ("global_batch", "seq_len"):
        value = getattr(args, key)
        if value is not None and value < 1:
            ap.error(f"--{key.replace('_', '-')} {value}: must be an integer >= 1")
    try:
        system, model, rows = plan_all(args.system, args.model,
                                       args.strategy or DEFAULT_STRATEGIES,
                                       global_batch=args.global_batch, seq_len=args.seq_len,
                                       link_gbps=args.link_gbps, comm=args.comm)
    except (ValueError, OSError) as exc:
        print(f"strategies.py: error: {exc}", file=sys.stderr)
        return 2
    print_table(system, model, rows)
    if any(not r["error"] for r in rows):
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "breakdown.png"
        plot(rows, path, f"{model.name} on {system.name}")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
