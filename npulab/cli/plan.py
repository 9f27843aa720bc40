"""``npulab plan``: search the parallel plans of a training step (Alpa-style, automatic).

``npulab plan --system SPEC --model NAME --global-batch N [--chips N] [--tp 1,2,4,8] ...``
prints the best plan (its ``--strategy`` text for ``npulab system``), its step breakdown and
layer sharding, the next best plans, the throughput-memory Pareto front, each mesh shape's best
and why it loses, and the best plans re-timed on the simulated network
(:mod:`npulab.plan_run`, :mod:`compiler.parallel.search`). ``--format json`` gives everything;
``-o DIR`` writes search.json, plans.csv, pareto.csv and shapes.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from npulab.cli.system import _add_system_args, load

__all__ = ["add_parser", "main"]


def _ints(flag: str, text) -> tuple | None:
    """``"1,2,4"`` -> (1, 2, 4); a one-line error naming the flag otherwise."""
    if text is None or isinstance(text, tuple):
        return text
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected integers separated by commas, e.g. "
                         f"1,2,4,8") from None
    if not vals:
        raise ValueError(f"{flag} {text!r}: give at least one value")
    return vals


def _words(text) -> tuple:
    if isinstance(text, tuple):
        return text
    return tuple(x.strip().lower() for x in text.split(",") if x.strip())


def add_parser(subparsers) -> None:
    from compiler.parallel import model_names
    p = subparsers.add_parser(
        "plan", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="search the best parallel plan of a training step",
        description="Search data, tensor, pipeline and sequence parallelism, micro-batch size, "
                    "pipeline schedule, ZeRO stage and recomputation for a transformer on a "
                    "system: an integer program shards each layer's ops on the tensor-parallel "
                    "mesh, dynamic programming slices layers into stages, and every candidate "
                    "that could beat the best is simulated as `npulab system` would. Prints the "
                    "best plan, the throughput-memory Pareto front and why the others lose.",
        epilog="examples:\n"
               "  npulab plan --system dgx-a100 --model gpt2-small --global-batch 64\n"
               "  npulab plan --system selene --model gpt3-175b --global-batch 64 --chips 64\n"
               "  npulab plan --system selene-3072 --model gpt3-175b --global-batch 1536 "
               "--chips 1024 --compare dp=8,tp=8,pp=16,recompute=full@1\n"
               f"\nmodels: {', '.join(model_names())}\n"
               "Rerun a found plan with: npulab system --system ... --strategy TEXT "
               "--micro-batch N --global-batch N --comm analytic (and --sharding ilp when its "
               "layer sharding is not Megatron-LM's)")
    _add_system_args(p)
    p.add_argument("--model", "-m", required=True, help="an LLM preset")
    p.add_argument("--global-batch", metavar="N[,N...]",
                   help="sequences per step (default: the model's); several: one search each, "
                        "compared by throughput and goodput")
    p.add_argument("--noise-scale", type=float, metavar="B",
                   help="gradient noise scale in sequences (McCandlish et al. 2018): rank the "
                        "global batches by goodput = throughput x statistical efficiency")
    p.add_argument("--input", metavar="KEY=VALUE,...",
                   help="the input pipeline each plan waits for (see npulab system --input)")
    p.add_argument("--seq-len", type=int, help="sequence length")
    p.add_argument("--chips", type=int, help="plan for the first N chips (default: all)")
    p.add_argument("--tp", help="tensor-parallel degrees to try "
                   "(default: every divisor of the chips)")
    p.add_argument("--pp", help="pipeline depths to try (default: all)")
    p.add_argument("--micro-batch", default=(1, 2, 4, 8),
                   help="micro-batch sizes to try (default 1,2,4,8)")
    p.add_argument("--zero", default=(0, 1, 2, 3),
                   help="ZeRO stages to try (default 0,1,2,3)")
    p.add_argument("--recompute", default=("none", "selective", "full"),
                   help="recomputation to try (default none,selective,full)")
    p.add_argument("--schedules", default=("1f1b", "gpipe", "interleaved"),
                   help="pipeline schedules to try (default 1f1b,gpipe,interleaved)")
    p.add_argument("--interleave", default=(2, 3, 4),
                   help="chunks per rank for the interleaved schedule (default 2,3,4)")
    p.add_argument("--even-stages", action="store_true",
                   help="split layers evenly over stages (default: the stage-slicing DP may "
                        "give stages different layer counts)")
    p.add_argument("--comm", choices=("analytic", "sim"), default="analytic",
                   help="collectives during the search: closed form (default, fast) or "
                        "simulated with contention")
    p.add_argument("--verify", type=int, default=3, metavar="K",
                   help="re-time the K best plans on the simulated network (default 3)")
    p.add_argument("--compare", action="append", default=[], metavar="STRATEGY[@MB]",
                   help="also time a hand-written strategy (e.g. a published one) the same way; "
                        "repeatable")
    p.add_argument("--top", type=int, default=10, help="plans listed (default 10)")
    p.add_argument("--output", "-o", metavar="DIR",
                   help="write search.json, plans.csv, pareto.csv and shapes.csv here")


def _gb(n) -> str:
    return f"{n / 1e9:.1f}"


def _tok(r) -> str:
    return f"{r.tokens_per_s:,.0f}"


def _print(ps, args) -> None:
    res, best = ps.result, ps.best
    r = best.report
    print(f"npulab plan: {res.model} on {ps.system.name} ({ps.n_devices:,} of "
          f"{ps.system.topology.n_ranks:,} chips), global batch {res.global_batch:,}, "
          f"collectives {ps.comm_mode}")
    print(f"searched {res.space:,} strategies in {res.search_s:.1f} s: {len(res.evaluated):,} "
          f"simulated, {res.pruned_memory:,} over memory, {res.pruned_bound:,} ruled out by "
          f"their bound; {res.ilps} sharding ILPs over up to {res.sharding_space:,} "
          f"assignments per layer")
    print()
    ilp = "" if best.layer_plan.is_megatron() or best.strategy.tp == 1 else " --sharding ilp"
    print(f"best plan: --strategy {best.text} --micro-batch {best.micro_batch}{ilp}")
    bd = r.breakdown()
    rows = [("step time", f"{r.step_s * 1e3:,.1f} ms ({r.microbatches} micro-batches per "
                          f"replica)"),
            ("  compute", f"{bd['compute'] * 1e3:,.1f} ms (recompute "
                          f"{r.recompute_s * 1e3:,.1f})"),
            ("  exposed comm", f"tp {bd['tp'] * 1e3:,.1f}, pp {bd['pp'] * 1e3:,.1f}, dp "
                               f"{bd['dp'] * 1e3:,.1f} ms"),
            ("  bubble / optimizer", f"{bd['bubble'] * 1e3:,.1f} / "
                                     f"{bd['optimizer'] * 1e3:,.1f} ms"),
            ("throughput", f"{_tok(r)} tokens/s" + (f", MFU {100 * r.mfu:.1f} %"
                                                    if r.mfu is not None else "")),
            ("memory per chip", f"{_gb(r.memory['total'])} GB of "
                                f"{_gb(r.device_mem_bytes or 0)} GB"),
            ("layer sharding", ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in
                                         best.layer_plan.choices.items())
             + (" (Megatron-LM's)" if best.layer_plan.is_megatron() and best.strategy.tp > 1
                else ""))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print()
    print(f"top plans (of {len(res.evaluated)} simulated):")
    print(f"  {'#':>3} {'step ms':>10} {'tokens/s':>12} {'MFU %':>6} {'mem GB':>7}  strategy "
          f"(micro-batch)")
    for i, c in enumerate(res.evaluated[:args.top], 1):
        mfu = f"{100 * c.report.mfu:.1f}" if c.report.mfu is not None else "-"
        print(f"  {i:>3} {c.step_s * 1e3:>10,.1f} {_tok(c.report):>12} {mfu:>6} "
              f"{_gb(c.memory_bytes):>7}  {c.label}")
    print()
    print("throughput-memory Pareto front (least memory first):")
    for c in res.pareto:
        print(f"  {_gb(c.memory_bytes):>7} GB  {c.step_s * 1e3:>10,.1f} ms  {c.label}")
    print()
    print("mesh shapes (dp x tp x pp): their best plan and why it loses")
    for row in res.losers[:max(args.top, 12)]:
        step = f"{row['step_s'] * 1e3:,.1f} ms" if row.get("step_s") else "-"
        print(f"  {row['dp']:>4} x {row['tp']:>2} x {row['pp']:>3}  {step:>12}  {row['reason']}")
    if ps.verified:
        print()
        print("re-timed on the simulated network:")
        for v in ps.verified:
            print(f"  {v['step_s'] * 1e3:>10,.1f} -> {v['sim_step_s'] * 1e3:>10,.1f} ms  "
                  f"{v['strategy']} (micro-batch {v['micro_batch']})")
    for c in ps.compared:
        print()
        fits = "" if c["fits"] in (None, True) else ", does NOT fit"
        print(f"compared: {c['strategy']} (micro-batch {c['micro_batch']}): "
              f"{c['step_s'] * 1e3:,.1f} ms, {c['tokens_per_s']:,.0f} tokens/s, "
              f"{_gb(c['memory_bytes'])} GB{fits}; the best plan is {c['best_speedup']:.3f}x "
              f"faster")


def _write(ps, out_dir, table=None) -> None:
    from hw.files import check_output_dir
    d = check_output_dir(out_dir, flag="-o", error=ValueError)
    d.mkdir(parents=True, exist_ok=True)
    res = ps.result
    (d / "search.json").write_text(json.dumps(ps.to_dict(), indent=2, default=str) + "\n")
    cols = ["strategy", "micro_batch", "step_s", "tokens_per_s", "mfu", "memory_bytes",
            "bound_s"]
    for name, cands in (("plans.csv", res.evaluated), ("pareto.csv", res.pareto)):
        with open(d / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(cols)
            for c in cands:
                w.writerow([c.text, c.micro_batch, repr(c.step_s), repr(c.report.tokens_per_s),
                            "" if c.report.mfu is None else repr(c.report.mfu),
                            repr(c.memory_bytes), repr(c.bound_s)])
    if table:
        with open(d / "batches.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, list(table[0]))
            w.writeheader()
            for row in table:
                w.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    with open(d / "shapes.csv", "w", newline="") as fh:
        keys = ["dp", "tp", "pp", "strategy", "micro_batch", "step_s", "bound_s",
                "memory_bytes", "reason"]
        w = csv.DictWriter(fh, keys, extrasaction="ignore")
        w.writeheader()
        for row in res.losers:
            w.writerow({k: row.get(k) for k in keys})


def main(args) -> int:
    from compiler.parallel.search import SearchSpace
    from npulab.cli.common import UserError
    from npulab.plan_run import goodput_table, search
    from npulab.system_run import input_pipeline_for
    from npulab.progress import Progress
    from npulab.system_run import resolve_model
    try:
        from compiler.parallel import model_names
        if args.model not in model_names():
            raise ValueError(f"--model {args.model!r}: the plan search splits transformer "
                             f"layers; allowed: {', '.join(model_names())}")
        batches = _ints("--global-batch", args.global_batch)
        for flag, v in [("--global-batch", b) for b in batches or ()] + [
                ("--seq-len", args.seq_len), ("--top", args.top)]:
            if v is not None and v < 1:
                raise ValueError(f"{flag} {v}: must be an integer >= 1")
        if args.noise_scale is not None and not 0 < args.noise_scale < float("inf"):
            raise ValueError(f"--noise-scale {args.noise_scale}: must be a finite number > 0")
        if args.output:
            from hw.files import check_output_dir
            check_output_dir(args.output, flag="-o", error=ValueError)
        system = load(args)
        model = resolve_model(args.model, seq_len=args.seq_len)
        ip = input_pipeline_for(system, args.input) if args.input is not None else None
        space = SearchSpace(tp=_ints("--tp", args.tp), pp=_ints("--pp", args.pp),
                            micro_batch=_ints("--micro-batch", args.micro_batch),
                            zero=_ints("--zero", args.zero), recompute=_words(args.recompute),
                            schedules=_words(args.schedules),
                            interleave=_ints("--interleave", args.interleave),
                            uneven=not args.even_stages)
        runs = [search(system, model, n_devices=args.chips, global_batch=b, space=space,
                       comm_mode=args.comm, verify=args.verify, compare=tuple(args.compare),
                       progress=Progress(), input_pipeline=ip)
                for b in (batches or (None,))]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    table = goodput_table(runs, args.noise_scale) if len(runs) > 1 or args.noise_scale else None
    if table:
        best = max(range(len(runs)), key=lambda i: (table[i]["goodput"], -i))
        ps = runs[best]
    else:
        ps = runs[0]
    if args.output:
        _write(ps, args.output, table)
    if args.format == "json":
        out = ps.to_dict()
        if table:
            out["global_batches"] = table
            out["noise_scale"] = args.noise_scale
        json.dump(out, sys.stdout, indent=2, default=str)
        print()
        return 0
    _print(ps, args)
    if table:
        print()
        eff = f"noise scale {args.noise_scale:,.0f}" if args.noise_scale else "no noise scale: " \
            "efficiency 1"
        print(f"global batches ({eff}; efficiency against the smallest batch, Pollux):")
        print(f"  {'batch':>7} {'samples/s':>11} {'efficiency':>10} {'goodput':>11}  best plan")
        for row in table:
            mark = "  <- best goodput" if row["global_batch"] == ps.result.global_batch else ""
            print(f"  {row['global_batch']:>7,} {row['samples_per_s']:>11,.1f} "
                  f"{row['efficiency']:>10.3f} {row['goodput']:>11,.1f}  {row['strategy']} "
                  f"(micro-batch {row['micro_batch']}){mark}")
    return 0
