"""Metrics of a run: latency, throughput, energy and power, utilizations, roofline bounds.

:func:`compute_metrics` turns a run (a :class:`~npulab.simulate.RunResult` or its
``to_dict()``, e.g. read back from ``summary.json``) and an energy table
(:class:`hw.energy.Technology`) into per-layer and per-network metrics. Everything is derived
from each layer's ``cycles`` and ``actions`` (what the hardware did) and the chip config, so a
saved run can be re-costed with another technology (``npulab report DIR --tech 7nm``).

Energy components (joules), each the layer's actions x the chip's
:class:`~hw.energy.EnergyRates` (:mod:`hw.energy.rates`, the rates the mapper charges too):

* ``mac``: ``macs x`` :meth:`~hw.energy.Technology.mac_pj` (precision, accumulator width);
* ``rf``: PE register / register-file bits written x ``register.pj_per_bit``;
* ``sram.<name>``: bits read and written x the per-bit energy of one bank of that scratchpad
  (systolic chips: ``ifmap``, ``filter``, ``ofmap``; NVDLA: ``cbuf``);
* ``vector``: post-processing element operations (NVDLA SDP/PDP/CDP), each one 32-bit add plus
  one 16-bit multiply (fp32 for fp16 networks);
* ``noc``: a multi-core chip's on-chip network, bits x mean hops (``actions.noc_bit_hops``)
  x ``noc.pj_per_bit_hop`` (absent on one core);
* ``dram``: bits on the DRAM bus x pJ/bit of the DRAM type (so bus width does not change the
  energy of a byte);
* ``link``: bits over the host link x pJ/bit of the link type;
* ``static``: leakage power of the chip's area x the layer's time.

``on_chip`` is everything but ``dram`` and ``link``. Identities the tests hold: energy = sum of
the breakdown; average power = energy / time; TOPS/W = (ops/s) / W; every utilization <= 1.
Peak power is the highest layer-average power (the resolution of a layer).

Roofline: a layer's attainable performance is ``min(peak MACs/s, intensity_x * bandwidth_x)``
over the off-chip levels ``x`` it moved bytes through (DRAM, the host link), with
``intensity_x`` = MACs per byte on ``x``'s bus (DRAM: whole bursts, the over-fetch included,
the bytes its bandwidth limit applies to); ``roofline.bound`` names the ceiling that gives the
minimum. Scratchpad bandwidth is
reported as utilization per level, not as a ceiling: native timing stalls on bank conflicts and
on each scratchpad's port bandwidth (:mod:`hw.executor`), so it stays <= 1; the compute-only
timings take the array edge's bandwidth as the peak where it exceeds the configured one
(:func:`_sram_peak`). Arithmetic intensity is in **MACs per
byte** in every view (one MAC = one multiply-add; throughput in TOPS counts 2 ops per MAC).

One record, every view: the terminal table, ``layers.csv``, the JSON, ``report.html``, the
plots and the notebook reprs all read these dicts; none recomputes a quantity. Per layer:

* time: ``cycles`` is the layer's accounting window (windows add up to the run);
  ``active_cycles`` its **busy span** (the window, or longer when its own transfers or compute
  overlapped the previous window, as a native run's prefetch does). Rates and utilizations of
  a layer are over its busy span, so none exceeds 1; the network's are over the run;
* DRAM bytes: ``useful_bytes`` (read + written, what the program asked for) and ``bytes``
  (on the bus: whole bursts, the over-fetch included); ``useful_bytes_per_s`` and
  ``bytes_per_s`` (bus) are both reported; DRAM utilization and MACs per DRAM byte are over
  the bus bytes;
* ``bound``: what the simulation found busiest (the runner's verdict: array compute, DRAM or
  link transfer time; compute-only timing: ``compute``); ``roofline.bound`` is the model's.

:data:`LAYER_QUANTITIES` names each per-layer quantity once: its column name (CSV, pandas),
label (terminal, HTML) and unit; :func:`network_items` the network lines the terminal and
the HTML headline share.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.energy import (
    DEFAULT_TECHNOLOGY, EnergyRates, HardwareFacts, Technology, energy_rates, load_technology,
)
from hw.systolic.config import ArrayConfig

__all__ = ["Metrics", "compute_metrics", "COMPONENT_ORDER", "ordered_components", "format_si",
           "Quantity", "LAYER_QUANTITIES", "layer_columns", "network_items", "memory_bound"]

COMPONENT_ORDER = ("mac", "rf", "sram", "vector", "noc", "dram", "link", "static")
_OFF_CHIP = ("dram", "link")


@dataclass(frozen=True)
class Metrics:
    """``network`` and ``layers`` (plain dicts, JSON-ready), the chip view they used, and the
    energy table (``technology``: name, file and every entry with its citation)."""

    network: dict
    layers: list
    chip: dict
    technology: dict

    def to_dict(self) -> dict:
        return {"technology": self.technology, "chip": self.chip, "network": self.network,
                "layers": self.layers}

    # ---- notebook API ------------------------------------------------------------------------

    def summary_lines(self) -> list[str]:
        n = self.network
        total = n["energy_j"] or 1.0
        parts = sorted(n["energy_breakdown_j"].items(), key=lambda kv: -kv[1])
        shares = ", ".join(f"{k} {100 * v / total:.0f} %" for k, v in parts[:4])
        bounds = ", ".join(f"{k} {v}" for k, v in sorted(n["bound_counts"].items()))
        memory = [f"{label.lower()} {text}" for label, text in network_items(self)[1:3]]
        per_mac = (f" ({n['energy_per_mac_j'] * 1e12:.3g} pJ/MAC)"
                   if n["energy_per_mac_j"] else "")
        return [
            f"energy {format_si(n['energy_per_inference_j'], 'J')} per inference{per_mac}: "
            f"{shares}",
            f"power {format_si(n['average_power_w'], 'W')} average, "
            f"{format_si(n['peak_power_w'], 'W')} peak layer; {n['tops_per_w']:.3g} TOPS/W",
            f"time {format_si(n['seconds'], 's')}, {n['inferences_per_s']:.4g} inferences/s, "
            f"compute utilization {100 * n['compute_utilization']:.1f} %",
            *memory,
            f"layer bounds: {bounds or '-'}; {n['layers_costed']} layers costed "
            f"(to_pandas() for the table)",
        ]

    def __repr__(self) -> str:
        return "\n".join([f"Metrics ({self.technology.get('name', '?')} energy table)"]
                         + ["  " + line for line in self.summary_lines()])

    def table(self) -> tuple[list[str], list[list]]:
        """Header and rows of :meth:`to_pandas` (Python values, ``None`` where undefined):
        name, op, engine, cycles, MACs and the columns of :func:`layer_columns`."""
        head = ["name", "op", "engine", "cycles", "macs"]
        cols = layer_columns(self.layers)
        return (head + [q.key for q in cols],
                [[m[k] for k in head] + [q.value(m) for q in cols] for m in self.layers])

    def to_pandas(self):
        """One row per costed layer: name, op, engine, cycles, MACs and the metric columns of
        ``layers.csv`` (:func:`layer_columns`: time, busy span, utilization, energy and
        power, TOPS/W, DRAM bus bytes and bandwidths, MACs per DRAM byte, bounds, energy per
        component, utilization per memory level). Needs pandas."""
        from hw._notebook import frame
        return frame(*self.table())

    def _repr_html_(self) -> str:
        from hw._notebook import html_table
        header, rows = self.table()
        cols = ["name", "cycles", "busy_span_cycles", "compute_util_pct", "energy_uj",
                "power_mw", "tops_per_w", "dram_bus_gbps", "dram_useful_gbps",
                "macs_per_dram_byte", "bound"]
        idx = [header.index(c) for c in cols]
        return html_table(f"Metrics ({self.technology.get('name', '?')} energy table)",
                          cols, [[r[i] for i in idx] for r in rows], lines=self.summary_lines())


# ---- one name, label and unit per quantity -----------------------------------------------------

@dataclass(frozen=True)
class Quantity:
    """A per-layer quantity as every view shows it: ``key`` is its column in ``layers.csv``
    and ``to_pandas()``, ``label`` its header in the terminal table and ``report.html``
    (unit included), ``scale`` turns the metrics record's SI value into that unit and
    ``fmt`` is the display format. :meth:`value` reads the record (None where undefined)."""

    key: str
    label: str
    scale: float | None
    fmt: str
    path: tuple

    def value(self, m: dict):
        v = m
        for part in self.path:
            v = v.get(part) if isinstance(v, dict) else None
            if v is None:
                return None
        if self.scale is None:
            return v
        v = v * self.scale
        return int(round(v)) if self.fmt == "," else v

    def text(self, m: dict) -> str:
        v = self.value(m)
        return "-" if v is None else format(v, self.fmt)


#: The derived per-layer quantities of every view, in display order (energy per component and
#: utilization per memory level follow, see :func:`layer_columns`).
LAYER_QUANTITIES = (
    Quantity("time_us", "time µs", 1e6, ",.2f", ("seconds",)),
    Quantity("busy_span_cycles", "busy span", 1, ",", ("active_cycles",)),
    Quantity("compute_util_pct", "util %", 100, ".1f", ("compute_utilization",)),
    Quantity("tops", "TOPS", 1e-12, ".3g", ("ops_per_s",)),
    Quantity("energy_uj", "energy µJ", 1e6, ",.2f", ("energy_j",)),
    Quantity("power_mw", "power mW", 1e3, ",.1f", ("power_w",)),
    Quantity("tops_per_w", "TOPS/W", 1, ".3g", ("tops_per_w",)),
    Quantity("dram_bus_bytes", "DRAM bus B", 1, ",", ("memory", "dram", "bytes")),
    Quantity("dram_bus_gbps", "bus GB/s", 1e-9, ".2f", ("memory", "dram", "bytes_per_s")),
    Quantity("dram_useful_gbps", "useful GB/s", 1e-9, ".2f",
             ("memory", "dram", "useful_bytes_per_s")),
    Quantity("macs_per_dram_byte", "MAC/B", 1, ".1f", ("macs_per_dram_byte",)),
    Quantity("bound", "bound", None, "s", ("bound",)),
    Quantity("roofline_bound", "roofline bound", None, "s", ("roofline", "bound")),
    Quantity("attainable_gmacs", "attainable GMAC/s", 1e-9, ",.1f",
             ("roofline", "attainable_macs_per_s")),
)


def layer_columns(layers: list) -> list[Quantity]:
    """:data:`LAYER_QUANTITIES`, then the energy of each component (µJ) and the bandwidth
    utilization (%) of each memory level the ``layers`` (metrics layer dicts) have."""
    components = ordered_components(sorted({k for m in layers for k in m["energy_breakdown_j"]}))
    levels = ordered_components(sorted({k for m in layers for k in m["memory"]}))
    return (list(LAYER_QUANTITIES)
            + [Quantity(f"energy_{c}_uj", f"energy {c} µJ", 1e6, ",.3f",
                        ("energy_breakdown_j", c)) for c in components]
            + [Quantity(f"{lv}_util_pct", f"{lv} util %", 100, ".1f",
                        ("memory", lv, "utilization")) for lv in levels])


def network_items(metrics) -> list[tuple[str, str]]:
    """The network's memory lines as ``(label, text)``, shared word for word by the terminal
    totals and the HTML headline: DRAM traffic, DRAM bandwidth on the bus and useful,
    arithmetic intensity, memory-bound layers."""
    m = metrics if isinstance(metrics, dict) else metrics.to_dict()
    n = m["network"]
    dram = n["memory"].get("dram") or {}
    peak = dram.get("peak_bytes_per_s")
    preset = (m["chip"].get("dram") or {}).get("preset") or "-"
    if peak:
        limit = (f" ({100 * (dram.get('utilization') or 0):.1f} % of {peak / 1e9:.1f} GB/s peak"
                 + (f", {preset})" if preset != "-" else ")"))
    else:
        limit = " (ideal DRAM: no limit)"
    x = n.get("macs_per_dram_byte")
    return [
        ("DRAM traffic", f"{int(dram.get('useful_read_bytes', 0)):,} B read, "
                         f"{int(dram.get('useful_write_bytes', 0)):,} B written "
                         f"({int(dram.get('bytes', 0)):,} B on the bus)"),
        ("DRAM bandwidth", f"{dram.get('bytes_per_s', 0) / 1e9:.2f} GB/s on the bus{limit}, "
                           f"{dram.get('useful_bytes_per_s', 0) / 1e9:.2f} GB/s useful"),
        ("arithmetic intensity", f"{x:.1f} MACs per DRAM byte" if x else
         "- (no MACs)" if not n.get("macs") else "- (no DRAM bytes)"),
        ("memory-bound layers", f"{memory_bound(n)} of {n['layers_costed']}"),
    ]


def ordered_components(keys) -> list[str]:
    """``keys`` (energy components, or memory levels) in :data:`COMPONENT_ORDER`, every
    scratchpad (``sram.<name>``) in the ``sram`` slot in the order given, unknown keys last."""
    keys = list(keys)
    out = []
    for comp in COMPONENT_ORDER:
        if comp == "sram":
            out += [k for k in keys if k.startswith("sram.")]
        elif comp in keys:
            out.append(comp)
    return out + [k for k in keys if k not in out]


def _record(run):
    """``run`` as a typed :class:`~npulab.record.RunRecord` (a saved run's dict is read back)."""
    from npulab.record import RunRecord
    return run if isinstance(run, RunRecord) else RunRecord.from_dict(run)


# ---- the chip as metrics see it --------------------------------------------------------------

def chip_view(run, tech: Technology, dram_kind: str | None = None,
              link_kind: str = "pcie") -> tuple[dict, EnergyRates]:
    """The chip as the metrics see it -- clock, peak MAC rate, scratchpads (bank size, width,
    peak bandwidth), DRAM and link bandwidth and energy types, the area leakage is charged on --
    and its :class:`~hw.energy.EnergyRates` (the mapper's, for the same chip and table).
    ``run``: a :class:`~npulab.record.RunRecord` (or its dict)."""
    run = _record(run)
    spec = run.spec
    totals = run.totals
    macs_per_cycle = totals["peak_macs_per_cycle"]
    facts = HardwareFacts.of(spec, totals.get("precision"))
    levels = {m.name: m for m in spec.memory_levels()}
    widths = {name: 8 * m.bank_width_bytes for name, m in levels.items()}
    # a core's scratchpad: every core's together (the cores of a layer each read their own)
    peaks = {name: _sram_peak(spec, m, run.timing) * (1 if m.shared_by else len(spec.cores))
             for name, m in levels.items()}
    # the bandwidth of the memory path the runner timed (NVDLA: DBB x DRAM), else the DRAM's
    dram_gbps = totals.get("dram_available_gbps")
    if dram_gbps is None and spec.dram is not None and not spec.dram.is_ideal:
        dram_gbps = spec.dram.peak_gbps
    link = spec.host_link
    link_gbps = None if link is None or link.ideal else link.effective_gbps
    rates = energy_rates(tech, facts, dram_kind=dram_kind, link_kind=link_kind)
    srams = {name: {"capacity_bytes": s.capacity_bytes, "bank_bytes": s.bank_bytes,
                    "width_bits": widths[name], "peak_bytes_per_cycle": peaks[name]}
             for name, s in rates.scratchpads.items()}
    clock_mhz = spec.clock_mhz
    return {
        "clock_hz": clock_mhz * 1e6, "precision": rates.precision, "acc_bits": rates.acc_bits,
        "peak_macs_per_cycle": macs_per_cycle,
        "peak_ops_per_s": 2 * macs_per_cycle * clock_mhz * 1e6,
        "srams": srams,
        "dram": {"kind": rates.dram_kind, "kind_assumed": rates.dram_kind_assumed,
                 "preset": rates.dram_preset or "-",
                 "peak_bytes_per_s": dram_gbps * 1e9 if dram_gbps else None},
        "link": {"kind": rates.link_kind,
                 "peak_bytes_per_s": link_gbps * 1e9 if link_gbps else None},
        "area_mm2": dict(rates.area_mm2), "area_total_mm2": rates.area_total_mm2,
        "static_power_w": rates.leakage_w,
    }, rates


def _sram_peak(spec, level, timing: str) -> float:
    """A scratchpad's peak bytes per cycle per direction: ``banks x bank_width_bytes x ports``
    (native timing stalls on it, :mod:`hw.executor`). The compute-only timings (systolic
    chips) assume operands resident in SRAM with unlimited bandwidth, so there the scratchpad
    serves whatever the array's edge asks: the peak is the larger of the configured one and the
    array edge's, ``max(rows, cols)`` elements per cycle (operand width; accumulator width for
    the output scratchpad)."""
    peak = level.bytes_per_cycle
    a = spec.engine.config
    if timing not in ("compute", "scalesim") or not isinstance(a, ArrayConfig):
        return peak
    width = (a.acc_bits if "output" in level.holds else a.precision.bits) / 8
    return max(peak, max(a.rows, a.cols) * width)


# ---- per layer --------------------------------------------------------------------------------

def _layer_energy(layer, seconds: float, rates: EnergyRates) -> dict:
    """Joules per component (``sram.<name>`` one entry per scratchpad) of ``layer``'s actions,
    charged at the chip's ``rates``."""
    actions = layer.actions
    if (actions.precision, actions.acc_bits) != (rates.precision, rates.acc_bits):
        raise ValueError(f"layer {layer.name}: actions at precision = "
                         f"{actions.precision!r}, acc_bits = {actions.acc_bits!r}: "
                         f"must be the chip's ({rates.precision}, {rates.acc_bits} bits)")
    pj = {}
    pj["mac"] = actions.macs * (1.0 - actions.act_zeros) * rates.mac_pj   # zeros gate MACs
    pj["rf"] = actions.reg_bits * rates.register_pj_per_bit
    for name, s in rates.scratchpads.items():
        a = actions.level(name)
        pj[f"sram.{name}"] = a.read_bits * s.read_pj_per_bit + a.write_bits * s.write_pj_per_bit
    pj["vector"] = (sum(n * rates.vector_pj[op] for op, n in actions.vector_by_op.items())
                    if actions.vector_by_op else actions.vector_ops * rates.vector_op_pj)
    if actions.noc_bit_hops:            # a multi-core chip's on-chip network
        pj["noc"] = actions.noc_bit_hops * rates.noc_pj_per_bit_hop
    pj["dram"] = actions.dram_bits * rates.dram_pj_per_bit
    pj["link"] = actions.link_bits * rates.link_pj_per_bit
    joules = {k: v * 1e-12 for k, v in pj.items()}
    joules["static"] = rates.leakage_w * seconds
    return joules


def _memory_levels(actions, seconds: float, chip: dict, useful=None) -> dict:
    """Bytes moved through each level, bytes/s and peak bandwidth, and utilization.

    DRAM: ``bytes`` are on the bus (``actions.dram_bits``: whole bursts, over-fetch
    included), ``useful_bytes`` the bytes read and written (``useful`` = (read, written);
    without it, the bus bytes); utilization is bus bytes/s over the peak. The host link: all
    bytes over its peak. A scratchpad: reads and writes are counted apart and its utilization
    is the busier direction over the per-direction peak (banks x bank width x ports per cycle;
    the accumulator scratchpad is read-modify-written every cycle, as a 1R1W macro does)."""
    levels = {}
    bus = actions.dram_bits / 8
    read, written = useful if useful is not None else (bus, 0.0)
    levels["dram"] = _dram_level(bus, read, written, seconds, chip["dram"]["peak_bytes_per_s"])
    for name, s in chip["srams"].items():
        a = actions.level(name)
        levels[f"sram.{name}"] = _level(a.read_bits / 8, a.write_bits / 8, seconds,
                                        s["peak_bytes_per_cycle"] * chip["clock_hz"], True)
    levels["link"] = _level(actions.link_bits / 8, 0.0, seconds,
                            chip["link"]["peak_bytes_per_s"], False)
    return levels


def _level(first: float, second: float, seconds: float, peak, per_direction: bool) -> dict:
    nbytes = first + second
    busiest = max(first, second) if per_direction else nbytes
    return {"bytes": nbytes,
            **({"read_bytes": first, "write_bytes": second} if per_direction else {}),
            "bytes_per_s": nbytes / seconds if seconds else 0.0, "peak_bytes_per_s": peak,
            "utilization": (busiest / seconds / peak) if peak and seconds else None}


def _dram_level(bus: float, read: float, written: float, seconds: float, peak) -> dict:
    level = _level(bus, 0.0, seconds, peak, False)
    useful = read + written
    level.update(useful_bytes=useful, useful_read_bytes=read, useful_write_bytes=written,
                 useful_bytes_per_s=useful / seconds if seconds else 0.0)
    return level


def _roofline(macs: float, levels: dict, chip: dict) -> dict:
    """The classic roofline on the chip's ceilings, in MACs: peak compute, and DRAM and
    host-link bandwidth x MACs per byte on that level's bus (the bytes its bandwidth limit
    applies to; the off-chip levels whose bandwidth the timing models enforce), and on a chip
    with a shared L2 its bandwidth x MACs per L2 byte."""
    ceilings = {"compute": chip["peak_macs_per_cycle"] * chip["clock_hz"]}
    intensity = {}
    for name in _OFF_CHIP + ("sram.l2",):
        lv = levels.get(name)
        if lv and lv["bytes"] > 0:
            intensity[name] = macs / lv["bytes"]
            if lv["peak_bytes_per_s"]:
                ceilings[name] = intensity[name] * lv["peak_bytes_per_s"]
    bound = min(ceilings, key=ceilings.get) if macs else None
    return {"intensity_macs_per_byte": intensity, "ceilings_macs_per_s": ceilings,
            "attainable_macs_per_s": ceilings[bound] if bound else None, "bound": bound}


def _useful_dram(layer):
    rd, wr = layer.dram_read_bytes, layer.dram_write_bytes
    return None if rd is None and wr is None else (float(rd or 0), float(wr or 0))


def _performed_macs(layer) -> int:
    """The MACs a layer's PEs performed: on N:M sparse PEs the kept ones (the array's
    actions), fewer than the layer's. Its ops/s stay the layer's MACs (effective: what the
    network computes), so a sparse layer's effective TOPS may pass the dense peak."""
    return layer.actions.macs if layer.engine == "array" else layer.macs


def _layer_metrics(layer, chip: dict, rates: EnergyRates) -> dict:
    cycles = layer.cycles
    seconds = cycles / chip["clock_hz"]
    actions = layer.actions
    energy = _layer_energy(layer, seconds, rates)
    # Rates over the layer's busy span: its window, or longer when its own transfers or compute
    # overlapped the previous layer's window (a native run prefetches).
    active = max(cycles, actions.active_cycles or 0)
    span = active / chip["clock_hz"]
    total = sum(energy.values())
    macs = layer.macs
    ops = 2 * macs
    performed = _performed_macs(layer)
    levels = _memory_levels(actions, span, chip, _useful_dram(layer))
    stalls = {"dram": layer.stall_dram_cycles or 0, "link": layer.stall_link_cycles or 0,
              "sram": layer.stall_sram_cycles or 0, "vector": layer.stall_vector_cycles or 0}
    compute = layer.compute_cycles
    if compute is None:
        compute = cycles - sum(stalls.values())
    roof = _roofline(macs, levels, chip)
    return {
        "name": layer.name, "op": layer.op, "engine": layer.engine,
        "cycles": cycles, "seconds": seconds, "active_cycles": active, "active_seconds": span,
        "compute_cycles": compute, "stall_cycles": stalls,
        "macs": macs, "ops": ops,
        "macs_per_s": macs / span if span else 0.0,
        "ops_per_s": ops / span if span else 0.0,
        "compute_utilization": (performed / (chip["peak_macs_per_cycle"] * active)
                                if active and chip["peak_macs_per_cycle"] else 0.0),
        "energy_j": total, "energy_breakdown_j": energy,
        "on_chip_energy_j": sum(v for k, v in energy.items() if k not in _OFF_CHIP),
        "energy_per_mac_j": total / macs if macs else None,
        "power_w": total / span if span else 0.0,
        "tops_per_w": (ops / total / 1e12) if total and ops else 0.0,
        "memory": levels,
        "macs_per_dram_byte": roof["intensity_macs_per_byte"].get("dram"),
        "roofline": roof,
        # the simulation's verdict (busiest resource); compute-only timing has no other
        "bound": layer.bound or ("compute" if macs else roof["bound"]),
    }


# ---- the network ---------------------------------------------------------------------------

def compute_metrics(run, tech: Technology | str = DEFAULT_TECHNOLOGY, *, dram_kind: str | None = None,
                    link_kind: str = "pcie") -> Metrics:
    """Metrics of ``run`` (a RunResult or its dict) with the energy table ``tech`` (a
    :class:`~hw.energy.Technology`, a shipped name or a TOML path). ``dram_kind`` overrides the
    DRAM type the config implies (``custom``/``ideal`` DRAM presets are costed as ``ddr4`` and
    flagged ``kind_assumed``); ``link_kind`` is the host link's energy type."""
    run = _record(run)
    if not isinstance(tech, Technology):
        tech = load_technology(tech)
    chip, rates = chip_view(run, tech, dram_kind, link_kind)
    layers = [_layer_metrics(layer, chip, rates) for layer in run.layers
              if layer.cycles is not None and layer.actions is not None]
    cycles = run.totals["cycles"]
    seconds = cycles / chip["clock_hz"]
    batch = run.totals.get("batch") or 1
    macs = sum(x["macs"] for x in layers)
    ops = 2 * macs
    breakdown: dict[str, float] = {}
    for x in layers:
        for k, v in x["energy_breakdown_j"].items():
            breakdown[k] = breakdown.get(k, 0.0) + v
    # Leakage runs for the whole run (the layers' cycles add up to it). A pipeline
    # (compiler.backends.stages) takes a new input every period: each input's share of the
    # leakage, its inferences/s and the average power are the steady state's, over a period.
    each = run.totals.get("pipeline_period_cycles", cycles) / chip["clock_hz"]
    breakdown["static"] = rates.leakage_w * each
    energy = sum(breakdown.values())
    levels = _network_levels(layers, seconds)
    roof = _roofline(macs, levels, chip)
    power = energy / each if each else 0.0
    on_chip = sum(v for k, v in breakdown.items() if k not in _OFF_CHIP)
    network = {
        "cycles": cycles, "seconds": seconds, "clock_hz": chip["clock_hz"],
        "inferences": batch,
        "inferences_per_s": batch / each if each else 0.0,
        "macs": macs, "ops": ops,
        "macs_per_s": macs / seconds if seconds else 0.0,
        "ops_per_s": ops / seconds if seconds else 0.0,
        "peak_ops_per_s": chip["peak_ops_per_s"],
        "compute_utilization": (sum(_performed_macs(x) for x in run.layers
                                    if x.cycles is not None and x.actions is not None)
                                / (chip["peak_macs_per_cycle"] * cycles)
                                if cycles and chip["peak_macs_per_cycle"] else 0.0),
        "energy_j": energy, "energy_breakdown_j": breakdown,
        "energy_per_inference_j": energy / batch,
        "energy_per_mac_j": energy / macs if macs else None,
        "on_chip_energy_j": on_chip,
        "average_power_w": power,
        "on_chip_power_w": on_chip / each if each else 0.0,
        "peak_power_w": max([x["power_w"] for x in layers] + [power]),
        "peak_on_chip_power_w": max([x["on_chip_energy_j"] / x["active_seconds"] for x in layers
                                     if x["active_seconds"]] + [0.0]),
        "tops_per_w": (ops / each / 1e12) / power if power else 0.0,
        "memory": levels,
        "macs_per_dram_byte": roof["intensity_macs_per_byte"].get("dram"),
        "roofline": roof,
        "bound_counts": _count(x["bound"] for x in layers),
        "roofline_bound_counts": _count(x["roofline"]["bound"] for x in layers),
        "layers_costed": len(layers),
        # ops no engine ran (an op fused into another's schedule is costed in its anchor's)
        "layers_not_costed": sum(1 for x in run.layers
                                 if x.engine != "fused" and (x.cycles is None
                                                             or x.actions is None)),
    }
    return Metrics(network=network, layers=layers, chip=chip, technology=tech.to_dict())


def _network_levels(layers: list, seconds: float) -> dict:
    """Every memory level of the layers, bytes summed, rates over the whole run."""
    sums: dict[str, list] = {}
    for x in layers:
        for name, lv in x["memory"].items():
            acc = sums.setdefault(name, [0.0, 0.0, 0.0, 0.0, lv["peak_bytes_per_s"]])
            if name == "dram":
                acc[0] += lv["bytes"]
                acc[2] += lv["useful_read_bytes"]
                acc[3] += lv["useful_write_bytes"]
            else:
                acc[0] += lv.get("read_bytes", lv["bytes"])
                acc[1] += lv.get("write_bytes", 0.0)
    return {name: (_dram_level(a, rd, wr, seconds, peak) if name == "dram" else
                   _level(a, b, seconds, peak, per_direction=name.startswith("sram.")))
            for name, (a, b, rd, wr, peak) in sums.items()}


def memory_bound(network: dict) -> int:
    """How many layers the simulation found bound by DRAM or host-link transfers."""
    counts = network.get("bound_counts") or {}
    return sum(counts.get(k, 0) for k in _OFF_CHIP)


def _count(items) -> dict:
    out: dict[str, int] = {}
    for item in items:
        if item is not None:
            out[item] = out.get(item, 0) + 1
    return out


def format_si(value: float | None, unit: str) -> str:
    """``1.23 mW``-style text (for tables and plots)."""
    if value is None:
        return "-"
    if value == 0:
        return f"0 {unit}"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""),
                           (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"

