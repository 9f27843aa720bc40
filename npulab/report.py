"""Render a :class:`~npulab.simulate.RunResult` as a text table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import fields

from npulab.choices import RUN_FORMATS
from npulab.simulate import LayerResult, RunResult

__all__ = ["FORMATS", "render", "to_table", "to_json", "to_csv", "csv_table"]

FORMATS = RUN_FORMATS

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


def _energy_lines(metrics) -> list[str]:
    """The energy summary under the totals (see :mod:`npulab.metrics`)."""
    from npulab.metrics import format_si
    n = metrics.network
    total = n["energy_j"] or 1.0
    parts = sorted(n["energy_breakdown_j"].items(), key=lambda kv: -kv[1])
    shares = ", ".join(f"{k} {100 * v / total:.0f} %" for k, v in parts if v / total >= 0.005)
    dram = metrics.chip["dram"]
    per_mac = (f" ({n['energy_per_mac_j'] * 1e12:.3g} pJ/MAC)" if n["energy_per_mac_j"] else "")
    lines = [
        f"energy                {format_si(n['energy_per_inference_j'], 'J')} per inference"
        f"{per_mac}, {metrics.technology['name']} table: {shares}",
        f"power                 {format_si(n['average_power_w'], 'W')} average (on chip "
        f"{format_si(n['on_chip_power_w'], 'W')}), {format_si(n['peak_power_w'], 'W')} in the "
        f"busiest layer",
        f"efficiency            {n['tops_per_w']:.3g} TOPS/W",
    ]
    if dram["kind_assumed"] and n["energy_breakdown_j"].get("dram"):
        lines.append(f"note                  DRAM costed as {dram['kind']} (the config names no "
                     f"DRAM device; --dram-type sets one)")
    return lines


def to_table(result: RunResult, metrics=None) -> str:
    """A fixed-width per-layer table followed by the totals (and the energy summary when
    ``metrics`` from :func:`npulab.metrics.compute_metrics` are given)."""
    text = _nvdla_table(result) if result.timing == "nvdla" else _systolic_table(result)
    if metrics is not None:
        text += "\n".join(_energy_lines(metrics)) + "\n"
    return text


def _systolic_table(result: RunResult) -> str:
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


def to_json(result: RunResult, metrics=None) -> str:
    """One JSON document: model, chip, config, timing, scope, ``layers`` (list), ``totals``, and
    ``metrics`` (:meth:`npulab.metrics.Metrics.to_dict`) when given."""
    doc = result.to_dict()
    if metrics is not None:
        doc["metrics"] = metrics.to_dict()
    return json.dumps(doc, indent=2) + "\n"


#: Per-layer metric columns appended to the CSV when metrics are given (name, getter).
_METRIC_COLUMNS = (
    ("seconds", lambda m: m["seconds"]),
    ("active_cycles", lambda m: m["active_cycles"]),
    ("ops_per_s", lambda m: m["ops_per_s"]),
    ("compute_utilization", lambda m: m["compute_utilization"]),
    ("energy_j", lambda m: m["energy_j"]),
    ("power_w", lambda m: m["power_w"]),
    ("tops_per_w", lambda m: m["tops_per_w"]),
    ("ops_per_dram_byte", lambda m: m["arithmetic_intensity_ops_per_dram_byte"]),
    ("roofline_bound", lambda m: m["bound"]),
    ("attainable_ops_per_s", lambda m: m["roofline"]["attainable_ops_per_s"]),
)


def csv_table(result: RunResult, metrics=None) -> tuple[list[str], list[list]]:
    """The header and rows of :func:`to_csv` as Python values (``None`` for an empty cell);
    :meth:`RunResult.to_pandas` builds its DataFrame from the same rows."""
    from npulab.metrics import ordered_components
    names = [f.name for f in fields(LayerResult) if f.name not in ("actions", "units")]
    by_name = {}
    extra: list[str] = []
    if metrics is not None:
        by_name = {m["name"]: m for m in metrics.layers}
        components = ordered_components(sorted({k for m in metrics.layers
                                                for k in m["energy_breakdown_j"]}))
        levels = ordered_components(sorted({k for m in metrics.layers for k in m["memory"]}))
        extra = ([c for c, _ in _METRIC_COLUMNS] + [f"energy_{c}_j" for c in components]
                 + [f"{lv}_utilization" for lv in levels])
    rows = []
    for layer in result.layers:
        row = [getattr(layer, n) for n in names]
        m = by_name.get(layer.name)
        if extra:
            if m is None:
                row += [None] * len(extra)
            else:
                row += [get(m) for _, get in _METRIC_COLUMNS]
                row += [m["energy_breakdown_j"].get(c) for c in components]
                row += [m["memory"].get(lv, {}).get("utilization") for lv in levels]
        rows.append(row)
    return names + extra, rows


def to_csv(result: RunResult, metrics=None) -> str:
    """One row per layer with every scalar :class:`LayerResult` field; empty cells for ``None``
    (the nested ``actions``/``units`` are in the JSON)."""
    header, rows = csv_table(result, metrics)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_blank(v) for v in row])
    return buf.getvalue()


def _blank(value):
    return "" if value is None else value


def render(result: RunResult, fmt: str, metrics=None) -> str:
    if fmt == "table":
        return to_table(result, metrics)
    if fmt == "json":
        return to_json(result, metrics)
    if fmt == "csv":
        return to_csv(result, metrics)
    raise ValueError(f"format = {fmt!r}: must be one of {', '.join(FORMATS)}")
