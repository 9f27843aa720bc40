"""``npulab dram``: replay a DRAM request trace on the DRAM timing model, list the presets.

``npulab dram replay TRACE [--preset NAME | --ini FILE] [--set dram.KEY=VALUE ...] [--json]
[--per-request CSV]`` reads a DRAMsim3-format trace (``0x12345680 READ 10`` per line), runs it
on a preset (default ``ddr4-3200``) or on a DRAMsim3 ``.ini``, and prints requests, total cycles
and nanoseconds, bandwidth, row hits/misses/conflicts, activates and latency.
``npulab dram presets`` lists the presets with their peak bandwidth.

Every user error is a :class:`~hw.systolic.config.ConfigError` naming the file, line or key;
the top-level CLI prints it as one line.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from hw.files import check_input_file, check_output_file
from hw.memory.dram import (DEFAULT_PRESET, DRAM_PRESET_SOURCES, DRAM_PRESETS, DramConfig,
                            ReplayResult, dram_config_from_dict, dram_config_from_dramsim3_ini,
                            dram_config_to_dict, read_trace, replay, replay_summary)
from hw.systolic.config import ConfigError
from hw.validate import toml_value

__all__ = ["add_parser", "main", "config_from_args", "parse_dram_override"]


def add_parser(subparsers) -> None:
    """Register ``dram`` (with ``replay`` and ``presets``) on an argparse subparsers object."""
    fmt = argparse.RawDescriptionHelpFormatter
    dram = subparsers.add_parser(
        "dram", formatter_class=fmt, help="DRAM timing model: replay a trace, list presets",
        description="Cycle-level DRAM controller and device model (DRAMsim3-style).",
        epilog="examples:\n  npulab dram presets\n  npulab dram replay trace.txt --preset hbm2\n"
               "  npulab dram replay trace.txt --ini DDR4_8Gb_x8_3200.ini --json")
    sub = dram.add_subparsers(dest="dram_command", metavar="SUBCOMMAND")
    rp = sub.add_parser(
        "replay", formatter_class=fmt, help="replay a DRAMsim3-format trace",
        description="Replay a trace of '<hex address> READ|WRITE <cycle>' lines (DRAMsim3's "
                    "format) and print completion time, bandwidth, row-buffer statistics and "
                    "latency. Cycles are DRAM clock cycles (tCK).",
        epilog="examples:\n  npulab dram replay trace.txt\n"
               "  npulab dram replay trace.txt --preset hbm2 --set dram.channels=16\n"
               "  npulab dram replay trace.txt --set dram.address_mapping=rochrabacobg "
               "--per-request out.csv")
    rp.add_argument("trace", metavar="TRACE", help="trace file")
    src = rp.add_mutually_exclusive_group()
    src.add_argument("--preset", "-p", choices=list(DRAM_PRESETS),
                     help=f"DRAM preset (default {DEFAULT_PRESET})")
    src.add_argument("--ini", metavar="FILE", help="DRAMsim3 .ini config to use instead of a preset")
    rp.add_argument("--set", action="append", default=[], metavar="dram.KEY=VALUE",
                    help="override a DRAM config value, e.g. --set dram.channels=2 (repeatable)")
    rp.add_argument("--json", action="store_true", help="print the summary as JSON")
    rp.add_argument("--per-request", metavar="CSV",
                    help="also write one CSV row per request (address, op, issue, finish, latency)")
    sub.add_parser("presets", help="list the DRAM presets", description="List the DRAM presets.")
    dram.set_defaults(dram_parser=dram)


def parse_dram_override(text: str) -> tuple[str, Any]:
    """``"dram.channels=2"`` -> ``("channels", 2)``; values use TOML syntax, a bare word that is
    not valid TOML is a string (``dram.page_policy=closed``)."""
    where = f"--set {text}"
    if "=" not in text:
        raise ConfigError(f"{where}: expected dram.KEY=VALUE, e.g. dram.channels=2")
    dotted, raw = (part.strip() for part in text.split("=", 1))
    section, _, key = dotted.partition(".")
    if section != "dram" or not key or "." in key:
        raise ConfigError(f"{where}: {dotted!r}: expected dram.KEY, e.g. dram.channels")
    return key, toml_value(raw)


def config_from_args(preset: str | None, ini: str | None, overrides: Iterable[str] = ()) -> DramConfig:
    """The config a ``replay`` command line asks for: a preset or a DRAMsim3 ``.ini``, then
    ``--set dram.KEY=VALUE`` overrides validated like a config file's ``[dram]`` table."""
    overrides = list(overrides)
    values = dict(parse_dram_override(text) for text in overrides)
    if ini is not None:
        data = dram_config_to_dict(dram_config_from_dramsim3_ini(ini))
        where = ini
    else:
        data = {"preset": preset or DEFAULT_PRESET}
        where = f"--preset {data['preset']}"
    if not overrides:
        return dram_config_from_dict(data, where) if ini is None else dram_config_from_dramsim3_ini(ini)
    data.update(values)
    return dram_config_from_dict(data, f"{where} with --set {' --set '.join(overrides)}")


