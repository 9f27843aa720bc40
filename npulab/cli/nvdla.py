"""``npulab nvdla spreadsheet``: NVIDIA's NVDLA performance spreadsheet, per layer and in total.

``npulab nvdla spreadsheet --model resnet50|googlenet|alexnet [--sram-mb [N]]
[--npulab-placement] [--freq-mhz F] [--dram-gbs B] [--macs M] [--format table|json|csv]``
evaluates one network of ``perf/NVDLA_OpenSource_Performance.xlsx`` (nvdla/hw) with
:mod:`hw.nvdla.spreadsheet` on the layer tables shipped in ``hw/nvdla/sheet_data/``
(:mod:`hw.nvdla.sheet_models`) and prints every layer (MACs, traffic, cycles per roofline
ceiling, max cycles, long pole) and the totals (cycles, ms, fps, MAC efficiency).

``--sram-mb 0`` (default) is the sheet's DRAM-only model, ``--sram-mb`` alone or ``--sram-mb 4``
its "with 4 MB CV-SRAM" model with NVIDIA's hand-entered placements; other sizes use npulab's
placement rule (:func:`hw.nvdla.sheet_models.npulab_placement`), and the output says so.
User errors are :class:`npulab.cli.UserError`: one line naming the option, value and what is
allowed, exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import textwrap

from npulab.cli.common import UserError

__all__ = ["add_parser", "main", "spreadsheet_result", "render_spreadsheet", "FORMATS"]

FORMATS = ("table", "json", "csv")
_MODELS = ("resnet50", "googlenet", "alexnet")  # == hw.nvdla.sheet_models.SHEET_MODELS (tested)
_FLAGS = {"sram_mb": "--sram-mb", "freq_mhz": "--freq-mhz", "dram_gbs": "--dram-gbs",
          "macs": "--macs"}
def add_parser(subparsers) -> None:
    """Register ``nvdla`` (with ``spreadsheet``) on an argparse subparsers object."""
    fmt = argparse.RawDescriptionHelpFormatter
    nv = subparsers.add_parser(
        "nvdla", formatter_class=fmt, help="NVDLA models: NVIDIA's performance spreadsheet and trace tests",
        description="NVDLA-like datapath (docs/nvdla.md).",
        epilog="examples:\n  npulab nvdla spreadsheet --model resnet50\n"
               "  npulab nvdla spreadsheet --model googlenet --sram-mb --format json")
    sub = nv.add_subparsers(dest="nvdla_command", metavar="SUBCOMMAND")
    sp = sub.add_parser(
        "spreadsheet", formatter_class=fmt,
        help="NVIDIA's NVDLA performance spreadsheet, per layer",
        description="Evaluate NVIDIA's NVDLA performance spreadsheet (perf/"
                    "NVDLA_OpenSource_Performance.xlsx): a per-layer roofline over DRAM, CV-SRAM "
                    "and MAC cycles with the sheet's inputs (int8, 2048 MACs, 512 KB CBUF, 1 GHz, "
                    "DRAM 10 GB/s, CV-SRAM 25 GB/s, FC batch 16). Sizes are the sheet's KB "
                    "(1024 B); transfer cycles = KB / (GB/s) * MHz, as the sheet computes them.",
        epilog="examples:\n"
               "  npulab nvdla spreadsheet --model resnet50               # 7.113691 ms\n"
               "  npulab nvdla spreadsheet --model resnet50 --sram-mb     # 4 MB: 5.161544 ms\n"
               "  npulab nvdla spreadsheet --model alexnet --format json\n"
               "  npulab nvdla spreadsheet --model googlenet --sram-mb 16  # npulab's placement rule\n"
               "  npulab nvdla spreadsheet --model resnet50 --macs 1024 --dram-gbs 15 -f csv")
    sp.add_argument("--model", "-m", default="resnet50", metavar="NAME",
                    help=f"network: {', '.join(_MODELS)} (default resnet50)")
    sp.add_argument("--sram-mb", nargs="?", const="4", default="0", metavar="N",
                    help="CV-SRAM size in MB: 0 = the DRAM-only model (default); 4 (also "
                         "--sram-mb alone) = the sheet's 4 MB model with NVIDIA's placements; "
                         "AlexNet uses its sheet's batching rule at any size; other sizes use "
                         "npulab's placement rule")
    sp.add_argument("--npulab-placement", action="store_true",
                    help="use npulab's placement rule at 4 MB too (to compare with NVIDIA's)")
    sp.add_argument("--freq-mhz", metavar="F", help="clock in MHz (sheet: 1000)")
    sp.add_argument("--dram-gbs", metavar="B", help="DRAM bandwidth in GB/s (sheet: 10)")
    sp.add_argument("--macs", metavar="M", help="int8 MACs per cycle, a multiple of 64 (sheet: 2048)")
    sp.add_argument("--format", "-f", choices=FORMATS, default="table", help="stdout format")
    tr = sub.add_parser(
        "trace", formatter_class=fmt,
        help="replay NVIDIA's NVDLA trace tests (register programs with CRC checks)",
        description="Play NVDLA register-level trace tests (NVIDIA's verif/tests/trace_tests "
                    "format: <name>/<name>.cfg + .dat surfaces) through npulab's register file "
                    "and units; print one line per test (PASS name / FAIL name: reason) and a "
                    "summary line. Exit status 0 only when every test passes.",
        epilog="examples:\n"
               "  npulab nvdla trace ../shared/nvdla/traces/nv_small          # all 69 tests\n"
               "  npulab nvdla trace ../shared/nvdla/traces/nv_small/pdp_7x9x10_3x3_int8 -v\n"
               "  npulab nvdla trace my_trace/ --dump out/                    # surfaces + diff\n"
               "  NPULAB_NVDLA_TRACES=/data/traces npulab nvdla trace          # default folder\n"
               "  npulab nvdla fetch-traces && npulab nvdla trace   # NVIDIA's traces, cached")
    tr.add_argument("paths", nargs="*", metavar="PATH",
                    help="a trace folder, a .cfg file, or a folder of trace folders (default: "
                         "nv_small/ in --traces DIR, else in $NPULAB_NVDLA_TRACES, else in the "
                         "user cache (npulab nvdla fetch-traces), else in ../shared/nvdla/traces "
                         "beside the source tree)")
    tr.add_argument("--traces", metavar="DIR",
                    help="with no PATH: the folder holding NVIDIA's nv_small/ trace tests")
    tr.add_argument("--dump", metavar="DIR",
                    help="write each layer's output cube and numpy reference (.npy), the "
                         "differing elements (.txt) and each checked memory range (.bin) to "
                         "DIR/<test>/")
    tr.add_argument("--verbose", "-v", action="store_true",
                    help="also print each hardware layer (unit, shapes, modes, cycle estimate) and each check")
    tr.add_argument("--config", default="nv_small", metavar="PRESET|FILE",
                    help="NVDLA build for the cycle estimates (default nv_small, the build the "
                         "traces were written for)")
    ft = sub.add_parser(
        "fetch-traces", formatter_class=fmt,
        help="download NVIDIA's nv_small trace tests into the user cache (for nvdla trace)",
        description="Download NVIDIA's nv_small conformance traces (nvdla/hw, "
                    "verif/tests/trace_tests/nv_small, at a pinned commit; the 69 tests "
                    "'npulab nvdla trace' plays) into the user cache ($XDG_CACHE_HOME or "
                    "~/.cache)/npulab/nvdla-traces/<commit>/nv_small, checking every file "
                    "against its pinned git blob id before installing any.",
        epilog="examples:\n"
               "  npulab nvdla fetch-traces                      # from github.com/nvdla/hw\n"
               "  npulab nvdla fetch-traces --from ~/src/nvdla-hw   # a checkout\n"
               "  npulab nvdla fetch-traces --from https://codeload.github.com/nvdla/hw/tar.gz/"
               "1a65f1f5b48268accaa47c95f95c2601918be095\n"
               "  npulab nvdla fetch-traces --from file:///mnt/mirror/nv_small/")
    ft.add_argument("--from", dest="source", metavar="DIR_OR_URL",
                    help="where to copy from: a folder (an nvdla/hw checkout, a folder holding "
                         "nv_small/, or nv_small/ itself), an archive (.tar.gz, .tgz, .tar, "
                         ".zip; path or URL), or a base URL (https://, http://, file://) laid out "
                         "as nv_small/ (default: raw.githubusercontent.com at the pinned commit)")
    ft.add_argument("--dest", metavar="DIR",
                    help="install into DIR/nv_small instead of the user cache (then pass "
                         "--traces DIR or set NPULAB_NVDLA_TRACES=DIR)")
    ft.add_argument("--allow-missing", action="store_true",
                    help="install what the source has when some files are missing (traces "
                         "needing them fail naming the file)")
    ft.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary line")
    nv.set_defaults(nvdla_parser=nv)


def _number(flag: str, text: str | None):
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{flag} {text}: not a number") from None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def spreadsheet_result(model: str = "resnet50", sram_mb: float = 0, *, freq_mhz=None,
                       dram_gbs=None, macs=None, npulab_rule: bool = False) -> dict:
    """:func:`hw.nvdla.sheet_report.spreadsheet_result`, its errors worded with the flags
    (:class:`UserError`)."""
    from hw.nvdla.sheet_report import spreadsheet_result as result

    if model not in _MODELS:
        raise UserError(f"--model {model}: unknown; the spreadsheet has {', '.join(_MODELS)}")
    try:
        return result(model, sram_mb, freq_mhz=freq_mhz, dram_gbs=dram_gbs, macs=macs,
                      npulab_rule=npulab_rule)
    except ValueError as exc:
        msg = str(exc)
        for key, flag in _FLAGS.items():
            if msg.startswith(f"{key} = "):
                msg = flag + msg[len(key):]
                break
        raise UserError(msg) from None


def _fmt(v, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "kb":
        return f"{v:,.2f}".rstrip("0").rstrip(".")
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    return f"{int(v):,}"


def _table(doc: dict) -> str:
    sram = doc["sheet_model"] == "cv-sram"
    cfg = doc["config"]
    cols = [("MACs", "macs", "n"), ("DRAM KB", "dram_traffic_kb", "kb")]
    if sram:
        cols += [("SRAM rd KB", "cvsram_read_traffic_kb", "kb"),
                 ("SRAM wr KB", "cvsram_write_traffic_kb", "kb")]
    cols += [("DRAM cyc", "dram_cycles", "n")]
    if sram:
        cols += [("SRAM-R cyc", "cvsram_read_cycles", "n"), ("SRAM-W cyc", "cvsram_write_cycles", "n")]
    cols += [("MAC cyc", "mac_cycles", "n"), ("max cyc", "max_cycles", "n"), ("long pole", "long_pole", "s")]
    if sram:
        where = (f"with {_fmt(doc['sram_mb'], 'kb')} MB CV-SRAM ({cfg['cvsram_read_gbs']}/"
                 f"{cfg['cvsram_write_gbs']} GB/s read/write)")
    else:
        where = "DRAM-only model"
    lines = [f"NVIDIA NVDLA performance spreadsheet: {doc['title']}, {where}",
             f"inputs: int8, {cfg['macs']} MACs, {cfg['freq_mhz']} MHz, CBUF {cfg['cbuf_kb']} KB, "
             f"DRAM {cfg['dram_gbs']} GB/s, FC batch {cfg['fc_batch']}",
             f"source: {doc['source']}"]
    if doc["placement"] == "nvidia":
        lines.append("placement: NVIDIA's hand-entered per-layer CV-SRAM placements (the sheet's)")
    elif doc["placement"] in ("nvidia-batched", "npulab"):
        lines += textwrap.wrap(f"placement: {doc['placement_rule']}", width=100,
                               subsequent_indent="  ")
    if cfg["fc_weights_batched_in_dram_only"] and not sram:
        lines.append(f"FC weights amortised over the FC batch ({cfg['fc_batch']}), as this sheet "
                     f"does")
    lines.append("KB = 1024 B; transfer cycles = ceil(KB / (GB/s) * MHz), as the sheet computes them")
    lines.append("")
    rows = []
    for d in doc["layers"]:
        name = d["name"] + ("" if d["summed"] else " *")
        rows.append([name] + [d[key] if kind == "s" and d[key] else _fmt(d[key], kind)
                              for _, key, kind in cols])
    head = ["layer"] + [h for h, _, _ in cols]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    lines.append("  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i])
                           for i, h in enumerate(head)))
    for r in rows:
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i])
                               for i, c in enumerate(r)))
    if any(not d["summed"] for d in doc["layers"]):
        lines.append("* listed by the sheet, run inside the following '(combined)' row: not summed")
    t = doc["totals"]
    lines += ["",
              f"total cycles     {_fmt(t['cycles'], 'n')}",
              f"time             {t['time_ms']:.6f} ms at {cfg['freq_mhz']} MHz "
              f"({t['fps']:.1f} fps)",
              f"MAC efficiency   {100 * t['hw_mac_efficiency']:.1f} % (MAC array busy), "
              f"{100 * t['network_mac_efficiency']:.1f} % (useful MACs)",
              f"total MACs       {t['macs']:,}"]
    if doc["sheet_time_ms"] is not None:
        ref = doc["sheet_time_ms"]
        digits = len(repr(ref).partition(".")[2])  # 0.895 is published with 3 decimals
        same = math.isclose(round(t["time_ms"], digits), ref, rel_tol=1e-12)
        lines.append(f"NVIDIA's sheet   {ref!r} ms"
                     + (" (equal at the sheet's precision)" if same else " (different)"))
    return "\n".join(lines) + "\n"


def _csv(doc: dict) -> str:
    keys = list(doc["layers"][0])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for d in doc["layers"]:
        w.writerow(["" if d[k] is None else d[k] for k in keys])
    t = doc["totals"]
    total = {"name": "total", "summed": True, "macs": t["macs"], "max_cycles": t["cycles"],
             "dram_traffic_kb": t["dram_traffic_kb"],
             "cvsram_read_traffic_kb": t.get("cvsram_read_traffic_kb"),
             "cvsram_write_traffic_kb": t.get("cvsram_write_traffic_kb")}
    w.writerow(["" if total.get(k) is None else total[k] for k in keys])
    return buf.getvalue()


def render_spreadsheet(doc: dict, fmt: str) -> str:
    """``doc`` (from :func:`spreadsheet_result`) as ``table``, ``json`` or ``csv`` text."""
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "csv":
        return _csv(doc)
    return _table(doc)


def _default_traces(explicit):
    """The ``nv_small`` folder ``npulab nvdla trace`` plays with no PATH, or a one-line
    :class:`UserError` that says where it looked and how to get the traces."""
    from hw.nvdla.trace_fetch import trace_search
    tried = trace_search(explicit)
    for _, folder in tried:
        if (folder / "nv_small").is_dir():
            return folder / "nv_small"
    where = "; ".join(f"{what}: {folder / 'nv_small'}" for what, folder in tried)
    hint = ("download NVIDIA's traces with 'npulab nvdla fetch-traces'"
            + (" --dest DIR" if len(tried) == 1 else "") + ", or pass a trace folder")
    raise UserError(f"no PATH given and NVIDIA's nv_small traces are not there ({where}): {hint}")


def fetch_main(args) -> int:
    """``npulab nvdla fetch-traces``: download, verify and install the pinned traces."""
    from hw.nvdla.trace_fetch import FetchError, fetch_traces, manifest

    from npulab.progress import Progress
    try:
        with Progress(quiet=args.quiet) as progress:
            result = fetch_traces(args.source, args.dest, allow_missing=args.allow_missing,
                                  progress=progress)
    except FetchError as exc:
        raise UserError(str(exc)) from None
    m = manifest()
    if not args.quiet:
        tests = len({rel.split("/")[0] for rel in m["files"]})
        print(f"npulab nvdla fetch-traces: {result.files} files ({result.bytes / 1e6:.1f} MB) of "
              f"{tests} tests, {m['repository']} at {m['commit'][:8]}, verified; installed in "
              f"{result.folder}"
              + (f"; {len(result.missing)} missing (first: {result.missing[0]})"
                 if result.missing else ""))
    return 0


def trace_main(args) -> int:
    """``npulab nvdla trace``: play every trace, one line each, then the summary."""
    from pathlib import Path

    from hw.nvdla.config import load_nvdla_config
    from hw.nvdla.trace import TraceError, dump, find_traces, play
    try:
        cfg = load_nvdla_config(args.config)
    except (ValueError, OSError) as e:
        raise UserError(f"--config {args.config}: {e}") from None
    if args.dump:
        from hw.files import check_output_dir
        check_output_dir(args.dump, "dump folder", flag="--dump")
    paths = args.paths
    if paths and args.traces is not None:
        raise UserError("--traces DIR applies when no PATH is given (a PATH names the traces "
                        "itself)")
    if not paths:
        paths = [_default_traces(args.traces)]
    try:
        folders = find_traces(paths)
    except TraceError as e:
        raise UserError(str(e)) from None
    passed = failed = 0
    for folder in folders:
        try:
            result = play(folder, cfg)
        except TraceError as e:
            print(f"FAIL {Path(folder).stem}: {e}", flush=True)
            failed += 1
            continue
        print(result.line(), flush=True)
        if args.verbose:
            for i, run in enumerate(result.layers):
                detail = ", ".join(f"{k} {v}" for k, v in run.detail.items())
                cyc = f"{run.cycles:,} cycles" if run.cycles is not None else "no estimate"
                print(f"    layer {i} {run.unit}: {detail}; {cyc} ({cfg.name} cycle model)")
            for c in result.checks:
                what = (f"crc {c.got:#010x}" if c.got is not None else "no data check") \
                    if c.passed else c.message
                print(f"    {c.op} (line {c.line}, {c.sync}): {'ok' if c.passed else 'FAILED'}"
                      f" - {what}")
        if args.dump:
            dump(result, args.dump)
        passed += result.passed
        failed += not result.passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def main(args) -> int:
    if getattr(args, "nvdla_command", None) == "trace":
        return trace_main(args)
    if getattr(args, "nvdla_command", None) == "fetch-traces":
        return fetch_main(args)
    if getattr(args, "nvdla_command", None) != "spreadsheet":
        args.nvdla_parser.print_help()
        return 2
    sram_mb = _number("--sram-mb", args.sram_mb)
    if args.npulab_placement and sram_mb == 0:
        raise UserError("--npulab-placement needs a CV-SRAM: give --sram-mb N with N > 0 "
                        "(--sram-mb 0, the default, is the DRAM-only model)")
    doc = spreadsheet_result(args.model, sram_mb,
                             freq_mhz=_number("--freq-mhz", args.freq_mhz),
                             dram_gbs=_number("--dram-gbs", args.dram_gbs),
                             macs=_number("--macs", args.macs),
                             npulab_rule=args.npulab_placement)
    sys.stdout.write(render_spreadsheet(doc, args.format))
    return 0
