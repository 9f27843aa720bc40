"""``npulab llm``: LLM inference on simulated chips (:mod:`npulab.llm_run`).

``npulab llm layer --model M --system S --tp P --batch B --phase prefill --prompt N`` (or
``--phase decode --kv-len T``) prints one decoder layer's kernels on one tensor-parallel rank:
each kernel's latency (device time + launch overhead), what bounds it, its FLOPs and DRAM
bytes, and the total. ``--format json`` gives ``ops`` (a list of ``{"name", "latency_s",
...}``) and ``total_s``; ``--format csv`` one row per kernel.

``npulab llm run --model M --system S --tp P --batch B --prompt N --output K`` runs one batch
of requests: the prefill (time to first token), ``K - 1`` decode steps (time per output token),
end-to-end latency, tokens/s, weights and KV cache per chip against its memory, and each
phase's time per kernel summed over the layers.

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


def _common(p: argparse.ArgumentParser) -> None:
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
                   help="MoE: expert-parallel degree within the tensor-parallel group "
                        "(default 1)")
    p.add_argument("--batch", "-b", type=int, default=1, help="sequences in the batch")
    p.add_argument("--kv-block", type=int, metavar="TOKENS",
                   help="paged KV-cache block size: decode attention reads whole blocks "
                        "(default: 1 for llm layer, 16 for llm run)")
    p.add_argument("--no-launch", action="store_true",
                   help="leave out the chip's per-kernel launch overhead (as a CUDA graph)")
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="worker processes simulating distinct kernels (default: all cores)")
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="stdout format")


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
               "--prompt 512 --output 64\n"
               "  npulab llm models")
    sub = p.add_subparsers(dest="llm_command", metavar="SUBCOMMAND", required=True)
    lay = sub.add_parser("layer", formatter_class=fmt,
                         help="one decoder layer, one phase: per-kernel breakdown",
                         description="Time one decoder layer of a prefill or decode step on "
                                     "one tensor-parallel rank, kernel by kernel.")
    _common(lay)
    lay.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
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
    run.add_argument("--prompt", type=int, default=512, help="prompt tokens (default 512)")
    run.add_argument("--output", type=int, default=32,
                     help="tokens generated per sequence (default 32)")
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


def _csv(rows: list[dict], extra: dict) -> None:
    keys = list(extra) + list(rows[0])
    w = csv.DictWriter(sys.stdout, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**extra, **r})


def cmd_layer(args) -> int:
    from npulab.llm_run import llm_layer
    system = _system(args)
    r = llm_layer(_model(args), system, phase=args.phase, batch=args.batch,
                  prompt=args.prompt, kv_len=args.kv_len, tp=args.tp, ep=args.ep,
                  launch=not args.no_launch, kv_block=args.kv_block or 1, jobs=args.jobs,
                  progress=_progress())
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
          f"{r.tp}" + (f", ep {r.ep}" if r.ep > 1 else "") + "; one layer on one rank")
    print("\n".join(_op_table(r.ops, r.total_s)))
    print(f"({r.kernels_simulated} distinct kernels simulated in {r.sim_seconds:.1f} s)")
    return 0


def cmd_run(args) -> int:
    from npulab.llm_run import llm_generate
    system = _system(args)
    r = llm_generate(_model(args), system, batch=args.batch, prompt=args.prompt,
                     output=args.output, tp=args.tp, pp=args.pp, ep=args.ep,
                     launch=not args.no_launch,
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
            ("KV cache per chip", f"{_fmt_bytes(r.kv_cache_bytes_per_chip)} (memory {mem})")]
    for k, v in rows:
        print(f"{k:<24} {v}")
    for phase, ops in r.phases.items():
        total = sum(o["latency_s"] for o in ops)
        print(f"\n{phase}: every layer and step summed")
        print("\n".join(_op_table(ops, total)))
    print(f"({r.kernels_simulated} distinct kernels simulated in {r.sim_seconds:.1f} s)")
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
        return cmd_run(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
