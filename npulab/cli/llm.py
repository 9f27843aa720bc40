"""``npulab llm``: LLM inference on simulated chips (:mod:`npulab.llm_run`).

``npulab llm layer --model M --system S --tp P --batch B --phase prefill --prompt N`` (or
``--phase decode --kv-len T``) prints one decoder layer's kernels on one tensor-parallel rank:
each kernel's latency (device time + launch overhead), what bounds it, its FLOPs and DRAM
bytes, and the total. ``--format json`` gives ``ops`` (a list of ``{"name", "latency_s",
...}``) and ``total_s``; ``--format csv`` one row per kernel.

``npulab llm run --model M --system S --tp P --batch B --prompt N --output-tokens K`` runs
one batch of requests: the prefill (time to first token), ``K - 1`` decode steps (time per
output token), end-to-end latency, tokens/s, weights and KV cache per chip against its memory, and each
phase's time per kernel summed over the layers.

``npulab llm serve [TRACE.csv] --policy static|continuous|chunked|disaggregated`` runs a
request trace (or a seeded Poisson process) through a batching scheduler
(:mod:`npulab.llm_serve`) and prints latency percentiles, throughput, goodput and KV-cache
occupancy; ``--rates`` sweeps the load; ``-o DIR`` writes the per-request and per-iteration
CSVs, a Perfetto timeline and an HTML report (:mod:`npulab.llm_report`).

``--model`` is a preset (``npulab llm models`` lists them) or a TOML file with an ``[llm]``
table (``--llm-config FILE`` is the same).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

__all__ = ["add_parser", "main"]

FORMATS = ("table", "json", "csv")
DEFAULT_SYSTEM = "a100x4"


def _common(p: argparse.ArgumentParser, launch: str = "eager") -> None:
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", "-m", default="gpt3-175b",
                       help="an LLM preset (npulab llm models) or a TOML file with an [llm] "
                            "table (default gpt3-175b)")
    model.add_argument("--llm-config", metavar="FILE", help="a TOML file with an [llm] table")
    p.add_argument("--system", "-s", default=DEFAULT_SYSTEM, metavar="PRESET|FILE",
                   help=f"a system preset or TOML file (default {DEFAULT_SYSTEM}: 4 simulated "
                        f"a100_like chips on NVLink), or one chip: a chip preset or TOML file")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel chips (default 1)")
    p.add_argument("--ep", type=int, default=1,
                   help="MoE: expert-parallel degree (default 1): within the tensor-parallel "
                        "group (ep divides tp), or with --tp 1 over ep chips with data-parallel "
                        "attention and all-to-alls")
    p.add_argument("--batch", "-b", type=int, default=1, help="sequences in the batch")
    p.add_argument("--kv-block", type=int, metavar="TOKENS",
                   help="paged KV-cache block size: decode attention reads whole blocks "
                        "(default: 1 for llm layer, 16 for llm run)")
    p.add_argument("--launch", choices=("eager", "graph"), default=launch,
                   help=f"eager: each kernel pays the chip's launch overhead (PyTorch eager, "
                        f"what LLMCompass measures); graph: none (kernels captured in a CUDA "
                        f"graph, as vLLM serves); default {launch}")
    p.add_argument("--weight-bits", type=int, choices=(16, 8, 4), default=16,
                   help="weight-only quantization: the projections' and FFN's weights stored "
                        "in 8 or 4 bits, widened as loaded (default 16)")
    p.add_argument("--kv-bits", type=int, choices=(16, 8), default=16,
                   help="KV cache stored in 8 bits (fp8) or 16 (default)")
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="worker processes simulating distinct kernels (default: all cores)")
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="stdout format")


def _placement(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kv-placement", choices=("auto", "dram", "l2"), default="auto",
                   help="where the KV cache lives: auto (the chip's L2 when the whole cache fits "
                        "half of it, else DRAM; default), dram, or l2")


def add_parser(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "llm", formatter_class=fmt, help="LLM inference: a layer's kernels, a batch's prefill "
                                         "and decode",
        description="LLM inference on simulated chips: each kernel of a decoder layer runs "
                    "through the chip simulation, each all-reduce over the system's network.",
        epilog="examples:\n"
               "  npulab llm layer --model gpt3-175b --system a100x4 --tp 4 --batch 8 "
               "--prompt 2048 --phase prefill\n"
               "  npulab llm layer --model gpt3-175b --system a100x4 --tp 4 --batch 8 "
               "--phase decode --kv-len 3072 --format json\n"
               "  npulab llm run --model llama2-13b --system a100x4 --tp 2 --batch 16 "
               "--prompt 512 --output-tokens 64\n"
               "  npulab llm models")
    sub = p.add_subparsers(dest="llm_command", metavar="SUBCOMMAND", required=True)
    lay = sub.add_parser("layer", formatter_class=fmt,
                         help="one decoder layer, one phase: per-kernel breakdown",
                         description="Time one decoder layer of a prefill or decode step on "
                                     "one tensor-parallel rank, kernel by kernel.")
    _common(lay)
    lay.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    _placement(lay)
    lay.add_argument("--prompt", type=int, default=2048,
                     help="prefill: prompt tokens per sequence (default 2048)")
    lay.add_argument("--kv-len", type=int, default=2048,
                     help="decode: tokens already in each sequence's KV cache (default 2048)")
    run = sub.add_parser("run", formatter_class=fmt,
                         help="one batch of requests: prefill + decode steps",
                         description="Run one batch of equal requests: prefill, then decode "
                                     "steps; time to first token, time per output token, "
                                     "throughput, memory.")
    _common(run)
    run.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    _placement(run)
    run.add_argument("--prompt", type=int, default=512, help="prompt tokens (default 512)")
    run.add_argument("--output-tokens", type=int, default=32,
                     help="tokens generated per sequence (default 32)")
    srv = sub.add_parser(
        "serve", formatter_class=fmt, help="serve a request trace: batching scheduler, TTFT, "
                                           "TPOT, throughput",
        description="Run a request trace (a CSV of arrival_s, prompt_tokens, output_tokens, or "
                    "a seeded Poisson process) through a batching scheduler on simulated chips: "
                    "time to first token, time per output token, inter-token and end-to-end "
                    "latency percentiles, throughput, goodput under SLOs, KV-cache occupancy.",
        epilog="examples:\n"
               "  npulab llm serve --model llama2-7b --system a100_like --rate 4 --requests 200\n"
               "  npulab llm serve trace.csv --model llama2-70b --system a100x8 --tp 8 "
               "--policy continuous\n"
               "  npulab llm serve --model llama2-13b --system a100x4 --tp 2 --policy "
               "disaggregated --rate 2\n"
               "  npulab llm serve --model llama2-7b --system a100_like --rates 1,2,4,8 "
               "--requests 100")
    srv.add_argument("trace", nargs="?", metavar="TRACE.csv",
                     help="requests: a CSV with arrival_s, prompt_tokens, output_tokens "
                          "(default: a Poisson process, --rate)")
    _common(srv, launch="graph")
    srv.add_argument("--policy", default="chunked",
                     choices=("static", "continuous", "chunked", "disaggregated"),
                     help="scheduler (default chunked: Sarathi-Serve / vLLM V1)")
    srv.add_argument("--rate", type=float, default=1.0,
                     help="Poisson arrivals per second (default 1)")
    srv.add_argument("--rates", metavar="R1,R2,..",
                     help="a load sweep: serve the Poisson trace at each rate (throughput-"
                          "latency curve)")
    srv.add_argument("--requests", "-n", type=int, default=100,
                     help="Poisson requests (default 100)")
    srv.add_argument("--prompt-len", default="512", metavar="N|LO:HI",
                     help="Poisson prompt tokens, fixed or uniform in LO:HI (default 512)")
    srv.add_argument("--output-len", default="128", metavar="N|LO:HI",
                     help="Poisson output tokens, fixed or uniform in LO:HI (default 128)")
    srv.add_argument("--seed", type=int, default=0, help="Poisson seed (default 0)")
    srv.add_argument("--max-num-seqs", type=int, default=256,
                     help="sequences running at once (default 256)")
    srv.add_argument("--max-batched-tokens", type=int, default=2048,
                     help="tokens per iteration (chunked) or prompt tokens per prefill "
                          "iteration (default 2048)")
    srv.add_argument("--memory-utilization", type=float, default=0.9,
                     help="fraction of each chip's memory for weights and KV cache "
                          "(default 0.9)")
    srv.add_argument("--slo-ttft-ms", type=float, help="time-to-first-token SLO for goodput")
    srv.add_argument("--slo-tpot-ms", type=float, help="time-per-output-token SLO for goodput")
    srv.add_argument("--output", "-o", metavar="DIR",
                     help="write summary.json, requests.csv, iterations.csv, a Perfetto "
                          "trace.json and report.html (with --rates: curve.json, curve.csv, "
                          "curve.html and each rate's run in rate_<rate>/)")
    sub.add_parser("models", help="list the LLM presets and their sizes",
                   description="The LLM presets: layers, width, heads, parameters.")


def _model(args) -> str:
    return args.llm_config or args.model


def _progress():
    from npulab.progress import Progress
    return Progress()


def _system(args):
    from npulab.llm_run import resolve_system
    return resolve_system(args.system)


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def _op_table(ops: list[dict], total: float) -> list[str]:
    lines = [f"{'kernel':<18} {'latency us':>12} {'device us':>11} {'launch us':>10} "
             f"{'share %':>8} {'GFLOP':>10} {'DRAM MB':>10}  bound"]
    for r in ops:
        share = 100 * r["latency_s"] / total if total else 0.0
        lines.append(f"{r['name']:<18} {r['latency_s'] * 1e6:>12,.1f} {r['device_s'] * 1e6:>11,.1f} "
                     f"{r['launch_s'] * 1e6:>10,.1f} {share:>8.1f} {r['flops'] / 1e9:>10,.2f} "
                     f"{r['dram_bytes'] / 1e6:>10,.2f}  {r['bound']}")
    lines.append(f"{'total':<18} {total * 1e6:>12,.1f}")
    return lines


def _csv(rows: list[dict], extra: dict, stream=None) -> None:
    """``rows`` as CSV (each led by the ``extra`` columns) on ``stream`` (default stdout)."""
    w = csv.DictWriter(stream or sys.stdout, fieldnames=list(extra) + list(rows[0]),
                       lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**extra, **r})


def cmd_layer(args) -> int:
    from npulab.llm_run import llm_layer
    system = _system(args)
    r = llm_layer(_model(args), system, phase=args.phase, batch=args.batch,
                  prompt=args.prompt, kv_len=args.kv_len, tp=args.tp, ep=args.ep,
                  launch=args.launch == "eager", jobs=args.jobs,
                  kv_block=1 if args.kv_block is None else args.kv_block,
                  weight_bits=args.weight_bits, kv_bits=args.kv_bits,
                  kv_placement=args.kv_placement, progress=_progress())
    for w in r.warnings:
        print(f"npulab: warning: {w}", file=sys.stderr)
    if args.format == "json":
        json.dump(r.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    if args.format == "csv":
        _csv(r.ops, {"phase": r.phase})
        return 0
    s = r.shape
    what = (f"batch {s.batch} x {s.new_tokens} prompt tokens" if r.phase == "prefill" else
            f"batch {s.batch}, 1 new token at KV length {s.context}")
    print(f"npulab llm layer: {r.model} {r.phase}, {what}, on {r.system} ({r.device}), tp "
          f"{r.tp}" + (f", ep {r.ep}" if r.ep > 1 else "") + "; one layer on one rank"
          + (f"; KV cache in {r.kv_placement.upper()}" if r.phase == "decode" else ""))
    print("\n".join(_op_table(r.ops, r.total_s)))
    print(f"({r.kernels_simulated} distinct kernels simulated in {r.sim_seconds:.1f} s)")
    return 0


def cmd_run(args) -> int:
    from npulab.llm_run import llm_generate
    system = _system(args)
    r = llm_generate(_model(args), system, batch=args.batch, prompt=args.prompt,
                     output=args.output_tokens, tp=args.tp, pp=args.pp, ep=args.ep,
                     launch=args.launch == "eager", weight_bits=args.weight_bits,
                     kv_bits=args.kv_bits, kv_placement=args.kv_placement,
                     kv_block=16 if args.kv_block is None else args.kv_block, jobs=args.jobs,
                     progress=_progress())
    for w in r.warnings:
        print(f"npulab: warning: {w}", file=sys.stderr)
    if r.fits is False:
        print(f"npulab: warning: weights {_fmt_bytes(r.weight_bytes_per_chip)} + KV cache "
              f"{_fmt_bytes(r.kv_cache_bytes_per_chip)} per chip do not fit in "
              f"{_fmt_bytes(r.memory_bytes)}", file=sys.stderr)
    if args.format == "json":
        json.dump(r.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    if args.format == "csv":
        rows = [dict(phase=k, **row) for k, v in r.phases.items() for row in v]
        _csv(rows, {})
        return 0
    mem = "unknown" if r.memory_bytes is None else _fmt_bytes(r.memory_bytes)
    print(f"npulab llm run: {r.model} on {r.system} ({r.device}), tp {r.tp} pp {r.pp}"
          + (f" ep {r.ep}" if r.ep > 1 else "") + f"; batch {r.batch}, prompt {r.prompt}, "
          f"output {r.output} tokens")
    rows = [("time to first token", f"{r.ttft_s * 1e3:,.3f} ms"),
            ("time per output token", f"{r.tpot_s * 1e3:,.3f} ms (mean of "
             f"{len(r.decode_s)} decode steps)"),
            ("end-to-end latency", f"{r.total_s * 1e3:,.3f} ms"),
            ("throughput", f"{r.tokens_per_s:,.1f} output tokens/s"),
            ("weights per chip", _fmt_bytes(r.weight_bytes_per_chip)),
            ("KV cache per chip", f"{_fmt_bytes(r.kv_cache_bytes_per_chip)} (memory {mem}; "
                                  f"held in {r.kv_placement.upper()})")]
    for k, v in rows:
        print(f"{k:<24} {v}")
    for phase, ops in r.phases.items():
        total = sum(o["latency_s"] for o in ops)
        print(f"\n{phase}: every layer and step summed")
        print("\n".join(_op_table(ops, total)))
    print(f"({r.kernels_simulated} distinct kernels simulated in {r.sim_seconds:.1f} s)")
    return 0


def _length(text: str, flag: str):
    parts = str(text).split(":")
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        vals = []
    if len(vals) not in (1, 2):
        raise ValueError(f"{flag} {text!r}: expected a token count N or a range LO:HI")
    return vals[0] if len(vals) == 1 else tuple(vals)


def _rates(text: str) -> list[float]:
    """Every rate checked before any is served; each names its own output folder."""
    try:
        rates = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        rates = []
    if not rates:
        raise ValueError(f"--rates {text!r}: expected request rates like 1,2,4")
    for r in rates:
        if not 0 < r <= 1e6:
            raise ValueError(f"--rates {text!r}: rate {r:g} must be in (0, 1e6] requests/s")
    names = [f"{r:g}" for r in rates]
    if len(set(names)) < len(names):
        raise ValueError(f"--rates {text!r}: two rates print alike ({', '.join(names)}); "
                         f"give distinct rates")
    return rates


def _out_dir(out: str | None) -> None:
    """Check ``-o DIR`` before the run, so a bad path fails at once in one line (it is created
    when written)."""
    if out is not None:
        from hw.files import check_output_dir
        from hw.systolic.config import ConfigError
        try:
            check_output_dir(out, flag="-o")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


def _ms(v):
    return "-" if v is None else f"{v * 1e3:,.2f}"


def _serve_table(r) -> list[str]:
    s = r.summary
    lines = [f"npulab llm serve: {r.model} on {r.system}, tp {r.tp}, {r.policy} scheduler; "
             f"{s['requests']} requests, {s['output_tokens']:,} output tokens",
             f"{'metric':<26} {'p50 ms':>10} {'p90 ms':>10} {'p99 ms':>10} {'mean ms':>10}"]
    for key, label in (("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
                       ("itl_s", "inter-token latency"), ("e2e_s", "end-to-end latency")):
        d = s[key]
        lines.append(f"{label:<26} {_ms(d['p50']):>10} {_ms(d['p90']):>10} {_ms(d['p99']):>10} "
                     f"{_ms(d['mean']):>10}")
    lines += [f"{'throughput':<26} {s['tokens_per_s']:,.1f} output tokens/s, "
              f"{s['requests_per_s']:,.3f} requests/s over {s['makespan_s']:,.3f} s",
              f"{'goodput':<26} {s['goodput_requests_per_s']:,.3f} requests/s "
              f"({100 * s['slo_attained']:.1f} % within the SLOs)",
              f"{'KV cache':<26} peak {s['kv_peak_blocks']:,} of {s['kv_blocks']:,} blocks, "
              f"mean occupancy {100 * s['kv_mean_occupancy']:.1f} %; "
              f"{s['preemptions']} preemptions",
              f"({s['iterations']:,} iterations; {r.simulation['kernels_simulated']} distinct "
              f"kernels simulated; {r.simulation['seconds']:.1f} s)"]
    return lines


def _write_serve(r, out: str) -> None:
    from pathlib import Path
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    doc = r.to_dict()
    (d / "summary.json").write_text(json.dumps(
        {k: v for k, v in doc.items() if k not in ("requests", "iterations")}, indent=2) + "\n")
    for name, rows in (("requests.csv", r.requests), ("iterations.csv", r.iterations)):
        with open(d / name, "w", newline="") as f:
            _csv(rows, {}, f)
    (d / "trace.json").write_text(json.dumps(r.perfetto()) + "\n")
    from npulab.llm_report import render_serve_html
    (d / "report.html").write_text(render_serve_html(doc), encoding="utf-8")


def _write_curve(doc: dict, out: str) -> None:
    from pathlib import Path
    from npulab.llm_report import render_curve_html
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / "curve.json").write_text(json.dumps(doc, indent=2) + "\n")
    with open(d / "curve.csv", "w", newline="") as f:
        _csv(doc["curve"], {}, f)
    (d / "curve.html").write_text(render_curve_html(doc), encoding="utf-8")


def cmd_serve(args) -> int:
    from npulab.llm_serve import Scheduler, poisson_trace, read_trace, serve
    system = _system(args)
    sched = Scheduler(policy=args.policy, max_num_seqs=args.max_num_seqs,
                      max_num_batched_tokens=args.max_batched_tokens,
                      block_size=16 if args.kv_block is None else args.kv_block,
                      memory_utilization=args.memory_utilization)
    slo = {"slo_ttft_s": None if args.slo_ttft_ms is None else args.slo_ttft_ms / 1e3,
           "slo_tpot_s": None if args.slo_tpot_ms is None else args.slo_tpot_ms / 1e3}
    prompt = _length(args.prompt_len, "--prompt-len")
    output = _length(args.output_len, "--output-len")
    if args.rates:
        if args.trace:
            raise ValueError("--rates sweeps a Poisson trace; it takes no TRACE file")
        rates = _rates(args.rates)
        _out_dir(args.output)
        from npulab.llm_run import KernelTimer
        timer = KernelTimer(system, launch=args.launch == "eager", jobs=args.jobs,
                            progress=_progress())
        rows = []
        for rate in rates:
            trace = poisson_trace(args.requests, rate, prompt, output, args.seed)
            r = serve(_model(args), system, trace, tp=args.tp, ep=args.ep, scheduler=sched,
                      timer=timer, weight_bits=args.weight_bits, kv_bits=args.kv_bits, **slo)
            if args.output:
                _write_serve(r, f"{args.output}/rate_{rate:g}")
            s = r.summary
            rows.append({"rate": rate, "tokens_per_s": s["tokens_per_s"],
                         "requests_per_s": s["requests_per_s"],
                         "goodput_requests_per_s": s["goodput_requests_per_s"],
                         **{f"{k}_{p}": s[k][p] for k in ("ttft_s", "tpot_s", "e2e_s")
                            for p in ("p50", "p99")}})
        doc = {"model": r.model, "system": r.system, "tp": r.tp, "policy": r.policy,
               "requests": args.requests, "curve": rows}
        if args.output:
            _write_curve(doc, args.output)
        if args.format == "json":
            json.dump(doc, sys.stdout, indent=2)
            print()
        elif args.format == "csv":
            _csv(rows, {})
        else:
            print(f"npulab llm serve: {r.model} on {r.system}, tp {r.tp}, {r.policy} "
                  f"scheduler; {args.requests} Poisson requests per rate")
            print(f"{'rate/s':>8} {'tokens/s':>10} {'goodput/s':>10} {'TTFT p50':>10} "
                  f"{'TTFT p99':>10} {'TPOT p50':>10} {'TPOT p99':>10} {'E2E p99':>10}  (ms)")
            for x in rows:
                print(f"{x['rate']:>8g} {x['tokens_per_s']:>10,.1f} "
                      f"{x['goodput_requests_per_s']:>10,.3f} {_ms(x['ttft_s_p50']):>10} "
                      f"{_ms(x['ttft_s_p99']):>10} {_ms(x['tpot_s_p50']):>10} "
                      f"{_ms(x['tpot_s_p99']):>10} {_ms(x['e2e_s_p99']):>10}")
            if args.output:
                print(f"wrote {args.output}/curve.json, curve.csv, curve.html and each rate's "
                      f"run in {args.output}/rate_<rate>/")
        return 0
    trace = read_trace(args.trace) if args.trace else poisson_trace(
        args.requests, args.rate, prompt, output, args.seed)
    _out_dir(args.output)
    r = serve(_model(args), system, trace, tp=args.tp, ep=args.ep, scheduler=sched,
              launch=args.launch == "eager", jobs=args.jobs, progress=_progress(),
              weight_bits=args.weight_bits, kv_bits=args.kv_bits, **slo)
    if args.output:
        _write_serve(r, args.output)
    if args.format == "json":
        json.dump(r.to_dict(), sys.stdout, indent=2)
        print()
    elif args.format == "csv":
        _csv(r.requests, {})
    else:
        print("\n".join(_serve_table(r)))
        if args.output:
            print(f"wrote {args.output}/summary.json, requests.csv, iterations.csv, trace.json, "
                  f"report.html")
    return 0


def cmd_models(args) -> int:
    from compiler.frontends.llm import LLM_PRESETS
    print(f"{'model':<14} {'layers':>6} {'d_model':>8} {'heads':>6} {'kv':>4} {'ffn':>7} "
          f"{'kind':>7} {'context':>8} {'parameters':>18}")
    for c in LLM_PRESETS.values():
        print(f"{c.name:<14} {c.layers:>6} {c.d_model:>8} {c.heads:>6} {c.kv_heads:>4} "
              f"{c.ffn:>7} {c.ffn_kind:>7} {c.max_seq_len:>8,} {c.params:>18,}")
    return 0


def main(args) -> int:
    """Run an ``llm`` subcommand; a bad model, layout or size is a one-line error."""
    from npulab.cli.common import UserError
    try:
        if args.llm_command == "models":
            return cmd_models(args)
        if args.llm_command == "layer":
            return cmd_layer(args)
        if args.llm_command == "serve":
            return cmd_serve(args)
        return cmd_run(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
