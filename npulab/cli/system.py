"""``npulab system`` and ``npulab collective``: many chips.

``npulab collective --system SPEC --op OP --bytes SIZES [--algorithm ALG|all] [--mode sim|analytic]``
prints the time, algorithm bandwidth and NCCL-style bus bandwidth of a collective (one row per
size and algorithm); ``--format json`` gives ``time_us`` and ``busbw_gbps`` per row.

``npulab system --system SPEC --model NAME --strategy dp=..,tp=..,pp=.. [--microbatches M]``
plans one training step (:mod:`compiler.parallel`, :mod:`npulab.system_run`) and prints step
time, compute, exposed communication (TP, PP, DP), pipeline bubble, per-chip memory and the
scaling efficiency against one chip running the same global batch.

``SPEC`` is a preset (``dgx-a100``, ``hgx-a100-4``, ...), an inline topology (``ring:8``,
``torus2d:4x4``, ``switch:16``, ...; with ``--link-gbps`` per direction and
``--link-latency-ns``) or a system TOML file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from typing import TYPE_CHECKING

# Only the names go into the parser: the models load when a command runs (CLI start-up).
from hw.system import ALGORITHMS, OPS, system_names

if TYPE_CHECKING:
    from hw.system.system import SystemConfig

__all__ = ["add_parser", "main", "parse_bytes", "format_bytes", "load"]

FORMATS = ("table", "json")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}


def parse_bytes(text: str) -> int:
    """``"64MiB"`` -> 67108864. Suffixes: K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024 (as
    nccl-tests' ``-b 8 -e 128M``), KB/MB/GB/TB powers of 1000; case-insensitive."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match and match.group(2).lower()
    if not match or unit not in _UNITS:
        raise ValueError(f"--bytes {text!r}: expected a size like 8, 1048576, 64MiB, 1G or 1.5GB "
                         f"(K/M/G = KiB/MiB/GiB, KB/MB/GB = powers of 1000)")
    value = float(match.group(1)) * _UNITS[unit]
    if value < 1 or not value.is_integer():      # also rejects inf (1e400)
        raise ValueError(f"--bytes {text!r}: must be a whole number of bytes >= 1")
    return int(value)


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{int(n // size)} {unit}"
    return f"{int(n)} B"


def _size_list(text: str) -> list[int]:
    """``"8,1M,64M"`` or a doubling range ``"8:1G"`` (nccl-tests' -b/-e/-f 2)."""
    if ":" in text:
        lo, hi = (parse_bytes(t) for t in text.split(":", 1))
        if hi < lo:
            raise ValueError(f"--bytes {text!r}: the range end must be >= its start")
        sizes, n = [], lo
        while n <= hi:
            sizes.append(n)
            n *= 2
        return sizes
    sizes = [parse_bytes(t) for t in text.split(",") if t.strip()]
    if not sizes:
        raise ValueError(f"--bytes {text!r}: no size given; expected e.g. 64MiB, 8,1M or 8:1G")
    return sizes


def _add_system_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--system", "-s", required=True, metavar="PRESET|SPEC|FILE",
                   help=f"a preset ({', '.join(system_names())}), an inline topology (ring:N, "
                        f"mesh2d:AxB, torus2d:AxB, torus3d:AxBxC, switch:N, fc:N, fattree:NxK) or "
                        f"a system TOML file")
    p.add_argument("--link-gbps", type=float, metavar="GB/s",
                   help="inline topologies: link bandwidth per direction in GB/s (1e9 B/s)")
    p.add_argument("--link-latency-ns", type=float, metavar="NS",
                   help="inline topologies: latency per link hop in ns")
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="stdout format")


def add_parser(subparsers) -> None:
    """Register ``system`` and ``collective`` on an argparse subparsers object."""
    from compiler.parallel import model_names
    fmt = argparse.RawDescriptionHelpFormatter
    c = subparsers.add_parser(
        "collective", formatter_class=fmt, help="time a collective on a multi-chip system",
        description="Simulate a collective as messages over the system's links (flows sharing a "
                    "link share its bandwidth) or estimate it in closed form, and print time, "
                    "algorithm bandwidth and bus bandwidth (nccl-tests conventions: --bytes is "
                    "the per-rank buffer; all-gather/reduce-scatter the gathered buffer).",
        epilog="examples:\n  npulab collective --system hgx-a100-4 --op allreduce --bytes 64MiB\n"
               "  npulab collective --system ring:1024 --link-gbps 50 --op allreduce --bytes 64M\n"
               "  npulab collective --system dgx-a100 --op allgather --bytes 8:1G --algorithm all\n"
               "  npulab collective --system torus2d:4x8 --op alltoall --bytes 16M --format json")
    _add_system_args(c)
    c.add_argument("--op", required=True, choices=OPS, help="the collective")
    c.add_argument("--bytes", "-b", required=True, metavar="SIZES",
                   help="buffer size(s): 64MiB, a list 8,1M,64M, or a doubling range 8:1G")
    c.add_argument("--algorithm", "-a", default="auto", choices=ALGORITHMS + ("all",),
                   help="algorithm (default auto); 'all' prints every applicable one")
    c.add_argument("--mode", choices=("sim", "analytic"), default="sim",
                   help="sim: event-driven with contention (default); analytic: closed form")
    c.add_argument("--ranks", type=int, metavar="N",
                   help="run on the first N ranks only (default: all ranks of the system)")
    c.add_argument("--root", type=int, default=0, help="root rank of rooted collectives")
    c.add_argument("--chunks", type=int, help="pipeline chunks per message (default: auto)")
    c.add_argument("--no-contention", action="store_true",
                   help="give every flow its bottleneck bandwidth as if alone (a congestion-"
                        "unaware model, for comparison; not physical)")

    s = subparsers.add_parser(
        "system", formatter_class=fmt, help="plan a training step over many chips",
        description="Split a model over the chips of a system with data, tensor and pipeline "
                    "parallelism (and ZeRO), time one training step with the device model and "
                    "the network simulation, and print step time, compute, exposed "
                    "communication, pipeline bubble, per-chip memory and scaling efficiency vs "
                    "one chip.",
        epilog="examples (each plan fits in the chips' memory):\n"
               "  npulab system --system dgx-a100 --model megatron-22b --strategy "
               "tp=8,recompute=full --global-batch 8\n"
               "  npulab system --system hgx-a100-4 --model gpt2-small --strategy dp=2,tp=2 "
               "--global-batch 16\n"
               "  npulab system --system ring:8 --model resnet50 --strategy dp=8 --batch 32\n"
               "  npulab system --system pcie4-x4 --model bert_base_layer --strategy dp=4\n"
               f"\nLLM presets: {', '.join(model_names())}; zoo models train data-parallel.\n"
               "A plan that does not fit in a chip's memory prints a warning on stderr; "
               "--strict makes it exit with status 1.")
    _add_system_args(s)
    s.add_argument("--model", "-m", required=True, help="an LLM preset or a zoo model")
    s.add_argument("--strategy", default="dp=1",
                   help="dp=..,tp=..,pp=..[,zero=0-3,schedule=1f1b|gpipe,recompute=none|full|"
                        "selective,sp=true,v=N,bucket_mb=..,overlap_dp=false] (default dp=1); "
                        "dp*tp*pp chips are used")
    s.add_argument("--microbatches", type=int, metavar="M",
                   help="micro-batches per step per replica (default: global batch / (dp * "
                        "micro batch))")
    s.add_argument("--global-batch", type=int, help="LLM: sequences per step")
    s.add_argument("--micro-batch", type=int, help="LLM: sequences per micro-batch")
    s.add_argument("--seq-len", type=int, help="sequence length")
    s.add_argument("--batch", type=int, help="zoo models: samples per micro-batch per chip")
    s.add_argument("--image-size", type=int, help="zoo CNNs: input height/width")
    s.add_argument("--comm", choices=("sim", "analytic"), default="sim",
                   help="collectives simulated with contention (default) or closed form")
    s.add_argument("--algorithm", default="auto", choices=ALGORITHMS,
                   help="collective algorithm (default auto)")
    s.add_argument("--input", metavar="KEY=VALUE,...",
                   help="model the input pipeline: 'default', or sample_bytes, device_bytes, "
                        "storage_gbps, storage_latency_us, workers, worker_samples_per_s, "
                        "host_link_gbps (default: the system's host link), memcpy_gbps, "
                        "pinned=true|false, prefetch=N (0: no overlap)")
    s.add_argument("--compression", metavar="KIND[,KEY=VALUE]",
                   help="compress data-parallel gradients: none, fp16, int8, topk[,density=F] "
                        "or powersgd[,rank=R] (zero=0 only)")
    s.add_argument("--launch", metavar="MODE[,launch_us=US]",
                   help="kernel launch cost: eager (async: a kernel takes at least a launch), "
                        "sync (a launch added to every kernel) or graph (CUDA graphs: one launch "
                        "per forward/backward pass); launch_us default 5 (an estimate)")
    s.add_argument("--kernels", choices=("fused", "unfused"), default="fused",
                   help="a transformer layer's element-wise work: Megatron-LM's fused kernels "
                        "(bias-GeLU, bias-dropout-add, scale-mask-softmax; default) or each bias "
                        "add, dropout, attention scale and mask as a kernel of its own")
    s.add_argument("--sharding", choices=("megatron", "ilp"), default="megatron",
                   help="how each layer is split over the tp ranks: Megatron-LM's column/row "
                        "split (default) or the plan search's integer program (what npulab "
                        "plan found)")
    s.add_argument("--output", "-o", metavar="DIR",
                   help="write summary.json, trace.json (the step's timeline for Perfetto: a "
                        "track group per rank) and report.html")
    s.add_argument("--strict", action="store_true",
                   help="exit with status 1 when the plan does not fit in a chip's memory "
                        "(default: a warning on stderr, exit 0)")


def load(args) -> SystemConfig:
    from hw.system.system import load_system
    return load_system(args.system, link_gbps=args.link_gbps,
                       link_latency_ns=args.link_latency_ns)


def _collective_rows(system: SystemConfig, args) -> list[dict]:
    from hw.system.collectives import applicable_algorithms, collective
    sizes = _size_list(args.bytes)
    total = system.topology.n_ranks
    if total < 2:
        raise ValueError(f"--system {args.system}: the system has {total} chip; a collective "
                         f"needs at least 2")
    n = total if args.ranks is None else args.ranks
    if not 2 <= n <= total:
        raise ValueError(f"--ranks {n}: must be in 2..{system.topology.n_ranks} (the system's "
                         f"ranks)")
    groups = None if args.ranks is None else [tuple(range(n))]
    if args.algorithm == "all":
        algorithms = applicable_algorithms(system, args.op, groups=groups)
    else:
        algorithms = [args.algorithm]
    rows = []
    for nbytes in sizes:
        for algorithm in algorithms:
            result = collective(system, args.op, nbytes, algorithm=algorithm, groups=groups,
                                root=args.root, chunks=args.chunks, mode=args.mode,
                                contention=not args.no_contention)
            rows.append(result.to_dict())
    return rows


def cmd_collective(args) -> int:
    system = load(args)
    rows = _collective_rows(system, args)
    if args.format == "json":
        out = {"system": system.name, "op": args.op, "mode": args.mode, "results": rows}
        if len(rows) == 1:
            out.update(time_us=rows[0]["time_us"], busbw_gbps=rows[0]["busbw_gbps"],
                       algbw_gbps=rows[0]["algbw_gbps"], algorithm=rows[0]["algorithm"])
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"npulab collective: {args.op} on {system.name} ({rows[0]['ranks']} ranks, "
          f"{args.mode}{', no contention' if args.no_contention else ''})")
    print(f"{'bytes':>12}  {'algorithm':<12} {'time us':>12} {'algbw GB/s':>11} "
          f"{'busbw GB/s':>11} {'messages':>10}")
    for r in rows:
        print(f"{format_bytes(r['nbytes']):>12}  {r['algorithm']:<12} {r['time_us']:>12.2f} "
              f"{r['algbw_gbps']:>11.2f} {r['busbw_gbps']:>11.2f} {r['messages']:>10,}")
    return 0


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def cmd_system(args) -> int:
    from npulab.system_run import plan, resolve_model
    system = load(args)
    model = resolve_model(args.model, seq_len=args.seq_len, global_batch=args.global_batch,
                          micro_batch=args.micro_batch, batch=args.batch,
                          image_size=args.image_size)
    from compiler.parallel.training import GradCompression, parse_options
    from npulab.system_run import input_pipeline_for
    if args.output:
        from hw.files import check_output_dir
        check_output_dir(args.output, flag="-o", error=ValueError)
    ip = input_pipeline_for(system, args.input) if args.input is not None else None
    comp = parse_options(GradCompression, args.compression, "--compression") \
        if args.compression is not None else None
    from compiler.parallel.training import KernelLaunch
    launch = parse_options(KernelLaunch, args.launch, "--launch") \
        if args.launch is not None else None
    result = plan(system, model, args.strategy, comm_mode=args.comm, algorithm=args.algorithm,
                  microbatches=args.microbatches, input_pipeline=ip, compression=comp,
                  timeline=bool(args.output), launch=launch, sharding=args.sharding,
                  kernels=args.kernels)
    r = result.report
    status = _fit_status(r, args.strict)
    if args.output:
        from npulab.training_report import write_outputs
        write_outputs(args.output, result.to_dict(), r.timeline,
                      f"{r.model} on {system.name}")
    if args.format == "json":
        json.dump(result.to_dict(), sys.stdout, indent=2, default=str)
        print()
        return status
    st = r.strategy
    print(f"npulab system: {r.model} on {system.name} ({r.n_ranks} of "
          f"{system.topology.n_ranks} chips: dp={st['dp']} tp={st['tp']} pp={st['pp']}"
          f"{' zero=' + str(st['zero']) if st['zero'] else ''}, {r.microbatches} micro-batches, "
          f"{st['schedule']}{_extras(st)}, recompute={st['recompute']}"
          f"{', unfused kernels' if r.kernels == 'unfused' else ''}; collectives: {args.comm})")
    rows = [("step time", f"{r.step_s * 1e3:,.3f} ms"),
            ("  compute", f"{r.compute_s * 1e3:,.3f} ms (recompute {r.recompute_s * 1e3:,.3f} ms)"),
            ("  exposed communication", f"{r.exposed_comm_s * 1e3:,.3f} ms (tp "
             f"{r.exposed_tp_s * 1e3:,.3f}, pp {r.exposed_pp_s * 1e3:,.3f}, dp "
             f"{r.exposed_dp_s * 1e3:,.3f})"),
            ("  pipeline bubble", f"{r.bubble_s * 1e3:,.3f} ms"),
            ("  optimizer", f"{r.optimizer_s * 1e3:,.3f} ms"),
            ("throughput", f"{r.samples_per_s:,.2f} samples/s, {r.tokens_per_s:,.0f} tokens/s"
             if r.tokens_per_step != r.samples_per_step else f"{r.samples_per_s:,.2f} samples/s")]
    if ip is not None:
        stages = ip.stages(r.samples_per_step / st["dp"])
        bound = " (input-bound)" if r.input_load_s > r.step_s - r.input_s else ""
        at = [k for k, _ in rows].index("  optimizer") + 1
        rows.insert(at, ("  waiting for input", f"{r.input_s * 1e3:,.3f} ms{bound}: a batch "
                        f"loads in {r.input_load_s * 1e3:,.3f} ms (storage "
                        f"{stages['storage'] * 1e3:,.3f}, CPU {stages['cpu'] * 1e3:,.3f}, host "
                        f"copy {stages['h2d'] * 1e3:,.3f}; prefetch {ip.prefetch})"))
    if comp is not None:
        at = [k for k, _ in rows].index("  exposed communication") + 1
        rows.insert(at, ("  gradient compression", f"{comp.kind}: {_gb(r.comm_bytes['dp'])} "
                        f"all-reduced per stage, {r.compress_s * 1e3:,.3f} ms of compute"
                        if comp.collective == "allreduce" else
                        f"{comp.kind}: {_gb(r.comm_bytes['dp'])} all-gathered per stage, "
                        f"{r.compress_s * 1e3:,.3f} ms of compute"))
    if r.mfu is not None:
        rows.append(("model FLOPs utilization", f"{100 * r.mfu:.1f} %"))
    mem = r.memory
    fits = "" if r.fits is None else (" (fits)" if r.fits else
                                      f" (does NOT fit in {_gb(r.device_mem_bytes)})")
    rows.append(("memory per chip", f"{_gb(mem['total'])}{fits}: params {_gb(mem['params'])}, "
                 f"grads {_gb(mem['grads'])}, optimizer {_gb(mem['optimizer'])}, activations "
                 f"{_gb(mem['activations'])}"))
    sent = r.sent_bytes
    rows.append(("sent per chip per step", f"tp {_gb(sent['tp'])}, pp {_gb(sent['pp'])}, dp "
                 f"{_gb(sent['dp'])}"))
    rows.append(("one chip, same batch", f"{result.baseline.step_s * 1e3:,.3f} ms"))
    rows.append(("scaling efficiency", f"{100 * result.scaling_efficiency:.1f} % "
                 f"(speed-up {result.baseline.step_s / r.step_s:.2f}x on {r.n_ranks} chips)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return status


def _extras(st: dict) -> str:
    """The strategy's non-default pipeline and state options, for the header line."""
    out = ""
    if st.get("interleave", 1) > 1:
        out += f" v={st['interleave']}"
    if st.get("stage_layers"):
        out += " stages " + "/".join(map(str, st["stage_layers"]))
    if st.get("offload"):
        out += ", offload"
    return out


def _fit_status(r, strict: bool) -> int:
    """Warn on stderr when the plan does not fit in a chip's memory: 1 with ``--strict``, else 0."""
    if r.fits is None or r.fits:
        return 0
    print(f"npulab: warning: the plan does not fit: {_gb(r.memory['total'])} per chip, "
          f"{_gb(r.device_mem_bytes)} available (more tp/pp, zero=1..3, recompute=full or "
          f"offload=true shrink it){'' if strict else '; --strict makes this an error'}",
          file=sys.stderr)
    return 1 if strict else 0


def main(args) -> int:
    """Run ``collective`` or ``system``; a ValueError from a bad argument (a strategy that does
    not fit the model, an unknown algorithm for the op, a bad size) becomes a one-line error."""
    from npulab.cli.common import UserError
    try:
        if args.command == "collective":
            return cmd_collective(args)
        return cmd_system(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
