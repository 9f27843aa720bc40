"""``npulab soc``: accelerators sharing one DRAM — cycles alone vs shared, slowdown, DRAM use.

``npulab soc [--accelerators N] [--config NAME|FILE] [--set SECTION.KEY=VALUE ...]
[--dram PRESET] [--model NAME] [--cpu-copy-mb MB] [--format table|json]`` builds an SoC of N
copies of a chip config (default 2 x the default chip) on one DRAM (the chip's, or ``--dram``),
compiles the model for each accelerator exactly as ``npulab run`` does, and runs it alone and
all together on the shared DRAM (:func:`hw.system.soc.run_soc`). ``--soc FILE`` reads an SoC
TOML instead (:func:`hw.system.soc.soc_config_from_dict`).

Errors are :class:`~hw.systolic.config.ConfigError` or ``npulab.cli.UserError``; the top-level
CLI prints them as one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from typing import TYPE_CHECKING

from compiler.frontends import zoo
from hw.memory.dram import DRAM_PRESETS, dram_preset

if TYPE_CHECKING:   # hw.system.soc (and the executor) load when the command runs (CLI start-up)
    from hw.system.soc import SocConfig, SocResult

__all__ = ["add_parser", "main", "build_soc", "run", "render_table"]

FORMATS = ("table", "json")
DEFAULT_MODEL = "resnet18"
MAX_ACCELERATORS = 64


def add_parser(subparsers) -> None:
    """Register ``soc`` on an argparse subparsers object."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "soc", formatter_class=fmt, help="accelerators sharing one DRAM: slowdown vs alone",
        description="Run a model on N accelerators that share one DRAM (an SoC), each alone and "
                    "all together on the cycle-level DRAM model, and print every accelerator's "
                    "cycles alone and shared, the slowdown, and the DRAM bandwidth achieved vs "
                    "peak.",
        epilog="examples:\n  npulab soc                                  # 2 x default chip, "
               "ResNet-18\n  npulab soc --accelerators 4 --model bert_base_layer --format json\n"
               "  npulab soc --dram hbm2 --cpu-copy-mb 16\n  npulab soc --soc my_soc.toml")
    p.add_argument("--accelerators", "-n", type=int, default=None,
                   help="number of identical accelerators (default 2)")
    p.add_argument("--config", "-c", metavar="NAME|FILE",
                   help="chip preset or TOML file of each accelerator (default: the default chip)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a chip config value of every accelerator (repeatable)")
    p.add_argument("--dram", choices=list(DRAM_PRESETS),
                   help="preset of the shared DRAM (default: the chip config's DRAM)")
    p.add_argument("--soc", metavar="FILE", help="SoC TOML file (instead of -n/--config/--set)")
    p.add_argument("--model", "-m", help=f"zoo model name (default {DEFAULT_MODEL})")
    p.add_argument("--batch", type=int, help="batch size for zoo models")
    p.add_argument("--image-size", type=int, help="input height/width for zoo CNNs")
    p.add_argument("--seq-len", type=int, help="sequence length for transformer models")
    p.add_argument("--cpu-copy-mb", type=float, metavar="MB",
                   help="also run a CPU memcpy of MB MiB on the shared DRAM")
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="stdout format")


def _user_error(message: str) -> Exception:
    from npulab.cli.common import UserError
    return UserError(message)


def build_soc(args) -> SocConfig:
    from hw.system.soc import CpuStream, SocConfig, load_soc_config
    """The SoC the command line asks for."""
    from npulab.cli.common import resolve_config
    cpu = None
    if args.cpu_copy_mb is not None:
        if not args.cpu_copy_mb > 0:
            raise _user_error(f"--cpu-copy-mb {args.cpu_copy_mb:g}: must be > 0 MiB")
        cpu = CpuStream(nbytes=max(1, int(args.cpu_copy_mb * (1 << 20))))
    if args.soc is not None:
        if args.accelerators is not None or args.config is not None or args.set:
            raise _user_error("--soc FILE gives the accelerators; do not combine it with "
                              "--accelerators, --config or --set")
        soc = load_soc_config(args.soc)
        if args.dram is not None:
            soc = SocConfig(name=soc.name, accelerators=soc.accelerators,
                            dram=dram_preset(args.dram), host_link=soc.host_link,
                            cpu=soc.cpu if cpu is None else cpu)
        elif cpu is not None:
            soc = SocConfig(name=soc.name, accelerators=soc.accelerators, dram=soc.dram,
                            host_link=soc.host_link, cpu=cpu)
        return soc
    n = 2 if args.accelerators is None else args.accelerators
    if not 1 <= n <= MAX_ACCELERATORS:
        raise _user_error(f"--accelerators {n}: must be an integer in 1..{MAX_ACCELERATORS} "
                          f"(an SoC needs at least one accelerator)")
    from hw.configfile import load_chip
    spec = load_chip(resolve_config(args.config), args.set)
    if spec.kind != "systolic":
        raise _user_error(f"--config {args.config}: {spec.name} is an NVDLA build; npulab soc "
                          f"runs systolic chips' programs on the shared DRAM")
    chip = spec.config
    dram = dram_preset(args.dram) if args.dram is not None else chip.dram
    return SocConfig(name=f"{n}x{chip.name}", accelerators=(chip,) * n, dram=dram, cpu=cpu)


