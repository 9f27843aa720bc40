"""Render a :class:`~npulab.simulate.RunResult` as a text table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import fields

from npulab.simulate import LayerResult, RunResult

__all__ = ["FORMATS", "render", "to_table", "to_json", "to_csv"]

FORMATS = ("table", "json", "csv")

_SHAPE_COLUMNS = [  # (header, attribute, format)
    ("layer", "name", "s"),
    ("op", "op", "s"),
    ("gemms", "gemm_count", "d"),
    ("M", "gemm_m", "d"),
    ("N", "gemm_n", "d"),
    ("K", "gemm_k", "d"),
]
_COLUMNS = _SHAPE_COLUMNS + [
    ("cycles", "cycles", ","),
    ("MACs", "macs", ","),
    ("util %", "utilization_pct", ".1f"),
    ("map eff %", "mapping_efficiency_pct", ".1f"),
    ("ifmap rd", "ifmap_sram_reads", ","),
    ("filter rd", "filter_sram_reads", ","),
    ("ofmap wr", "ofmap_sram_writes", ","),
    ("psum rd", "ofmap_sram_reads", ","),
]


_NATIVE_COLUMNS = _SHAPE_COLUMNS + [
    ("cycles", "cycles", ","),
    ("compute", "compute_cycles", ","),
    ("stall dram", "stall_dram_cycles", ","),
    ("stall link", "stall_link_cycles", ","),
    ("stall sram", "stall_sram_cycles", ","),
    ("util %", "utilization_pct", ".1f"),
    ("DRAM rd B", "dram_read_bytes", ","),
    ("DRAM wr B", "dram_write_bytes", ","),
    ("link B", "link_bytes", ","),
    ("GB/s", "dram_bandwidth_gbps", ".2f"),
    ("MAC/B", "arithmetic_intensity", ".1f"),
    ("bound", "bound", "s"),
]


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    return format(value, fmt)


_NVDLA_COLUMNS = [
    ("layer", "name", "s"),
    ("units", "op", "s"),
    ("cycles", "cycles", ","),
    ("busy", "compute_cycles", ","),
    ("MACs", "macs", ","),
    ("util %", "utilization_pct", ".1f"),
    ("DRAM rd B", "dram_read_bytes", ","),
    ("DRAM wr B", "dram_write_bytes", ","),
    ("GB/s", "dram_bandwidth_gbps", ".2f"),
    ("MAC/B", "arithmetic_intensity", ".1f"),
    ("bound", "bound", "s"),
    ("CBUF plan", "tiling", "s"),
]


def _grid(columns, layers, text_last: bool = False) -> list[str]:
    """Header, rule and one fixed-width line per layer: the first two columns left-aligned, the
    rest right-aligned (the last one left-aligned too with ``text_last``)."""
    rows = [[h for h, _, _ in columns]]
    for layer in layers:
        rows.append([_cell(getattr(layer, attr), fmt) for _, attr, fmt in columns])
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    last = len(columns) - 1
    lines = []
    for n, r in enumerate(rows):
        cells = [c.ljust(w) if i < 2 or (text_last and i == last) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _nvdla_table(result: RunResult) -> str:
    cfg = result.config["nvdla"]
    t = result.totals
    header = (f"npulab: {result.model} on {result.chip} (NVDLA, {cfg['atomic_c']}x"
              f"{cfg['atomic_k']} atomic C x K, {t['precision']}, "
              f"{cfg['cbuf_banks'] * cfg['cbuf_bank_width_bytes'] * cfg['cbuf_bank_depth'] // 1024}"
              f" KiB CBUF, {cfg['clock_mhz']:g} MHz), timing: nvdla")
    lines = [header, f"scope: {result.scope}", ""] + _grid(_NVDLA_COLUMNS, result.layers,
                                                           text_last=True)
    hw = ", ".join(f"{n} {k}" for k, n in t["hardware_layers"].items())
    lines += [
        "",
        f"total cycles          {t['cycles']:,}",
        f"latency               {t['latency_s'] * 1e3:.4f} ms at {cfg['clock_mhz']:g} MHz "
        f"({t['fps']:.1f} inferences/s)",
        f"total MACs            {t['macs']:,}",
        f"MAC utilization       {t['utilization_pct']:.1f} %",
        f"throughput            {t['effective_tops']:.3f} TOPS effective / {t['peak_tops']:.3f} "
        f"TOPS peak",
        f"DRAM traffic          {t['dram_read_bytes']:,} B read, {t['dram_write_bytes']:,} B written",
        f"DRAM bandwidth        {t['dram_bandwidth_gbps']:.2f} GB/s achieved of "
        f"{t['dram_available_gbps']:.2f} GB/s available ({t['memory']})",
        "arithmetic intensity  " + (f"{t['arithmetic_intensity']:.1f} MACs per DRAM byte"
                                    if t["arithmetic_intensity"] else "-"),
        f"memory-bound layers   {t['memory_bound_layers']} of {t['layers_simulated']}",
        f"hardware layers       {hw}",
    ]
    if t["ops_skipped"]:
        lines.append(f"ops skipped           {len(t['ops_skipped'])} "
                     f"({t['skipped_macs']:,} MACs): " + "; ".join(t["ops_skipped"]))
    return "\n".join(lines) + "\n"


def to_table(result: RunResult) -> str:
    """A fixed-width per-layer table followed by the totals."""
    if result.timing == "nvdla":
        return _nvdla_table(result)
    arr = result.config["array"]
    header = (f"npulab: {result.model} on {result.chip} ({arr['rows']}x{arr['cols']} "
              f"{arr['dataflow']} {arr['precision']}, {result.config['chip']['clock_mhz']:g} MHz), "
              f"timing: {result.timing}")
    columns = _NATIVE_COLUMNS if result.timing == "native" else _COLUMNS
    lines = [header, f"scope: {result.scope}", ""] + _grid(columns, result.layers)
    t = result.totals
    lines += [
        "",
        f"total cycles          {t['cycles']:,}",
        f"total MACs            {t['macs']:,}",
        f"utilization           {t['utilization_pct']:.1f} % of {arr['rows'] * arr['cols']} PEs",
        f"latency               {t['latency_s'] * 1e3:.4f} ms at {result.config['chip']['clock_mhz']:g} MHz",
        f"throughput            {t['effective_tops']:.3f} TOPS effective / {t['peak_tops']:.3f} TOPS peak",
        f"SRAM ifmap reads      {t['ifmap_sram_reads']:,}",
        f"SRAM filter reads     {t['filter_sram_reads']:,}",
        f"SRAM ofmap writes     {t['ofmap_sram_writes']:,}",
        f"SRAM psum reads       {t['ofmap_sram_reads']:,}",
    ]
    if result.timing == "native":
        mem = result.config
        peak = t["dram_peak_gbps"]
        lines += [
            f"compute cycles        {t['compute_cycles']:,}",
            f"stall cycles          dram {t['stall_dram_cycles']:,}, link {t['stall_link_cycles']:,}, "
            f"sram {t['stall_sram_cycles']:,}",
            f"DRAM traffic          {t['dram_read_bytes']:,} B read, {t['dram_write_bytes']:,} B written "
            f"({t['dram_bus_bytes']:,} B on the bus)",
            f"DRAM bandwidth        {t['dram_bandwidth_gbps']:.2f} GB/s achieved"
            + (f" of {peak:.1f} GB/s peak ({mem['dram']['preset']})" if peak else " (ideal DRAM)"),
            f"host link traffic     {t['link_bytes']:,} B",
            "arithmetic intensity  " + (f"{t['arithmetic_intensity']:.1f} MACs per DRAM byte"
                                        if t["arithmetic_intensity"] else "-"),
            f"memory-bound layers   {t['memory_bound_layers']} of {t['layers_simulated']}",
        ]
    lines += [
        f"layers                {t['layers_simulated']} on the array, "
        f"{t['layers_not_simulated']} pool/eltwise not simulated (no vector unit modelled)",
    ]
    return "\n".join(lines) + "\n"


def to_json(result: RunResult) -> str:
    """One JSON document: model, chip, config, timing, scope, ``layers`` (list), ``totals``."""
    return json.dumps(result.to_dict(), indent=2) + "\n"


def to_csv(result: RunResult) -> str:
    """One row per layer with every scalar :class:`LayerResult` field; empty cells for ``None``
    (the nested ``actions``/``units`` are in the JSON)."""
    names = [f.name for f in fields(LayerResult) if f.name not in ("actions", "units")]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for layer in result.layers:
        writer.writerow(["" if getattr(layer, n) is None else getattr(layer, n) for n in names])
    return buf.getvalue()


def render(result: RunResult, fmt: str) -> str:
    if fmt == "table":
        return to_table(result)
    if fmt == "json":
        return to_json(result)
    if fmt == "csv":
        return to_csv(result)
    raise ValueError(f"format = {fmt!r}: must be one of {', '.join(FORMATS)}")
