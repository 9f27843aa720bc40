"""NVDLA's configuration register file, from NVIDIA's register descriptions.

The register map (units, CSB addresses, fields, reset values, access, enums) is
``reg_data/registers.json``, generated from NVIDIA's SystemRDL (``spec/manual/*.rdl``) by
``scripts/gen_nvdla_registers.py``; a test regenerates it from the RDL and checks it is unchanged.

Behaviour modelled (NVIDIA ``doc/hw/v1/hwarch.rst`` "Ping-pong register programming",
``unit_description.rst``; ``vmod/nvdla/*/NV_NVDLA_*_reg.v``):

* **Ping-pong groups.** Every unit with an ``S_POINTER`` register has two copies ("groups") of its
  ``D_*`` registers. ``S_POINTER.PRODUCER`` selects which group the CSB master reads and writes;
  ``S_POINTER.CONSUMER`` (read-only) is the group the datapath executes next. ``S_*`` registers
  are single.
* **Launch.** Writing ``D_OP_ENABLE = 1`` marks the producer group enabled; its ``S_STATUS`` field
  reads RUNNING if it is the consumer group, else PENDING. :meth:`RegisterFile.ready` tells the
  trace player which units have their consumer group enabled. When a layer completes,
  :meth:`RegisterFile.complete` clears the group's ``D_OP_ENABLE``, sets its status IDLE, flips
  ``CONSUMER`` and raises the unit's ``GLB.S_INTR_STATUS`` bit (``<UNIT>_DONE_STATUS<group>``).
* **Interrupts.** ``GLB.S_INTR_STATUS`` is write-one-to-clear, ``S_INTR_SET`` sets bits,
  ``S_INTR_MASK`` masks the interrupt line (:meth:`RegisterFile.interrupt_pending`), not the status.
* **LUTs** (SDP, CDP): ``S_LUT_ACCESS_CFG`` sets the table (LE 65 / LO 257 entries) and the
  address; each ``S_LUT_ACCESS_DATA`` access reads or writes one entry and increments the address.
* **CBUF flush.** ``CDMA.S_CBUF_FLUSH_STATUS.FLUSH_DONE`` reads 1: the model's convolution buffer
  is clean from reset (the hardware sets it a few thousand cycles after reset; NVIDIA's traces
  poll it before the first convolution).
* Writes to read-only registers are dropped, as the hardware drops them (the traces write zeros to
  ``S_STATUS`` and the ``D_PERF_*`` counters); bits outside a register's fields are dropped.

Keys are ``"UNIT.REGISTER"`` without NVDLA's ``NVDLA_`` prefix and ``_0`` suffix
(``"SDP.D_DP_BS_CFG"``). Unknown units, registers and fields raise :class:`RegisterError` naming
them and the nearest valid names.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from hw.nvdla.lut import LE_ENTRIES, LO_ENTRIES

__all__ = ["RegisterError", "Field", "Register", "RegisterMap", "register_map", "RegisterFile",
           "RegView", "INTERRUPT_UNITS", "LUT_SIZES"]

#: Units with a done interrupt in ``GLB.S_INTR_STATUS`` (field prefix -> unit of the register map)
INTERRUPT_UNITS = {"SDP": "SDP", "CDP": "CDP", "PDP": "PDP", "BDMA": "BDMA", "RUBIK": "RBK",
                   "CDMA_DAT": "CDMA", "CDMA_WT": "CDMA", "CACC": "CACC"}
#: entries of the LE (id 0) and LO (id 1) tables (``S_LUT_ACCESS_CFG.LUT_TABLE_ID``)
LUT_SIZES = {0: LE_ENTRIES, 1: LO_ENTRIES}


class RegisterError(KeyError):
    """An unknown unit, register or field, or a value a field does not allow."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    msb: int
    reset: int
    sw: str           # "r", "rw" or "w" (software access)
    enum: dict        # enum name -> value

    @property
    def mask(self) -> int:
        return ((1 << (self.msb - self.lsb + 1)) - 1) << self.lsb

    def get(self, value: int) -> int:
        return (value & self.mask) >> self.lsb


