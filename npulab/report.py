"""Render a :class:`~npulab.record.RunRecord` as a text table, JSON or CSV.

Every derived quantity (utilization, bandwidths, MACs per DRAM byte, bound, energy) comes
from the run's metrics (:mod:`npulab.metrics`: one record, one name/label/unit table,
:data:`~npulab.metrics.LAYER_QUANTITIES`); the run supplies only what it measured (cycles,
stalls, bytes, SRAM accesses). Without ``metrics`` the views compute them with the command
line's default energy table, so a table, CSV or DataFrame never disagrees with the HTML
report of the same run.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import fields

from npulab.choices import RUN_FORMATS
from npulab.record import LayerResult, RunRecord

__all__ = ["FORMATS", "TABLES", "render", "to_table", "to_json", "to_csv", "csv_table"]

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
    "compute_util_pct",
    ("map eff %", "mapping_efficiency_pct", ".1f"),
    ("ifmap rd", "ifmap_sram_reads", ","),
    ("filter rd", "filter_sram_reads", ","),
    ("ofmap wr", "ofmap_sram_writes", ","),
    ("psum rd", "ofmap_sram_reads", ","),
    ("vector", "stall_vector_cycles", ","),
]


_NATIVE_COLUMNS = _SHAPE_COLUMNS + [
    ("cycles", "cycles", ","),
    ("compute", "compute_cycles", ","),
    ("stall dram", "stall_dram_cycles", ","),
    ("stall link", "stall_link_cycles", ","),
    ("stall sram", "stall_sram_cycles", ","),
    ("vector", "stall_vector_cycles", ","),
    "busy_span_cycles",
    "compute_util_pct",
    ("DRAM rd B", "dram_read_bytes", ","),
    ("DRAM wr B", "dram_write_bytes", ","),
    ("link B", "link_bytes", ","),
    "dram_bus_gbps",
    "dram_useful_gbps",
    "macs_per_dram_byte",
    "bound",
]


_ENGINE_COLUMNS = [
    ("layer", "name", "s"),
    ("op", "op", "s"),
    ("cycles", "cycles", ","),
    ("compute", "compute_cycles", ","),
    ("stall dram", "stall_dram_cycles", ","),
    ("MACs", "macs", ","),
    "compute_util_pct",
    ("DRAM rd B", "dram_read_bytes", ","),
    ("DRAM wr B", "dram_write_bytes", ","),
    "dram_bus_gbps",
    "energy_uj",
    "bound",
]


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    return format(value, fmt)


_NVDLA_COLUMNS = [
    ("layer", "name", "s"),
    ("units", "op", "s"),
    ("cycles", "cycles", ","),
    ("compute", "compute_cycles", ","),
    ("MACs", "macs", ","),
    "compute_util_pct",
    ("DRAM rd B", "dram_read_bytes", ","),
    ("DRAM wr B", "dram_write_bytes", ","),
    "dram_bus_gbps",
    "macs_per_dram_byte",
    "bound",
    ("CBUF plan", "tiling", "s"),
]


def _grid(columns, layers, metrics, text_last: bool = False) -> list[str]:
    """Header, rule and one fixed-width line per layer: the first two columns left-aligned, the
    rest right-aligned (the last one left-aligned too with ``text_last``). A column is a run
    field ``(header, attribute, format)`` or the key of a metrics quantity
    (:data:`npulab.metrics.LAYER_QUANTITIES`, shown under its label)."""
    from npulab.metrics import LAYER_QUANTITIES
    quantity = {q.key: q for q in LAYER_QUANTITIES}
    by_name = {m["name"]: m for m in metrics.layers}
    columns = [quantity[c] if isinstance(c, str) else c for c in columns]
    rows = [[c.label if not isinstance(c, tuple) else c[0] for c in columns]]
    for layer in layers:
        m = by_name.get(layer.name) if layer.cycles is not None else None
        rows.append([_cell(getattr(layer, c[1]), c[2]) if isinstance(c, tuple)
                     else (c.text(m) if m is not None else "-") for c in columns])
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


def _network_lines(metrics) -> list[str]:
    from npulab.metrics import network_items
    return [f"{label:<22}{text}" for label, text in network_items(metrics)]


def _nvdla_table(result: RunRecord, metrics) -> str:
    cfg = result.spec.config
    t = result.totals
    header = (f"npulab: {result.model} on {result.chip} (NVDLA, {cfg.atomic_c}x"
              f"{cfg.atomic_k} atomic C x K, {t['precision']}, "
              f"{cfg.cbuf_banks * cfg.cbuf_bank_width_bytes * cfg.cbuf_bank_depth // 1024}"
              f" KiB CBUF, {cfg.clock_mhz:g} MHz), timing: {result.timing}")
    lines = [header, f"scope: {result.scope}", ""] + _grid(_NVDLA_COLUMNS, result.layers, metrics,
                                                           text_last=True)
    hw = ", ".join(f"{n} {k}" for k, n in t["hardware_layers"].items())
    lines += [
        "",
        f"total cycles          {t['cycles']:,}",
        f"latency               {t['latency_s'] * 1e3:.4f} ms at {cfg.clock_mhz:g} MHz "
        f"({t['fps']:.1f} inferences/s)",
        f"total MACs            {t['macs']:,}",
        f"MAC utilization       {t['utilization_pct']:.1f} %",
        f"throughput            {t['effective_tops']:.3f} TOPS effective / {t['peak_tops']:.3f} "
        f"TOPS peak",
        *_network_lines(metrics),
        f"memory model          {t['memory']}",
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


def to_table(result: RunRecord, metrics=None) -> str:
    """A fixed-width per-layer table followed by the totals (and the energy summary when
    ``metrics`` from :func:`npulab.metrics.compute_metrics` are given; without them the
    derived columns use the default energy table's metrics and no energy lines are shown)."""
    shown = _metrics_of(result, metrics)
    text = TABLES.get(result.kind, _engine_table)(result, shown)
    if metrics is not None:
        text += "\n".join(_energy_lines(metrics)) + "\n"
    return text


def _metrics_of(result: RunRecord, metrics):
    """``metrics``, or the run's metrics with the command line's default energy table."""
    if metrics is not None:
        return metrics
    from npulab.metrics import compute_metrics
    return compute_metrics(result)


def _header(result: RunRecord) -> str:
    """The table's first line: model, chip, its engine's label, clock and timing."""
    return (f"npulab: {result.model} on {result.chip} ({result._hardware()}, "
            f"{result.spec.clock_mhz:g} MHz), timing: {result.timing}")


def _engine_table(result: RunRecord, metrics) -> str:
    """Any engine kind without a table of its own: what every runner measures (cycles,
    compute and stall cycles, DRAM bytes) and the metrics of every layer and the network."""
    t = result.totals
    lines = [_header(result), f"scope: {result.scope}", ""] + _grid(
        _ENGINE_COLUMNS, result.layers, metrics)
    lines += [
        "",
        f"total cycles          {t['cycles']:,}",
        f"total MACs            {t['macs']:,}",
        f"latency               {t['latency_s'] * 1e3:.4f} ms at {result.spec.clock_mhz:g} MHz",
        *_network_lines(metrics),
        f"layers                {sum(1 for x in result.layers if x.cycles is not None)} run, "
        f"{sum(1 for x in result.layers if x.cycles is None)} not run",
    ]
    return "\n".join(lines) + "\n"


def _systolic_table(result: RunRecord, metrics) -> str:
    arr = result.spec.engine.config
    clock = result.spec.clock_mhz
    columns = _NATIVE_COLUMNS if result.timing == "native" else _COLUMNS
    if any(x.cores is not None for x in result.layers):    # a multi-core chip
        extra = [("cores", "cores", ",")]
        if any(x.stage is not None for x in result.layers):  # a pipeline
            extra.append(("stage", "stage", ","))
        columns = columns[:len(_SHAPE_COLUMNS)] + extra + columns[len(_SHAPE_COLUMNS):]
    fused = any(x.fused for x in result.layers)
    if fused:       # the group each fused op ran in ("<kind>:<anchor>")
        columns = columns + [("fused", "fused", "s")]
    lines = [_header(result), f"scope: {result.scope}", ""] + _grid(columns, result.layers,
                                                                    metrics, text_last=fused)
    t = result.totals
    lines += [
        "",
        f"total cycles          {t['cycles']:,}",
        f"total MACs            {t['macs']:,}",
        f"utilization           {t['utilization_pct']:.1f} % of "
        f"{t.get('cores', 1) * arr.rows * arr.cols} PEs",
        f"latency               {t['latency_s'] * 1e3:.4f} ms at {clock:g} MHz",
        f"throughput            {t['effective_tops']:.3f} TOPS effective / {t['peak_tops']:.3f} TOPS peak"
        + _sparse_throughput(t, arr.macs_per_pe),
        f"SRAM ifmap reads      {t['ifmap_sram_reads']:,}",
        f"SRAM filter reads     {t['filter_sram_reads']:,}",
        f"SRAM ofmap writes     {t['ofmap_sram_writes']:,}",
        f"SRAM psum reads       {t['ofmap_sram_reads']:,}",
    ]
    if result.timing == "native":
        items = _network_lines(metrics)
        lines += [
            f"compute cycles        {t['compute_cycles']:,}",
            f"stall cycles          dram {t['stall_dram_cycles']:,}, link {t['stall_link_cycles']:,}, "
            f"sram {t['stall_sram_cycles']:,}, vector {t.get('stall_vector_cycles', 0):,}",
            *items[:2],
            f"host link traffic     {t['link_bytes']:,} B",
            *items[2:],
            *_multicore_lines(result),
        ]
    vec = [x for x in result.layers if x.engine == "vector"]
    if t.get("vector_busy_cycles") is not None and t["cycles"]:
        # every layer's vector work: the vector ops' own and the fused groups' (in the
        # layers of their anchors, often on the array)
        lines.append(f"vector engine         busy {t['vector_busy_cycles']:,} cycles "
                     f"({100 * t['vector_busy_cycles'] / t['cycles']:.1f} % of the run), "
                     f"{sum(x.actions.vector_ops for x in result.layers if x.actions):,} "
                     f"operations")
    why = ("SCALE-Sim has no vector unit" if result.timing == "scalesim"
           else "ideal vector engine" if result.spec.config.vector.ideal else "views: no bytes move")
    idle = t["layers_not_simulated"]
    in_groups = t.get("layers_fused", 0)
    groups = len({x.fused for x in result.layers if x.fused})
    lines += [
        f"layers                {t['layers_simulated'] - len(vec)} on the array, {len(vec)} on "
        f"the vector engine"
        + (f", {in_groups} fused into them ({groups} fused groups)" if in_groups else "")
        + (f", {idle} not simulated ({why})" if idle else ""),
    ]
    return "\n".join(lines) + "\n"


def multicore_items(totals: dict, spec) -> list[tuple[str, str]]:
    """A multi-core chip's cores, L2 and network as ``(label, text)`` (none on one core without
    an L2): the terminal report's lines and the HTML headline's, word for word."""
    t, cfg = totals, spec.config
    if "cores" not in t or cfg is None:
        return []
    items = [("cores", f"{t['cores']} x {spec.engine.label}: PE utilization min "
                       f"{t['core_utilization_min_pct']:.1f} %, mean "
                       f"{t['core_utilization_mean_pct']:.1f} %, max "
                       f"{t['core_utilization_max_pct']:.1f} %"
                       + (f", {t['cores_idle']} idle" if t["cores_idle"] else ""))]
    if cfg.l2.present:
        items.append(("L2", f"{cfg.l2.capacity_kib:g} KiB: {t['l2_read_bytes']:,} B read, "
                            f"{t['l2_write_bytes']:,} B written, loads {t['l2_hit_pct']:.1f} % "
                            f"hits ({t['l2_hit_bytes']:,} B) / {t['l2_miss_bytes']:,} B from "
                            f"DRAM, {t['l2_gbps']:.2f} GB/s of {t['l2_peak_gbps']:.2f} GB/s, "
                            f"busiest side {t['l2_utilization_pct']:.1f} % busy"
                            + (f", bank conflicts {t['l2_conflict_cycles']:,} cycles"
                               if "l2_conflict_cycles" in t else "")))
    items.append(("network", f"{cfg.noc.topology}, {cfg.noc.link_bytes_per_cycle:g} B/cycle "
                             f"links: {t['noc_bytes']:,} B, a core's port "
                             f"{t['noc_port_utilization_pct']:.1f} % busy, the network "
                             f"{t['noc_network_utilization_pct']:.1f} %"))
    if "pipeline_stages" in t:
        items.append(("pipeline", _pipeline_text(t)))
    return items


def _pipeline_text(t: dict) -> str:
    """The pipeline's line (compiler.backends.stages): its stages, period and rate."""
    def count(n: int, word: str) -> str:
        return f"{n} {word}{'s' if n > 1 else ''}"
    tried = t.get("pipeline_stages_simulated", ())
    return (f"{count(t['pipeline_stages'], 'stage')} x "
            f"{count(t['pipeline_cores_per_stage'], 'core')} (stage cycles "
            f"{', '.join(f'{c:,}' for c in t['pipeline_stage_cycles'])}): a new input every "
            f"{t['pipeline_period_cycles']:,} cycles ({t['pipeline_period_s'] * 1e3:.4f} ms with "
            f"its launches), {t['pipeline_inputs_per_s']:,.1f} inputs/s"
            + (f"; simulated {', '.join(map(str, tried))} stages, kept the shortest period"
               if len(tried) > 1 else ""))


def _multicore_lines(result: RunRecord) -> list[str]:
    return [f"{label:22s}{text}" for label, text in multicore_items(result.totals, result.spec)]


#: The terminal table of each engine kind (a kind not listed gets the generic one).
TABLES = {"systolic": _systolic_table, "nvdla": _nvdla_table}


def to_json(result: RunRecord, metrics=None) -> str:
    """One JSON document: model, chip, config, timing, scope, ``layers`` (list), ``totals``, and
    ``metrics`` (:meth:`npulab.metrics.Metrics.to_dict`) when given."""
    doc = result.to_dict()
    if metrics is not None:
        doc["metrics"] = metrics.to_dict()
    return json.dumps(doc, indent=2) + "\n"


#: LayerResult fields the CSV leaves out: nested data (in the JSON), and what the metrics'
#: columns carry under their own names (utilization, bound).
def _sparse_throughput(t: dict, macs_per_pe: int = 1) -> str:
    """On N:M sparse PEs the PEs skip the pruned MACs: the effective TOPS count every MAC of
    the dense layers (what the network needs), the executed ones what the PEs did. (Sparse
    PEs do one MAC a cycle; a dual-MAC array's busy cycles count two.)"""
    if macs_per_pe > 1:
        return ""
    busy = t.get("pe_busy_cycles")
    if not busy or busy >= t["macs"] or not t["latency_s"]:
        return ""
    return (f" ({2 * busy / t['latency_s'] / 1e12:.3f} TOPS executed: sparse PEs skipped "
            f"{100.0 * (1 - busy / t['macs']):.1f} % of the MACs)")


_CSV_SKIP = ("actions", "units", "utilization_pct", "bound")


def csv_table(result: RunRecord, metrics=None) -> tuple[list[str], list[list]]:
    """The header and rows of :func:`to_csv` as Python values (``None`` for an empty cell):
    what the run measured (every scalar :class:`LayerResult` field but the derived ones), then
    the metrics' columns (:func:`npulab.metrics.layer_columns`; ``metrics`` default to the
    run's with the default energy table). :meth:`npulab.simulate.RunResult.to_pandas` builds its DataFrame
    from the same rows."""
    from npulab.metrics import layer_columns
    metrics = _metrics_of(result, metrics)
    skip = _CSV_SKIP + tuple(name for name in ("cores", "stage")
                             if all(getattr(x, name) is None for x in result.layers))
    names = [f.name for f in fields(LayerResult) if f.name not in skip]
    by_name = {m["name"]: m for m in metrics.layers}
    cols = layer_columns(metrics.layers)
    rows = []
    for layer in result.layers:
        m = by_name.get(layer.name) if layer.cycles is not None else None
        rows.append([getattr(layer, n) for n in names]
                    + [q.value(m) if m is not None else None for q in cols])
    return names + [q.key for q in cols], rows


def to_csv(result: RunRecord, metrics=None) -> str:
    """One row per layer: the run's measured fields and the metrics' columns
    (:func:`csv_table`); empty cells for ``None`` (the nested ``actions``/``units`` are in
    the JSON)."""
    header, rows = csv_table(result, metrics)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_blank(v) for v in row])
    return buf.getvalue()


def _blank(value):
    return "" if value is None else value


def render(result: RunRecord, fmt: str, metrics=None) -> str:
    if fmt == "table":
        return to_table(result, metrics)
    if fmt == "json":
        return to_json(result, metrics)
    if fmt == "csv":
        return to_csv(result, metrics)
    raise ValueError(f"format = {fmt!r}: must be one of {', '.join(FORMATS)}")
