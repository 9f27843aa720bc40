"""A technology's energy table: loading, validation and the rules that read it.

Rules (documented with the tables in ``docs/energy.md``):

* **Integer arithmetic** is a table over operand width (``[ops] int_add``, ``int_mult``); a width
  between two entries is interpolated by a power law between them (``E = E0 (b / b0)^p``; a
  multiplier grows about as bits^2), beyond the table by the power law of the last two entries.
* **MAC** of a precision = one multiply at the operand width + one add at the accumulator width
  (int8/int16: integer multiply and integer add of ``acc_bits``; fp16: fp16 multiply + fp32 add,
  mixed-precision accumulation; fp32: fp32 multiply + fp32 add). int4 and binary (an XNOR
  costed as a 1-bit multiply) extrapolate the multiply table below 8 bits: estimates.
* **SRAM**: ``E64(C) = a + b sqrt(C)`` (least squares through the table's points; C = capacity of
  the bank an access touches) is the energy of a 64-bit read; a bit costs ``E64 / 64``, a written
  bit ``write_to_read`` times that. Capacities outside the table's range are clamped to it.
* **DRAM** and **links**: per bit moved, by type.
* **On-chip network** (``[noc]``, optional): per bit per hop a multi-core chip's network carries.
* **Static power**: ``leakage_mw_per_mm2`` times the area of the blocks (MAC units from the
  arithmetic areas, SRAM from the bit-cell area over the array efficiency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from hw.systolic.config import ConfigError
from hw.validate import read_toml

__all__ = ["Technology", "EnergyError", "load_technology", "technology_names",
           "dram_kind_for_preset", "PRECISIONS", "DRAM_KINDS", "LINK_KINDS", "DATA_DIR",
           "DEFAULT_TECHNOLOGY"]

#: The energy table used when none is named: by ``npulab run``/``map``/``report``/``sweep``, the
#: Python API's metrics and the mapper's energy objectives alike (defined here only).
DEFAULT_TECHNOLOGY = "16nm"

DATA_DIR = Path(__file__).resolve().parent / "data"
PRECISIONS = ("int8", "int16", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32", "int4", "binary")
DRAM_KINDS = ("ddr4", "lpddr4", "lpddr5", "hbm2", "hbm3")
LINK_KINDS = ("on_package", "nvlink", "pcie")
_SECTIONS = ("technology", "sources", "ops", "register", "sram", "dram", "link", "area", "static")
#: Tables a file may leave out, with their entries: ``key: (field, unit, default)``, the
#: defaults being the shipped tables' values. ``[vector]``: the factors that turn the [ops]
#: entries into a vector engine's operations; ``[noc]``: pJ per bit per hop of an on-chip
#: network.
_OPTIONAL_KEYS = {
    "vector": {"special_fn": ("fp32_mults", "fp32_mults", 3.0),
               "select": ("int_adds", "int_adds", 0.5)},
    "noc": {"pj_per_bit_hop": ("value", "pJ/bit/hop", 0.24)},
}
_OPTIONAL = tuple(_OPTIONAL_KEYS)
#: Vector-engine operations on the special-function path (hw.vector.config.SFU_OPS).
_SPECIAL_FNS = ("exp", "log", "rcp", "rsqrt", "tanh", "erf")
_FP_OPS = ("fp16_add", "fp32_add", "fp16_mult", "fp32_mult")


class EnergyError(ConfigError):
    """A bad energy table or a request it cannot answer; the message names file, key and value."""


@dataclass(frozen=True)
class Entry:
    """One number of the table with where it comes from (for reports)."""

    table: str
    key: str
    value: float | tuple
    unit: str
    source: str


@dataclass(frozen=True)
class _Curve:
    """A positive quantity tabulated over bit width, power-law interpolated."""

    bits: tuple[int, ...]
    values: tuple[float, ...]

    def __call__(self, bits: int) -> float:
        b, v = self.bits, self.values
        if len(b) == 1:
            return v[0] * bits / b[0]        # one point: linear in width
        if bits in b:
            return v[b.index(bits)]
        i = 0
        while i < len(b) - 2 and bits > b[i + 1]:
            i += 1
        p = math.log(v[i + 1] / v[i]) / math.log(b[i + 1] / b[i])
        return v[i] * (bits / b[i]) ** p


@dataclass(frozen=True)
class Technology:
    """Energy per action, area and leakage of one technology (see the module docstring)."""

    name: str
    node_nm: float
    description: str
    path: str
    sources: dict
    int_add: _Curve
    int_mult: _Curve
    fp_ops_pj: dict
    register_pj_per_bit: float
    sram_capacity_kib: tuple[float, ...]
    sram_read_pj_per_64b: tuple[float, ...]
    sram_write_to_read: float
    dram_pj_per_bit: dict
    link_pj_per_bit: dict
    int_add_area: _Curve
    int_mult_area: _Curve
    fp_area_um2: dict
    sram_bitcell_um2: float
    sram_array_efficiency: float
    leakage_mw_per_mm2: float
    vector_special_fp32_mults: float = _OPTIONAL_KEYS["vector"]["special_fn"][2]
    vector_select_int_adds: float = _OPTIONAL_KEYS["vector"]["select"][2]
    noc_pj_per_bit_hop: float = _OPTIONAL_KEYS["noc"]["pj_per_bit_hop"][2]
    entries: tuple[Entry, ...] = field(repr=False, default=())
    sram_fit: tuple[float, float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sram_fit", _fit_sqrt(self.sram_capacity_kib,
                                                       self.sram_read_pj_per_64b))

    # ---- arithmetic ---------------------------------------------------------------------------
    def add_pj(self, kind: str, bits: int) -> float:
        """One addition: ``kind`` "int" (any width) or "fp" (16 or 32 bits)."""
        if kind == "int":
            return self.int_add(bits)
        return self._fp("add", bits)

    def mult_pj(self, kind: str, bits: int) -> float:
        if kind == "int":
            return self.int_mult(bits)
        return self._fp("mult", bits)

    def _fp(self, op: str, bits: int) -> float:
        key = f"fp{bits}_{op}"
        if key not in self.fp_ops_pj:
            raise EnergyError(f"{self.path}: [ops] {key}: no such entry; floating point has "
                              f"{', '.join(sorted(self.fp_ops_pj))}")
        return self.fp_ops_pj[key]

    def vector_op_pj(self, op: str, dtype: str) -> float:
        """One operation of a vector engine (:data:`hw.vector.config.OPS`) computing in
        ``dtype``, from the [ops] entries (``docs/vector.md`` lists the rules): add, max/min and
        compare cost an add of the width (a compare is a subtract); mul a multiply; fma both;
        shift an integer add; select ``[vector] select`` integer adds (a 2:1 mux);
        cast/requantize a 32-bit integer multiply and add (scale, round, saturate, as NVDLA's
        SDP converter and Gemmini's scaler); exp, log, reciprocal, rsqrt, tanh and erf on the
        special-function path ``[vector] special_fn`` fp32 multiplies (table lookup and
        quadratic interpolation). bf16 is costed as fp16."""
        bits = {"int8": 8, "int16": 16, "int32": 32, "fp16": 16, "bf16": 16, "fp32": 32}.get(dtype)
        if bits is None:
            raise EnergyError(f"{self.path}: vector dtype {dtype!r}: must be one of int8, int16, "
                              f"int32, fp16, bf16, fp32")
        kind = "fp" if dtype.startswith(("fp", "bf")) else "int"
        if op in _SPECIAL_FNS:
            return self.vector_special_fp32_mults * self.mult_pj("fp", 32)
        if op in ("add", "max", "cmp"):
            return self.add_pj(kind, bits)
        if op == "mul":
            return self.mult_pj(kind, bits)
        if op == "fma":
            return self.add_pj(kind, bits) + self.mult_pj(kind, bits)
        if op == "shift":
            return self.add_pj("int", bits)
        if op == "select":
            return self.vector_select_int_adds * self.add_pj("int", bits)
        if op == "cast":
            return self.mult_pj("int", 32) + self.add_pj("int", 32)
        raise EnergyError(f"vector operation {op!r}: unknown")

    def mac_pj(self, precision: str, acc_bits: int | None = None) -> float:
        """One multiply-accumulate of ``precision`` (:data:`PRECISIONS`) into an accumulator of
        ``acc_bits`` (integer precisions; default 32 for int8, 48 for int16; the floating-point
        ones accumulate in fp32). bf16 and fp8 multiplies are estimates (see ``_mac_parts``)."""
        kind, bits, acc_kind, acc = _mac_parts(precision, acc_bits)
        return self.mult_pj(kind, bits) + self.add_pj(acc_kind, acc)

    def mac_area_um2(self, precision: str, acc_bits: int | None = None) -> float:
        kind, bits, acc_kind, acc = _mac_parts(precision, acc_bits)
        mult = self.int_mult_area(bits) if kind == "int" else self._fp_area("mult", bits)
        add = self.int_add_area(acc) if acc_kind == "int" else self._fp_area("add", acc)
        return mult + add

    def _fp_area(self, op: str, bits: int) -> float:
        return self.fp_area_um2[f"fp{bits}_{op}_um2"]

    # ---- memories and links -------------------------------------------------------------------
    def sram_pj_per_bit(self, capacity_bytes: float, write: bool = False) -> float:
        """Energy of one bit read (or written) in an SRAM bank of ``capacity_bytes``."""
        if capacity_bytes <= 0:
            raise EnergyError(f"sram capacity = {capacity_bytes!r} bytes: must be > 0")
        lo, hi = self.sram_capacity_kib[0], self.sram_capacity_kib[-1]
        kib = min(max(capacity_bytes / 1024.0, lo), hi)
        a, b = self.sram_fit
        per_bit = (a + b * math.sqrt(kib)) / 64.0
        return per_bit * (self.sram_write_to_read if write else 1.0)

    def sram_access_pj(self, capacity_bytes: float, width_bits: int, write: bool = False) -> float:
        """One access of ``width_bits`` to a bank of ``capacity_bytes`` (energy grows with the
        width: every bit has its own bit lines and sense amplifier)."""
        return width_bits * self.sram_pj_per_bit(capacity_bytes, write)

    def dram_energy_pj_per_bit(self, kind: str) -> float:
        if kind not in self.dram_pj_per_bit:
            raise EnergyError(f"{self.path}: dram type = {kind!r}: must be one of "
                              f"{', '.join(sorted(self.dram_pj_per_bit))}")
        return self.dram_pj_per_bit[kind]

    def link_energy_pj_per_bit(self, kind: str) -> float:
        if kind not in self.link_pj_per_bit:
            raise EnergyError(f"{self.path}: link type = {kind!r}: must be one of "
                              f"{', '.join(sorted(self.link_pj_per_bit))}")
        return self.link_pj_per_bit[kind]

    # ---- area and static power ----------------------------------------------------------------
    def sram_area_mm2(self, capacity_bytes: float) -> float:
        return capacity_bytes * 8 * self.sram_bitcell_um2 / self.sram_array_efficiency / 1e6

    def leakage_w(self, area_mm2: float) -> float:
        return self.leakage_mw_per_mm2 * area_mm2 / 1e3

    def chip_area_mm2(self, macs: int, precision: str, acc_bits: int | None,
                      sram_bytes: dict[str, float]) -> dict[str, float]:
        """The area leakage is charged on: ``macs`` MAC units (``"mac"``) and one entry
        ``"sram.<name>"`` per scratchpad of ``sram_bytes[name]`` bytes."""
        area = {"mac": macs * self.mac_area_um2(precision, acc_bits) / 1e6}
        for name, capacity in sram_bytes.items():
            area[f"sram.{name}"] = self.sram_area_mm2(capacity)
        return area

    def to_dict(self) -> dict:
        """Plain data for reports: name, file, and every entry with its unit and citation."""
        return {"name": self.name, "node_nm": self.node_nm, "description": self.description,
                "file": self.path, "sources": dict(self.sources),
                "sram_fit_pj_per_64b": {"a": self.sram_fit[0], "b_per_sqrt_kib": self.sram_fit[1]},
                "entries": [{"table": e.table, "key": e.key,
                             "value": list(e.value) if isinstance(e.value, tuple) else e.value,
                             "unit": e.unit, "source": e.source,
                             "references": self.references(e.source)}
                            for e in self.entries]}

    def references(self, source: str) -> list[str]:
        """Full citations of every [sources] key a source text names, in order."""
        words = source.replace(",", " ").replace("(", " ").replace(")", " ").replace(":", " ")
        seen = []
        for word in words.split():
            if word in self.sources and self.sources[word] not in seen:
                seen.append(self.sources[word])
        return seen


def _mac_parts(precision: str, acc_bits: int | None):
    if precision == "int8":
        return "int", 8, "int", acc_bits or 32
    if precision == "int16":
        return "int", 16, "int", acc_bits or 48
    if precision == "int4":
        # estimate: the table's integer multiply extrapolated to 4 bits by its power law (about
        # bits^2: a quarter of int8's)
        return "int", 4, "int", acc_bits or 32
    if precision == "binary":
        # estimate: the product is an XNOR gate, costed as a 1-bit multiply by the same power
        # law; every product is charged a full accumulator add (a popcount tree over a word of
        # operands adds less per bit, so this is an upper bound)
        return "int", 1, "int", acc_bits or 32
    if precision in ("fp16", "bf16"):
        # estimate for bf16: costed as an fp16 multiply (its 8-bit significands make a smaller
        # multiplier array than fp16's 11-bit ones, so this is an upper bound)
        return "fp", 16, "fp", 32
    if precision in ("fp8_e4m3", "fp8_e5m2"):
        # estimate: an fp8 multiply (a 4x4 or 3x3 significand product and a 5-bit exponent add)
        # costed as an 8-bit integer multiply, an upper bound; accumulation in fp32
        return "int", 8, "fp", 32
    if precision == "fp32":
        return "fp", 32, "fp", 32
    raise EnergyError(f"precision = {precision!r}: must be one of {', '.join(PRECISIONS)}")


def _fit_sqrt(capacity_kib, energy) -> tuple[float, float]:
    """Least-squares ``E = a + b sqrt(C)`` (one point: ``b = 0``)."""
    xs = [math.sqrt(c) for c in capacity_kib]
    n = len(xs)
    if n == 1:
        return float(energy[0]), 0.0
    mx, my = sum(xs) / n, sum(energy) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, energy)) / sxx
    return my - b * mx, b


# ---- loading -------------------------------------------------------------------------------------

def technology_names() -> list[str]:
    """The shipped tables (``45nm``, ``16nm``, ``7nm``)."""
    return sorted((p.stem for p in DATA_DIR.glob("*.toml")), key=lambda s: -float(s[:-2]))


@lru_cache(maxsize=32)
def _load(path: str) -> Technology:
    data = read_toml(path, missing=f"no such energy table; shipped tables: "
                                   f"{', '.join(technology_names())}",
                     what="energy table", error=EnergyError)
    return _build(data, path)


def load_technology(name_or_path: str | Path = DEFAULT_TECHNOLOGY) -> Technology:
    """A shipped table by name (``45nm``, ``16nm``, ``7nm``) or a TOML file of the same format
    (default :data:`DEFAULT_TECHNOLOGY`)."""
    text = str(name_or_path)
    if text in technology_names():
        return _load(str(DATA_DIR / f"{text}.toml"))
    path = Path(text)
    if path.suffix != ".toml" and not path.exists():
        raise EnergyError(f"technology = {text!r}: not a shipped table ({', '.join(technology_names())})"
                          f" nor a .toml file")
    return _load(str(path.resolve()))


class _Reader:
    """Validating accessors that name the file, key and value in every error."""

    def __init__(self, data: dict, path: str):
        self.data, self.path = data, path
        self.entries: list[Entry] = []
        unknown = sorted(set(data) - set(_SECTIONS) - set(_OPTIONAL))
        if unknown:
            raise EnergyError(f"{path}: unknown table [{unknown[0]}]; tables: {', '.join(_SECTIONS)}")
        for s in _SECTIONS:
            if not isinstance(data.get(s), dict):
                raise EnergyError(f"{path}: missing table [{s}]")
        self.sources = data["sources"]

    def fail(self, where: str, value, allowed: str):
        raise EnergyError(f"{self.path}: {where} = {value!r}: {allowed}")

    def item(self, table: str, key: str) -> dict:
        value = self.data[table].get(key)
        if not isinstance(value, dict):
            self.fail(f"[{table}] {key}", value, "must be an inline table with a value and a source")
        self.source(table, key, value.get("source"))
        return value

    def source(self, table: str, key: str, source) -> str:
        if not isinstance(source, str) or not source:
            self.fail(f"[{table}] {key}.source", source,
                      "every number needs a source: a [sources] key, 'derived: ...' or 'estimate: ...'")
        if not (source.split(":")[0] in self.sources or source.startswith(("derived:", "estimate:"))):
            self.fail(f"[{table}] {key}.source", source,
                      f"must name a [sources] key ({', '.join(self.sources)}) or start with "
                      f"'derived:' or 'estimate:'")
        return source

    def positive(self, where: str, value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or not math.isfinite(value):
            self.fail(where, value, "must be a positive number")
        return float(value)

    def number(self, table: str, key: str, field_name: str, unit: str) -> float:
        item = self.item(table, key)
        value = self.positive(f"[{table}] {key}.{field_name}", item.get(field_name))
        self.entries.append(Entry(table, key, value, unit, item["source"]))
        return value

    def curve(self, table: str, key: str, field_name: str, unit: str) -> _Curve:
        item = self.item(table, key)
        bits, values = item.get("bits"), item.get(field_name)
        if not isinstance(bits, list) or not bits or not isinstance(values, list) \
                or len(values) != len(bits):
            self.fail(f"[{table}] {key}", item, f"needs 'bits' and '{field_name}' lists of equal length")
        for i, b in enumerate(bits):
            if not isinstance(b, int) or isinstance(b, bool) or b <= 0 or (i and b <= bits[i - 1]):
                self.fail(f"[{table}] {key}.bits", bits, "must be increasing positive integers")
        vals = tuple(self.positive(f"[{table}] {key}.{field_name}[{i}]", v) for i, v in enumerate(values))
        self.entries.append(Entry(table, key, tuple(zip(bits, vals)), f"{unit} by bit width",
                                  item["source"]))
        return _Curve(tuple(bits), vals)


def _build(data: dict, path: str) -> Technology:
    r = _Reader(data, path)
    tech = data["technology"]
    name = tech.get("name")
    if not isinstance(name, str) or not name:
        r.fail("[technology] name", name, "must be a non-empty string")
    node = r.positive("[technology] node_nm", tech.get("node_nm"))
    for key, text in r.sources.items():
        if not isinstance(text, str) or not text:
            r.fail(f"[sources] {key}", text, "must be the citation text")
    ops = data["ops"]
    int_add = r.curve("ops", "int_add", "pj", "pJ")
    int_mult = r.curve("ops", "int_mult", "pj", "pJ")
    fp = {k: r.number("ops", k, "pj", "pJ") for k in _FP_OPS if k in ops}
    unknown = sorted(set(ops) - {"int_add", "int_mult", *_FP_OPS})
    if unknown:
        r.fail(f"[ops] {unknown[0]}", ops[unknown[0]], f"unknown operation; known: int_add, int_mult, "
                                                     f"{', '.join(_FP_OPS)}")
    register = r.number("register", "pj_per_bit", "value", "pJ/bit")
    sram = data["sram"]
    caps, e64 = sram.get("capacity_kib"), sram.get("read_pj_per_64b")
    if not isinstance(caps, list) or not caps or not isinstance(e64, list) or len(e64) != len(caps):
        r.fail("[sram] capacity_kib/read_pj_per_64b", (caps, e64), "must be lists of equal length")
    caps_t = tuple(r.positive(f"[sram] capacity_kib[{i}]", c) for i, c in enumerate(caps))
    if list(caps_t) != sorted(set(caps_t)):
        r.fail("[sram] capacity_kib", caps, "must be increasing")
    e64_t = tuple(r.positive(f"[sram] read_pj_per_64b[{i}]", e) for i, e in enumerate(e64))
    r.source("sram", "read_pj_per_64b", sram.get("source"))
    r.entries.append(Entry("sram", "read_pj_per_64b", tuple(zip(caps_t, e64_t)),
                           "pJ per 64-bit read by KiB", sram["source"]))
    wtr = r.number("sram", "write_to_read", "value", "ratio")
    dram = {k: r.number("dram", k, "pj_per_bit", "pJ/bit") for k in data["dram"]}
    link = {k: r.number("link", k, "pj_per_bit", "pJ/bit") for k in data["link"]}
    for table, have, need in (("dram", dram, DRAM_KINDS), ("link", link, LINK_KINDS)):
        missing = [k for k in need if k not in have]
        if missing:
            r.fail(f"[{table}] {missing[0]}", None, f"missing; [{table}] needs {', '.join(need)}")
    area = data["area"]
    add_area = r.curve("area", "int_add_um2", "um2", "um2")
    mult_area = r.curve("area", "int_mult_um2", "um2", "um2")
    fp_area = {f"{k}_um2": r.number("area", f"{k}_um2", "value", "um2") for k in _FP_OPS
               if f"{k}_um2" in area}
    bitcell = r.number("area", "sram_bitcell_um2", "value", "um2")
    eff = r.number("area", "sram_array_efficiency", "value", "fraction")
    if eff > 1:
        r.fail("[area] sram_array_efficiency.value", eff, "must be in (0, 1]")
    leak = r.number("static", "leakage_mw_per_mm2", "value", "mW/mm2")
    factors = _optional_tables(r, data)
    return Technology(
        name=name, node_nm=node, description=str(tech.get("description", "")), path=path,
        sources=dict(r.sources), int_add=int_add, int_mult=int_mult, fp_ops_pj=fp,
        register_pj_per_bit=register, sram_capacity_kib=caps_t, sram_read_pj_per_64b=e64_t,
        sram_write_to_read=wtr, dram_pj_per_bit=dram, link_pj_per_bit=link,
        int_add_area=add_area, int_mult_area=mult_area, fp_area_um2=fp_area,
        sram_bitcell_um2=bitcell, sram_array_efficiency=eff, leakage_mw_per_mm2=leak,
        vector_special_fp32_mults=factors["vector"]["special_fn"],
        vector_select_int_adds=factors["vector"]["select"],
        noc_pj_per_bit_hop=factors["noc"]["pj_per_bit_hop"], entries=tuple(r.entries))


def _optional_tables(r: _Reader, data: dict) -> dict:
    """Every entry of the tables a file may leave out (:data:`_OPTIONAL_KEYS`): the file's,
    read and cited as any other, or the shipped default; unknown entries are errors."""
    out = {}
    for table, keys in _OPTIONAL_KEYS.items():
        given = data.get(table, {})
        if not isinstance(given, dict):
            r.fail(f"[{table}]", given, "must be a table")
        for key in given:
            if key not in keys:
                r.fail(f"[{table}] {key}", given[key], f"unknown entry; known: {', '.join(keys)}")
        out[table] = {key: (r.number(table, key, field, unit) if key in given else default)
                      for key, (field, unit, default) in keys.items()}
    return out


def dram_kind_for_preset(preset: str) -> str | None:
    """The energy table's DRAM type for one of npulab's DRAM presets (``ddr4-3200`` -> ``ddr4``),
    or None when the preset does not say (``custom``, ``ideal``)."""
    for kind in DRAM_KINDS:
        if preset.startswith(kind):
            return kind
    return None