def run(args) -> tuple[str, SocResult]:
    from hw.system.soc import run_soc
    """Compile the model for each accelerator and run the SoC; (model name, result)."""
    soc = build_soc(args)
    params = {k: getattr(args, k) for k in ("batch", "image_size", "seq_len")
              if getattr(args, k) is not None}
    try:
        graph = zoo.get(args.model or DEFAULT_MODEL, **params)
    except ValueError as exc:
        raise _user_error(str(exc)) from None
    programs, cache = [], {}
    for j in range(len(soc.accelerators)):
        chip = soc.chip(j)
        if chip not in cache:    # identical accelerators share one compiled program
            from compiler.backends.systolic import compile_graph
            from compiler.options import CompileOptions
            cache[chip] = compile_graph(graph, chip, CompileOptions())
        programs.append(cache[chip])
    return graph.name, run_soc(soc, programs)


def render_table(model: str, r: SocResult) -> str:
    """The human-readable report."""
    n = len(r.accelerators)
    peak = "unlimited" if r.dram_peak_gbps == float("inf") else f"{r.dram_peak_gbps:.1f} GB/s"
    lines = [f"npulab soc: {model} on {n} accelerator(s) sharing one {r.dram} DRAM "
             f"({peak} peak), SoC {r.name}"]
    rows = [("accel", "chip", "cycles alone", "cycles shared", "slowdown", "DRAM MB",
             "DRAM stall alone", "DRAM stall shared")]
    for a in r.accelerators:
        rows.append((str(a.index), a.name, f"{a.cycles_alone:,}", f"{a.cycles_shared:,}",
                     f"{a.slowdown:.3f}x", f"{a.dram_bus_bytes / 1e6:.1f}",
                     f"{a.stall_dram_cycles_alone:,}", f"{a.stall_dram_cycles_shared:,}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    pct = (f" = {100 * r.dram_utilization:.1f} % of peak" if r.dram_utilization else "")
    lines.append(f"DRAM         {r.dram_bus_bytes / 1e6:.1f} MB in {r.makespan_s * 1e3:.3f} ms: "
                 f"{r.dram_achieved_gbps:.2f} GB/s achieved{pct}")
    lines.append(f"DRAM busy    {r.dram_busy_s * 1e3:.3f} ms shared vs {r.dram_busy_alone_s * 1e3:.3f}"
                 f" ms summed over the alone runs (a transfer in flight)")
    lines.append(f"row buffer   shared {r.row_hits:,} hits, {r.row_misses:,} misses, "
                 f"{r.row_conflicts:,} conflicts; alone (sum) {r.row_hits_alone:,} / "
                 f"{r.row_misses_alone:,} / {r.row_conflicts_alone:,}")
    if r.cpu is not None:
        c = r.cpu
        lines.append(f"cpu          {c['kind']} {c['nbytes'] / (1 << 20):.1f} MiB: "
                     f"{c['seconds_alone'] * 1e3:.3f} ms alone ({c['gbps_alone']:.2f} GB/s), "
                     f"{c['seconds_shared'] * 1e3:.3f} ms shared ({c['gbps_shared']:.2f} GB/s), "
                     f"slowdown {c['slowdown']:.3f}x")
    return "\n".join(lines) + "\n"


def main(args) -> int:
    """Run ``npulab soc`` from parsed arguments; returns the exit status."""
    model, result = run(args)
    if args.format == "json":
        out: dict[str, Any] = {"model": model, **result.to_dict()}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(render_table(model, result))
    return 0