def _print_summary(s: dict[str, Any], cfg: DramConfig) -> None:
    n = s["requests"]
    tck = cfg.tck_ns
    peak = "" if cfg.is_ideal else f", {cfg.peak_gbps:.1f} GB/s peak"
    print(f"npulab dram replay: {s['trace']} on {cfg.preset} ({cfg.channels} ch x {cfg.ranks} rank "
          f"x {cfg.banks} banks, {cfg.bus_width_bits}-bit{peak})")
    print(f"requests     {n:,} ({s['reads']:,} reads, {s['writes']:,} writes, "
          f"{cfg.request_bytes} B each)")
    print(f"total        {s['total_cycles']:,} cycles = {s['total_ns']:,.1f} ns (tCK {tck} ns)")
    pct = "" if cfg.is_ideal else f" ({100 * s['bandwidth_gbps'] / cfg.peak_gbps:.1f} % of peak)"
    print(f"bandwidth    {s['bandwidth_gbps']:.2f} GB/s{pct}")
    hit_rate = 100 * s["row_hits"] / n if n else 0.0
    print(f"row buffer   {s['row_hits']:,} hits, {s['row_misses']:,} misses, "
          f"{s['row_conflicts']:,} conflicts ({hit_rate:.1f} % hits)")
    print(f"commands     {s['activates']:,} activates, {s['precharges']:,} precharges, "
          f"{s['refreshes']:,} refreshes")
    mean, worst = s["mean_latency_cycles"], s["max_latency_cycles"]
    print(f"latency      mean {mean:.1f} cycles ({mean * tck:.1f} ns), "
          f"max {worst:,} cycles ({worst * tck:.1f} ns)")


def _write_per_request(path: str, addresses, is_write, issues, result: ReplayResult) -> None:
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["index", "address", "op", "issue_cycle", "finish_cycle", "latency_cycles"])
            for i, (a, wr, t, fin, lat) in enumerate(zip(addresses.tolist(), is_write.tolist(),
                                                         issues.tolist(), result.finish_cycles.tolist(),
                                                         result.latency_cycles.tolist())):
                w.writerow([i, f"0x{a:x}", "WRITE" if wr else "READ", t, fin, lat])
    except OSError as exc:
        raise ConfigError(f"--per-request {path}: cannot write: {exc.strerror}") from None


def cmd_replay(args) -> int:
    check_input_file(args.trace, "trace file", missing="no such trace file")
    if args.per_request:
        check_output_file(args.per_request, "CSV file", flag="--per-request")
    cfg = config_from_args(args.preset, args.ini, args.set)
    addresses, is_write, issues = read_trace(args.trace)
    result = replay(cfg, addresses, is_write, issues)
    s = replay_summary(cfg, result, str(args.trace))
    if args.json:
        print(json.dumps({**s, "config": dram_config_to_dict(cfg)}, indent=2))
    else:
        _print_summary(s, cfg)
    if args.per_request:
        _write_per_request(args.per_request, addresses, is_write, issues, result)
        print(f"npulab dram: wrote {len(addresses):,} rows to {Path(args.per_request)}", file=sys.stderr)
    return 0


def cmd_presets() -> int:
    rows = [("preset", "organisation", "request", "tCK ns", "peak GB/s", "source")]
    for name, cfg in DRAM_PRESETS.items():
        org = (f"{cfg.channels} ch x {cfg.bus_width_bits} bit, "
               f"{cfg.ranks}R x {cfg.bankgroups}BG x {cfg.banks_per_group}B")
        peak = "unlimited" if cfg.is_ideal else f"{cfg.peak_gbps:.1f}"
        rows.append((name, org, f"{cfg.request_bytes} B", f"{cfg.tck_ns:g}", peak,
                     DRAM_PRESET_SOURCES[name]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = (c.ljust(w) if i in (0, 1, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        print("  ".join(cells).rstrip())
    return 0


def main(args) -> int:
    """Run ``npulab dram ...`` from parsed arguments; returns the exit status."""
    command = getattr(args, "dram_command", None)
    if command == "replay":
        return cmd_replay(args)
    if command == "presets":
        return cmd_presets()
    parser = getattr(args, "dram_parser", None)
    if parser is not None:
        parser.print_help()
    return 2