@dataclass(frozen=True)
class Register:
    unit: str
    name: str
    address: int      # CSB byte address (unit base + offset)
    fields: tuple

    @property
    def key(self) -> str:
        return f"{self.unit}.{self.name}"

    @property
    def reset(self) -> int:
        return sum(f.reset << f.lsb for f in self.fields)

    @property
    def write_mask(self) -> int:
        return sum(f.mask for f in self.fields if "w" in f.sw)

    @property
    def grouped(self) -> bool:
        """A ``D_*`` register (two ping-pong copies) of a unit that has ``S_POINTER``."""
        return self.name.startswith("D_")

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        names = [f.name for f in self.fields]
        raise RegisterError(f"{self.key}: no field {name!r}; fields: {', '.join(names)}")


class RegisterMap:
    """All units and registers of ``reg_data/registers.json``."""

    def __init__(self, table: dict):
        self.source = table["source"]
        self.units: dict[str, dict[str, Register]] = {}
        self.bases: dict[str, int] = {}
        self._by_addr: dict[int, Register] = {}
        for u in table["units"]:
            unit = u["unit"].removeprefix("NVDLA_")
            self.bases[unit] = u["base"]
            regs = {}
            for r in u["registers"]:
                fields = tuple(Field(f["name"], f["lsb"], f["msb"], f["reset"], f["sw"],
                                     dict(f["enum"])) for f in r["fields"])
                reg = Register(unit, r["name"], u["base"] + r["offset"], fields)
                regs[reg.name] = reg
                self._by_addr[reg.address] = reg
            self.units[unit] = regs
        self.grouped_units = frozenset(u for u, regs in self.units.items() if "S_POINTER" in regs)

    def __getitem__(self, key: str) -> Register:
        unit, sep, name = key.partition(".")
        if not sep:
            raise RegisterError(f"register {key!r}: write it as UNIT.REGISTER, e.g. "
                                f"'SDP.D_DP_BS_CFG'")
        regs = self.units.get(unit)
        if regs is None:
            raise RegisterError(f"register {key!r}: unknown unit {unit!r}; units: "
                                f"{', '.join(sorted(self.units))}")
        reg = regs.get(name)
        if reg is None:
            near = difflib.get_close_matches(name, regs, n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise RegisterError(f"register {key!r}: {unit} has no register {name!r} "
                                f"(NVIDIA's NVDLA_{unit}.rdl){hint}")
        return reg

    def at(self, address: int) -> Register:
        reg = self._by_addr.get(address)
        if reg is None:
            raise RegisterError(f"CSB address {address:#x}: no register there")
        return reg

    def __iter__(self):
        for regs in self.units.values():
            yield from regs.values()


@cache
def register_map() -> RegisterMap:
    """The register map shipped with npulab (loaded once)."""
    text = resources.files("hw.nvdla").joinpath("reg_data/registers.json").read_text()
    return RegisterMap(json.loads(text))


class RegView:
    """The registers of one hardware layer as the datapath sees them at launch: for every unit
    its consumer group's ``D_*`` registers plus the ``S_*`` registers; registers never written
    read their reset value. ``lut(unit)`` gives the unit's LUT tables."""

    def __init__(self, values: dict, luts: dict | None = None, regmap: RegisterMap | None = None):
        self._map = regmap or register_map()
        self._values = dict(values)
        self._luts = luts or {}

    @classmethod
    def from_dict(cls, values: dict, luts: dict | None = None) -> "RegView":
        """For tests and hand-written programs: ``values`` keyed ``"UNIT.REG"``, checked
        against the register map; ``luts`` maps unit -> (LE list, LO list)."""
        m = register_map()
        for key in values:
            m[key]
        return cls(values, {u: (list(le), list(lo)) for u, (le, lo) in (luts or {}).items()}, m)

    def register(self, key: str) -> Register:
        return self._map[key]

    def __getitem__(self, key: str) -> int:
        reg = self._map[key]
        return self._values.get(reg.key, reg.reset)

    def field(self, key: str, field: str) -> int:
        return self._map[key].field(field).get(self[key])

    def signed(self, key: str, field: str) -> int:
        """The field as a two's-complement signed value."""
        f = self._map[key].field(field)
        v, bits = f.get(self[key]), f.msb - f.lsb + 1
        return v - (1 << bits) if v >> (bits - 1) & 1 else v

    def address(self, unit: str, prefix: str) -> int:
        """A 64-bit address from ``<prefix>_LOW`` and ``<prefix>_HIGH`` (``"D_DST_BASE_ADDR"``)."""
        return self[f"{unit}.{prefix}_HIGH"] << 32 | self[f"{unit}.{prefix}_LOW"]

    def unit_values(self, unit: str) -> dict:
        """Every register of ``unit`` (written or reset) keyed by register name."""
        if unit not in self._map.units:
            raise RegisterError(f"unit {unit!r}: units are {', '.join(sorted(self._map.units))}")
        return {name: self[f"{unit}.{name}"] for name in self._map.units[unit]}

    def enum(self, key: str, field: str) -> str:
        f = self._map[key].field(field)
        value = f.get(self[key])
        for name, v in f.enum.items():
            if v == value:
                return name
        allowed = ", ".join(f"{n} ({v})" for n, v in f.enum.items()) or "no enum"
        raise RegisterError(f"{key}.{field} = {value}: not a defined value; allowed: {allowed}")

    def lut(self, unit: str) -> tuple[list, list]:
        le, lo = self._luts.get(unit, ([0] * LUT_SIZES[0], [0] * LUT_SIZES[1]))
        return list(le), list(lo)


class RegisterFile:
    """The state of every unit's registers, as the CSB master sees them (module docstring)."""

    def __init__(self, regmap: RegisterMap | None = None):
        self.map = regmap or register_map()
        self._groups: dict[tuple[str, int], dict[str, int]] = {
            (u, g): {} for u in self.map.grouped_units for g in (0, 1)}
        self._single: dict[str, int] = {}       # S_* and ungrouped registers: key -> value
        self.producer = {u: 0 for u in self.map.grouped_units}
        self.consumer = {u: 0 for u in self.map.grouped_units}
        self._luts = {u: ({0: [0] * LUT_SIZES[0], 1: [0] * LUT_SIZES[1]}, [0, 0])
                      for u in ("SDP", "CDP") if u in self.map.units}
        self.intr_status = 0

    # ---------------------------------------------------------------- access
    def _store(self, reg: Register) -> tuple[dict, str]:
        if reg.grouped and reg.unit in self.map.grouped_units:
            return self._groups[(reg.unit, self.producer[reg.unit])], reg.key
        return self._single, reg.key

    def write(self, key: str, value: int) -> Register:
        """A CSB write of ``value`` to register ``key`` (``"SDP.D_OP_ENABLE"``)."""
        reg = self.map[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
            raise RegisterError(f"{key} = {value!r}: a register value is a 32-bit unsigned "
                                f"integer")
        unit, name = reg.unit, reg.name
        if unit == "GLB" and name == "S_INTR_STATUS":
            self.intr_status &= ~(value & reg.write_mask)
            return reg
        if unit == "GLB" and name == "S_INTR_SET":
            self.intr_status |= value & reg.write_mask
            return reg
        if name == "S_POINTER" and unit in self.producer:
            self.producer[unit] = reg.field("PRODUCER").get(value)
            return reg
        if name == "S_LUT_ACCESS_CFG" and unit in self._luts:
            self._single[reg.key] = value & reg.write_mask
            tables, state = self._luts[unit]
            state[0], state[1] = reg.field("LUT_ADDR").get(value), \
                reg.field("LUT_TABLE_ID").get(value)
            return reg
        if name == "S_LUT_ACCESS_DATA" and unit in self._luts:
            tables, state = self._luts[unit]
            addr, tid = state
            if addr >= LUT_SIZES[tid]:
                raise RegisterError(
                    f"{key}: LUT write to entry {addr} of the {'LE' if tid == 0 else 'LO'} "
                    f"table, which has {LUT_SIZES[tid]} entries (set by {unit}.S_LUT_ACCESS_CFG)")
            tables[tid][addr] = reg.field("LUT_DATA").get(value)
            state[0] = addr + 1
            return reg
        mask = reg.write_mask
        if not mask:
            return reg                      # read-only: the hardware drops the write
        store, k = self._store(reg)
        old = store.get(k, reg.reset)
        store[k] = (old & ~mask) | (value & mask)
        return reg

    def read(self, key: str) -> int:
        """A CSB read of register ``key``."""
        reg = self.map[key]
        unit, name = reg.unit, reg.name
        if unit == "GLB" and name == "S_INTR_STATUS":
            return self.intr_status
        if unit == "GLB" and name == "S_INTR_SET":
            return 0
        if name == "S_POINTER" and unit in self.producer:
            return self.producer[unit] | self.consumer[unit] << 16
        if name == "S_STATUS" and unit in self.consumer:
            return self._status(unit, 0) | self._status(unit, 1) << 16
        if unit == "CDMA" and name == "S_CBUF_FLUSH_STATUS":
            return 1
        store, k = self._store(reg)
        return store.get(k, reg.reset)

    def _status(self, unit: str, group: int) -> int:
        if not self.enabled(unit, group):
            return 0                                          # IDLE
        return 1 if self.consumer[unit] == group else 2       # RUNNING / PENDING

    # ---------------------------------------------------------------- launch and completion
    def enabled(self, unit: str, group: int) -> bool:
        return bool(self._groups[(unit, group)].get(f"{unit}.D_OP_ENABLE", 0) & 1)

    def ready(self, unit: str) -> bool:
        """The unit's consumer group has D_OP_ENABLE set: the datapath may run it."""
        return unit in self.consumer and self.enabled(unit, self.consumer[unit])

    def view(self) -> RegView:
        """The registers as the datapath sees them now (every unit's consumer group)."""
        values = dict(self._single)
        for unit in self.map.grouped_units:
            values.update(self._groups[(unit, self.consumer[unit])])
        luts = {u: (list(t[0]), list(t[1])) for u, (t, _) in self._luts.items()}
        return RegView(values, luts, self.map)

    def complete(self, unit: str, interrupts: tuple = ()) -> int:
        """The unit finished its consumer group: clear D_OP_ENABLE, flip CONSUMER, set the
        ``interrupts`` (``GLB.S_INTR_STATUS`` prefixes, e.g. ``("SDP",)``) of that group.
        Returns the group that completed."""
        group = self.consumer[unit]
        self._groups[(unit, group)][f"{unit}.D_OP_ENABLE"] = 0
        self.consumer[unit] = 1 - group
        status = self.map["GLB.S_INTR_STATUS"]
        for prefix in interrupts:
            self.intr_status |= 1 << status.field(f"{prefix}_DONE_STATUS{group}").lsb
        return group

    def interrupt_pending(self) -> bool:
        """The interrupt line: a status bit that ``S_INTR_MASK`` does not mask."""
        return bool(self.intr_status & ~self.read("GLB.S_INTR_MASK"))

    def interrupt_set(self, prefix: str, group: int) -> bool:
        """Is ``<prefix>_DONE_STATUS<group>`` set in ``GLB.S_INTR_STATUS``?"""
        lsb = self.map["GLB.S_INTR_STATUS"].field(f"{prefix}_DONE_STATUS{group}").lsb
        return bool(self.intr_status >> lsb & 1)
