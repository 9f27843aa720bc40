"""DRAM timing model: configuration, presets, trace replay and the stateful model the executor uses.

A cycle-level controller + device model in the manner of DRAMsim3 (channels, ranks, bank groups,
banks, open/closed page, FR-FCFS command queues, refresh), computed event by event in Numba
(:mod:`hw.memory._dram_kernel`, whose docstring states the exact per-cycle semantics).

Timing contract
---------------
Cycles are DRAM command-clock cycles of ``tck_ns``. A request offered at cycle ``a`` enters its
channel's transaction queue; the controller moves it into a command queue at ``a`` (one move per
channel per cycle) and its first command can issue at ``a + 1``. A read *completes* when its last
data beat has been transferred: RD issue + CL + tBurst, so a lone read to a closed bank completes
``1 + tRCD + CL + tBurst`` after it was offered (``tBurst = burst_length / transfers_per_clock``).
A write completes when its last beat is written: WR issue + CWL + tBurst. Latency = completion -
the cycle the request was offered (its ``issue_cycle``). DRAMsim3 measures its read latency the
same way, from the cycle the transaction was added.
"""

from __future__ import annotations

import configparser
import dataclasses
import math
import numbers
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


from hw._lazy import lazy_module
from hw.systolic.config import ConfigError
from hw.validate import _is_bool, _is_int, read_config_text

np = lazy_module("numpy")                     # loaded when a model first runs,
K = lazy_module("hw.memory._dram_kernel")   # so reading presets stays light

__all__ = ["DramConfig", "DRAM_PRESETS", "DRAM_PRESET_SOURCES", "dram_preset", "dram_config_from_dict",
           "dram_config_to_dict", "dram_config_from_dramsim3_ini", "decode_address", "ReplayResult",
           "replay", "read_trace", "TraceError", "DramModel", "MAPPING_FIELDS"]

#: The six fields of an address-mapping string, two letters each (DRAMsim3's notation).
MAPPING_FIELDS = ("ch", "ra", "bg", "ba", "ro", "co")
PAGE_POLICIES = ("open", "closed")
QUEUE_STRUCTURES = ("per_bank", "per_rank")
_MAX_CYCLES = 10_000_000
_TIMINGS = ("cl", "cwl", "trcd", "trp", "tras", "trrd_s", "trrd_l", "tccd_s", "tccd_l", "twtr_s",
            "twtr_l", "tfaw", "twr", "trtp", "trfc", "trefi", "trcdwr", "trtrs", "tppd")
_MIN_ONE = {"cl", "trcd", "trp", "tras", "trrd_s", "trrd_l", "tccd_s", "tccd_l", "trfc", "trefi"}


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


@dataclass(frozen=True)
class DramConfig:
    """One DRAM memory system: ``channels`` independent controllers of the same device.

    Defaults are the ``ddr4-3200`` preset's values (with ``preset = "custom"``). Timing fields
    are in cycles of ``tck_ns`` (the command clock).

    Attributes
    ----------
    preset: name of the preset this config was built from (``"custom"`` if none).
    channels: independent channels (controllers), a power of two.
    ranks: ranks per channel, a power of two.
    bankgroups: bank groups per rank, a power of two.
    banks_per_group: banks per bank group, a power of two.
    rows: rows per bank, a power of two.
    columns: columns of ``bus_width_bits`` bits per row (DRAMsim3's physical columns; HBM counts
        two per ini column); a row holds ``columns / burst_length`` bursts.
    bus_width_bits: data bus width of one channel.
    burst_length: beats per column access; ``request_bytes = bus_width_bits / 8 * burst_length``.
    transfers_per_clock: data beats per tCK (DDR 2; HBM3 4; LPDDR5 with WCK:CK 4:1, 8).
    tck_ns: command clock period.
    cl: read latency, RD to first data (AL folded in).
    cwl: write latency, WR to first data.
    trcd: ACT to RD (and to WR unless ``trcdwr`` is set).
    trp: PRE to ACT of the same bank.
    tras: ACT to PRE of the same bank; tRC = tras + trp.
    trrd_s: ACT to ACT, different bank group.
    trrd_l: ACT to ACT, same bank group.
    tccd_s: column command to column command, different bank group.
    tccd_l: column command to column command, same bank group.
    twtr_s: end of write data to RD, different bank group.
    twtr_l: end of write data to RD, same bank group.
    tfaw: four-activate window: at most four ACTs per rank in any tfaw.
    twr: write recovery, end of write data to PRE.
    trtp: RD to PRE.
    trfc: refresh cycle time: a rank is busy this long per refresh.
    trefi: refresh interval: one all-bank refresh per rank every trefi (staggered across ranks).
    trcdwr: ACT to WR when it differs from trcd (HBM's tRCDWR); 0 = same as trcd.
    trtrs: rank-to-rank switch time on the data bus.
    tppd: PRE to PRE (LPDDR4/5); 0 = no constraint.
    address_mapping: DRAMsim3 notation, e.g. ``"rochrababgco"``: fields most to least significant
        above the ``log2(request_bytes)`` offset bits.
    page_policy: ``"open"`` (rows stay open) or ``"closed"`` (auto-precharge: RDA/WRA).
    queue_structure: ``"per_bank"`` or ``"per_rank"`` command queues.
    queue_depth: entries per command queue.
    transaction_queue_depth: requests a channel buffers before its command queues.
    dual_command_issue: a row and a column command may issue in the same cycle (HBM).
    refresh: model refresh.
    ideal: zero latency, unlimited bandwidth (finish = offer cycle).
    """

    preset: str = "custom"
    channels: int = 1
    ranks: int = 2
    bankgroups: int = 4
    banks_per_group: int = 4
    rows: int = 65536
    columns: int = 1024
    bus_width_bits: int = 64
    burst_length: int = 8
    transfers_per_clock: int = 2
    tck_ns: float = 0.63
    cl: int = 22
    cwl: int = 16
    trcd: int = 22
    trp: int = 22
    tras: int = 52
    trrd_s: int = 4
    trrd_l: int = 8
    tccd_s: int = 4
    tccd_l: int = 8
    twtr_s: int = 4
    twtr_l: int = 12
    tfaw: int = 34
    twr: int = 24
    trtp: int = 12
    trfc: int = 560
    trefi: int = 12480
    trcdwr: int = 0
    trtrs: int = 1
    tppd: int = 0
    address_mapping: str = "rochrababgco"
    page_policy: str = "open"
    queue_structure: str = "per_bank"
    queue_depth: int = 8
    transaction_queue_depth: int = 16
    dual_command_issue: bool = False
    refresh: bool = True
    ideal: bool = False

    def __post_init__(self) -> None:
        self.validate("DramConfig")

    def validate(self, where: str, prefix: str = "dram.") -> None:
        """Check every field; ``where`` and ``prefix`` name the source in error messages."""
        def fail(key: str, value: Any, must: str):
            raise ConfigError(f"{where}: {prefix}{key} = {value!r}: must be {must}")

        def integer(key: str, lo: int, hi: int, pow2: bool = False) -> int:
            v = getattr(self, key)
            if (not _is_int(v)
                    or not lo <= v <= hi or (pow2 and not _pow2(int(v)))):
                fail(key, v, f"{'a power of two' if pow2 else 'an integer'} in {lo}..{hi}")
            object.__setattr__(self, key, int(v))
            return int(v)

        if not isinstance(self.preset, str) or not self.preset:
            fail("preset", self.preset, "a non-empty string")
        for key, hi in (("channels", 1024), ("ranks", 16), ("bankgroups", 64), ("banks_per_group", 64),
                        ("rows", 1 << 24), ("columns", 1 << 16), ("bus_width_bits", 1024),
                        ("burst_length", 64), ("transfers_per_clock", 16)):
            integer(key, 1, hi, pow2=True)
        if self.bankgroups * self.banks_per_group > 64:
            fail("banks_per_group", self.banks_per_group,
                 f"such that bankgroups * banks_per_group <= 64 (bankgroups = {self.bankgroups})")
        if self.bus_width_bits < 8:
            fail("bus_width_bits", self.bus_width_bits, "a power of two >= 8 (whole bytes)")
        if self.burst_length % self.transfers_per_clock:
            fail("transfers_per_clock", self.transfers_per_clock,
                 f"a divisor of burst_length = {self.burst_length} (tBurst = burst_length / "
                 f"transfers_per_clock whole cycles)")
        if self.columns < self.burst_length:
            fail("columns", self.columns, f"at least burst_length = {self.burst_length}")
        tck = self.tck_ns
        if (_is_bool(tck) or not isinstance(tck, numbers.Real)
                or not math.isfinite(tck) or not 0 < tck <= 100):
            fail("tck_ns", tck, "a number of nanoseconds in (0, 100]")
        object.__setattr__(self, "tck_ns", float(tck))
        for key in _TIMINGS:
            integer(key, 1 if key in _MIN_ONE else 0, _MAX_CYCLES)
        for short, long_ in (("trrd_s", "trrd_l"), ("tccd_s", "tccd_l"), ("twtr_s", "twtr_l")):
            if getattr(self, long_) < getattr(self, short):
                # JEDEC: same-bank-group spacing is never shorter than other-group spacing
                fail(long_, getattr(self, long_), f"at least {short} = {getattr(self, short)}")
        if self.trefi // self.ranks <= self.trfc:
            fail("trefi", self.trefi, f"more than ranks * trfc = {self.ranks * self.trfc} (each of the "
                 f"{self.ranks} ranks is refreshed for trfc cycles every trefi)")
        mapping = self.address_mapping
        tokens = [mapping[i:i + 2] for i in range(0, len(mapping), 2)] if isinstance(mapping, str) else []
        if (not isinstance(mapping, str) or len(mapping) != 12
                or sorted(tokens) != sorted(MAPPING_FIELDS)):
            fail("address_mapping", mapping, "12 letters naming each of the fields "
                 f"{', '.join(MAPPING_FIELDS)} once, most significant first, e.g. 'rochrababgco'")
        for key, allowed in (("page_policy", PAGE_POLICIES), ("queue_structure", QUEUE_STRUCTURES)):
            v = getattr(self, key)
            if not isinstance(v, str) or v.lower() not in allowed:
                fail(key, v, "one of " + ", ".join(repr(a) for a in allowed))
            object.__setattr__(self, key, v.lower())
        integer("queue_depth", 1, 4096)
        integer("transaction_queue_depth", 1, 4096)
        for key in ("dual_command_issue", "refresh", "ideal"):
            v = getattr(self, key)
            if not _is_bool(v):
                fail(key, v, "true or false")
            object.__setattr__(self, key, bool(v))
        if self.address_bits > 62:
            fail("rows", self.rows, f"small enough that the address fits 62 bits "
                 f"(it needs {self.address_bits})")

    # ---- derived quantities ---------------------------------------------------------------
    @property
    def request_bytes(self) -> int:
        """Bytes moved by one column access (one burst)."""
        return self.bus_width_bits // 8 * self.burst_length

    @property
    def burst_cycles(self) -> int:
        """tBurst: cycles the data bus is busy per column access."""
        return self.burst_length // self.transfers_per_clock

    @property
    def banks(self) -> int:
        """Banks per rank."""
        return self.bankgroups * self.banks_per_group

    @property
    def row_bytes(self) -> int:
        return self.columns * self.bus_width_bits // 8

    @property
    def address_bits(self) -> int:
        widths = self.field_widths()
        return sum(widths.values()) + int(math.log2(self.request_bytes))

    @property
    def capacity_bytes(self) -> int:
        return self.channels * self.ranks * self.banks * self.rows * self.row_bytes

    @property
    def clock_mhz(self) -> float:
        return 1000.0 / self.tck_ns

    @property
    def peak_gbps(self) -> float:
        """Peak data bandwidth of all channels, GB/s (1e9 bytes/s); infinite for ``ideal``."""
        if self.ideal:
            return math.inf
        return self.channels * self.bus_width_bits / 8 * self.transfers_per_clock / self.tck_ns

    @property
    def is_ideal(self) -> bool:
        return self.ideal

    def field_widths(self) -> dict[str, int]:
        """Bits of each address-mapping field."""
        lg = lambda v: int(v).bit_length() - 1  # noqa: E731  (powers of two)
        return {"ch": lg(self.channels), "ra": lg(self.ranks), "bg": lg(self.bankgroups),
                "ba": lg(self.banks_per_group), "ro": lg(self.rows),
                "co": lg(self.columns) - lg(self.burst_length)}

    def field_positions(self) -> dict[str, int]:
        """Lowest bit of each field, counted above the ``log2(request_bytes)`` offset bits."""
        widths = self.field_widths()
        pos, out = 0, {}
        for i in range(len(self.address_mapping) - 2, -1, -2):
            name = self.address_mapping[i:i + 2]
            out[name] = pos
            pos += widths[name]
        return out


def decode_address(cfg: DramConfig, address: int) -> dict[str, int]:
    """Split a byte address into channel, rank, bankgroup, bank, row and column (burst index
    within the row), exactly as the model does (DRAMsim3's mapping; high bits beyond the
    address space wrap)."""
    a = int(address) >> int(math.log2(cfg.request_bytes))
    widths, pos = cfg.field_widths(), cfg.field_positions()
    value = {f: (a >> pos[f]) & ((1 << widths[f]) - 1) for f in MAPPING_FIELDS}
    return {"channel": value["ch"], "rank": value["ra"], "bankgroup": value["bg"],
            "bank": value["ba"], "row": value["ro"], "column": value["co"]}


# ---- presets ------------------------------------------------------------------------------
_PRESET_VALUES: dict[str, dict[str, Any]] = {
    # DRAMsim3 configs/DDR4_8Gb_x8_3200.ini (all figures; 2 ranks: its channel_size = 16384 MB
    # over 8 GB ranks of eight x8 devices). peak 25.4 GB/s at tCK 0.63 ns.
    "ddr4-3200": dict(),
    # DRAMsim3 configs/HBM2_8Gb_x128.ini: 8 legacy channels x 128 bit (one stack, 256 GB/s).
    # columns = 2 x the ini's 64 (DRAMsim3 counts HBM columns twice); trcd = tRCDRD, trcdwr =
    # tRCDWR; trtp = 5 and trtrs = 2 are DRAMsim3's defaults (the ini's tRTP_L/_S are not read).
    "hbm2": dict(channels=8, ranks=1, rows=32768, columns=128, bus_width_bits=128, burst_length=4,
                 tck_ns=1.0, cl=14, cwl=4, trcd=14, trcdwr=14, trp=14, tras=34, trrd_s=4, trrd_l=6,
                 tccd_s=1, tccd_l=2, twtr_s=6, twtr_l=8, tfaw=30, twr=16, trtp=5, trfc=260,
                 trefi=3900, trtrs=2, address_mapping="rorabgbachco", queue_structure="per_rank",
                 queue_depth=32, transaction_queue_depth=16, dual_command_issue=True),
    # HBM3 6.4 Gb/s: Ramulator 2.0 src/dram/impl/HBM3.cpp, preset HBM3_6.4Gbps with org
    # HBM3_8Gb_1R (JESD238A organisation; its timings scale DRAMsim3's HBM2 ns values, since
    # JEDEC HBM3 AC timings are not public). One stack = 16 channels x 2 pseudo channels of
    # 32 bit, BL8, 4 beats per 1.6 GHz tCK: 32 x 25.6 GB/s = 819.2 GB/s. tRFC 350 ns (8 Gb,
    # Ramulator's table) = 560 tCK; trtrs = DRAMsim3's default.
    "hbm3": dict(channels=32, ranks=1, rows=32768, columns=256, bus_width_bits=32, burst_length=8,
                 transfers_per_clock=4, tck_ns=0.625, cl=23, cwl=7, trcd=23, trcdwr=23, trp=23,
                 tras=55, trrd_s=2, trrd_l=4, tccd_s=2, tccd_l=4, twtr_s=10, twtr_l=13, tfaw=48,
                 twr=26, trtp=7, trfc=560, trefi=6240, trtrs=2, address_mapping="rorabacobgch",
                 queue_structure="per_rank", queue_depth=32, transaction_queue_depth=16,
                 dual_command_issue=True),
    # LPDDR4-3200, 8 Gb per x16 channel, four channels (a 64-bit package, 25.6 GB/s).
    # JEDEC JESD209-4 at tCK 0.625 ns: RL 28 / WL 14 (set A, DBI off, 1600 MHz), tRCD 18 ns,
    # tRPpb 18 ns, tRAS 42 ns, tWR 18 ns, tRTP 7.5 ns, tRRD 10 ns, tFAW 40 ns, tWTR 10 ns,
    # tCCD 8 nCK (BL16), tPPD 4 nCK, tRFCab 280 ns, tREFI 3.904 us (ns rounded up to whole
    # tCK, tREFI down; tRTP, tRRD, tWTR are max(ns, 8/4/8 nCK)).
    # No bank groups: 8 banks, 2 KB page.
    "lpddr4-3200": dict(channels=4, ranks=1, bankgroups=1, banks_per_group=8, rows=65536,
                        columns=1024, bus_width_bits=16, burst_length=16, tck_ns=0.625, cl=28,
                        cwl=14, trcd=29, trp=29, tras=68, trrd_s=16, trrd_l=16, tccd_s=8, tccd_l=8,
                        twtr_s=16, twtr_l=16, tfaw=64, twr=29, trtp=12, trfc=448, trefi=6246,
                        trtrs=2, tppd=4, address_mapping="rorabacobgch"),
    # LPDDR5-6400, 16 Gb per x16 channel in bank-group mode (4 x 4 banks, 2 KB page), four
    # channels (51.2 GB/s). CK 800 MHz (tCK 1.25 ns), WCK:CK 4:1 so 8 beats per tCK and BL16 =
    # 2 tCK (Micron MT62F LPDDR5 datasheet: 12.8 GB/s per channel). Timings in tCK from
    # Ramulator 2.0 src/dram/impl/LPDDR5.cpp preset LPDDR5_6400 (nCL 20, nCWL 11, nRCD 15,
    # nRPpb 15, nRAS 34, nWR 28, nRTP 4, nRRD 4, nWTRS 5, nWTRL 10, nFAW 16, nPPD 2; tRFCab
    # 280 ns for 16 Gb, tREFI 3906 ns). tCCD_S = 2 tCK (one BL16 burst, other bank group),
    # tCCD_L = 4 tCK (Ramulator's nCCD).
    "lpddr5-6400": dict(channels=4, ranks=1, rows=65536, columns=1024, bus_width_bits=16,
                        burst_length=16, transfers_per_clock=8, tck_ns=1.25, cl=20, cwl=11,
                        trcd=15, trp=15, tras=34, trrd_s=4, trrd_l=4, tccd_s=2, tccd_l=4, twtr_s=5,
                        twtr_l=10, tfaw=16, twr=28, trtp=4, trfc=224, trefi=3124, trtrs=2, tppd=2,
                        address_mapping="rorabacobgch"),
    # (hbm3, lpddr4-3200, lpddr5-6400 have no DRAMsim3 config to match; their mapping is
    # npulab's: consecutive bursts go to the next channel, then the next bank group, so a DMA
    # stream uses every channel and tCCD_S spacing.)
    # Zero latency, unlimited bandwidth (organisation and clock of ddr4-3200, for unit
    # conversions): every transfer finishes at its start cycle. Proves compute-only equivalence.
    "ideal": dict(ideal=True, refresh=False),
}

#: Built-in configs by name.
DRAM_PRESETS: dict[str, DramConfig] = {name: DramConfig(preset=name, **values)
                                       for name, values in _PRESET_VALUES.items()}
#: Where each preset's figures come from (details in the comments above and docs/dram.md).
DRAM_PRESET_SOURCES: dict[str, str] = {
    "ddr4-3200": "DRAMsim3 configs/DDR4_8Gb_x8_3200.ini",
    "hbm2": "DRAMsim3 configs/HBM2_8Gb_x128.ini",
    "hbm3": "Ramulator 2.0 HBM3.cpp, HBM3_6.4Gbps (JESD238A organisation)",
    "lpddr4-3200": "JEDEC JESD209-4 timings (ns) at tCK 0.625 ns",
    "lpddr5-6400": "Ramulator 2.0 LPDDR5.cpp, LPDDR5_6400; Micron MT62F datasheet",
    "ideal": "zero latency, unlimited bandwidth",
}
DEFAULT_PRESET = "ddr4-3200"
_FIELD_NAMES = [f.name for f in fields(DramConfig)]


def dram_preset(name: str) -> DramConfig:
    """The preset called ``name``; ConfigError listing the presets otherwise."""
    if name not in DRAM_PRESETS:
        raise ConfigError(f"dram preset: preset = {name!r}: must be one of "
                          f"{', '.join(repr(n) for n in DRAM_PRESETS)}")
    return DRAM_PRESETS[name]


def dram_config_from_dict(data: dict, where: str, prefix: str = "dram.") -> DramConfig:
    """Build a config from a TOML ``[dram]`` table: an optional ``preset`` (default
    ``ddr4-3200``) and any field as an override. A table that gives every field may name any
    preset (its label is kept, so :func:`dram_config_to_dict` output round-trips)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {prefix.rstrip('.')} = {data!r}: must be a table")
    for key in data:
        if key not in _FIELD_NAMES:
            raise ConfigError(f"{where}: {prefix}{key}: unknown key; allowed keys: "
                              f"{', '.join(_FIELD_NAMES)}")
    name = data.get("preset", DEFAULT_PRESET)
    complete = all(f in data for f in _FIELD_NAMES)
    if not complete and name not in DRAM_PRESETS:
        raise ConfigError(f"{where}: {prefix}preset = {name!r}: must be one of "
                          f"{', '.join(repr(n) for n in DRAM_PRESETS)} (or give every field)")
    values = dataclasses.asdict(DRAM_PRESETS[name]) if not complete else {}
    values.update(data)
    values["preset"] = name
    cfg = object.__new__(DramConfig)
    for key in _FIELD_NAMES:
        object.__setattr__(cfg, key, values[key])
    cfg.validate(where, prefix)
    return cfg


def dram_config_to_dict(cfg: DramConfig) -> dict[str, Any]:
    """Every field as plain data; :func:`dram_config_from_dict` rebuilds an equal config."""
    return dataclasses.asdict(cfg)


# DRAMsim3 Config defaults for keys an .ini may omit (configuration.cc)
_INI_DEFAULTS = {"tCK": 1.0, "AL": 0, "CL": 12, "CWL": 12, "tCCD_L": 6, "tCCD_S": 4, "tRTRS": 2,
                 "tRTP": 5, "tWTR_L": 5, "tWTR_S": 5, "tWR": 10, "tRP": 10, "tRRD_L": 4,
                 "tRRD_S": 4, "tRAS": 24, "tRCD": 10, "tRFC": 74, "tREFI": 7800, "tFAW": 50,
                 "tPPD": 0, "tRCDRD": 24, "tRCDWR": 20}
_PROTOCOLS = ("DDR3", "DDR4", "GDDR5", "GDDR5X", "LPDDR", "LPDDR3", "LPDDR4", "HBM", "HBM2")


def dram_config_from_dramsim3_ini(path) -> DramConfig:
    """Read a DRAMsim3 ``.ini`` (sections ``[dram_structure]``, ``[timing]``, ``[system]``) into
    a config, so a trace can be replayed with exactly a DRAMsim3 configuration. Ranks follow
    from ``channel_size`` as in DRAMsim3; AL is folded into CL/CWL/tRTP/tRCD. Unsupported
    settings (HMC, bank-level refresh) raise ConfigError naming the file and key."""
    path = Path(path)
    where = str(path)
    # DRAMsim3 reads .ini files with inih: no '%' interpolation, so none here either
    parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None)
    parser.optionxform = str  # keys are case-sensitive (tRCD vs trcd)
    text = read_config_text(path, what="DRAMsim3 .ini file")
    try:
        parser.read_string(text, source=where)
    except configparser.Error as exc:
        raise ConfigError(_ini_syntax(where, text, exc)) from None

    def get(section: str, key: str, default=None, kind=int, minimum=0):
        raw = parser.get(section, key, fallback=None)
        if raw is None:
            if default is None:
                raise ConfigError(f"{where}: [{section}] {key}: missing; DRAMsim3 configs must set it")
            return default
        try:
            value = kind(raw)
        except ValueError:
            value = None
        if kind is int and (value is None or value < minimum):
            raise ConfigError(f"{where}: [{section}] {key} = {raw!r}: must be an integer "
                              f">= {minimum}")
        if kind is float and (value is None or not math.isfinite(value) or value <= 0):
            raise ConfigError(f"{where}: [{section}] {key} = {raw!r}: must be a number > 0")
        return value

    t = lambda key: get("timing", key, _INI_DEFAULTS[key])  # noqa: E731
    protocol = parser.get("dram_structure", "protocol", fallback="DDR3")
    if protocol not in _PROTOCOLS:
        raise ConfigError(f"{where}: [dram_structure] protocol = {protocol!r}: must be one of "
                          f"{', '.join(_PROTOCOLS)} (HMC is not modelled)")
    hbm, gddr = protocol.startswith("HBM"), protocol.startswith("GDDR")
    bankgroups = get("dram_structure", "bankgroups", 2, minimum=1)
    banks_per_group = get("dram_structure", "banks_per_group", 2, minimum=1)
    if parser.get("dram_structure", "bankgroup_enable", fallback="true").lower() in ("false", "0", "no"):
        banks_per_group, bankgroups = banks_per_group * bankgroups, 1
    rows = get("dram_structure", "rows", 1 << 16, minimum=1)
    columns = get("dram_structure", "columns", 1 << 10, minimum=1)
    device_width = get("dram_structure", "device_width", 8, minimum=1)
    bl = get("dram_structure", "BL", 8, minimum=1)
    tpc = {"GDDR5": 4, "GDDR5X": 8}.get(protocol, 2)
    columns *= bl if gddr else 2 if hbm else 1  # DRAMsim3's physical columns
    bus_width = get("system", "bus_width", 64, minimum=1)
    channel_size = get("system", "channel_size", 1024, minimum=1)
    banks = bankgroups * banks_per_group
    page_bytes = columns * device_width // 8
    megs_per_rank = page_bytes * (rows // 1024) // 1024 * banks * (bus_width // device_width)
    ranks = max(1, channel_size // megs_per_rank) if megs_per_rank > 0 else 1
    refresh_policy = parser.get("system", "refresh_policy", fallback="RANK_LEVEL_STAGGERED")
    # with one rank, DRAMsim3's "simultaneous" policy refreshes rank 0 every tREFI: the same
    if refresh_policy != "RANK_LEVEL_STAGGERED" and not (
            refresh_policy == "RANK_LEVEL_SIMULTANEOUS" and ranks == 1):
        raise ConfigError(f"{where}: [system] refresh_policy = {refresh_policy!r}: must be "
                          f"'RANK_LEVEL_STAGGERED' (the only refresh policy npulab models; "
                          f"'RANK_LEVEL_SIMULTANEOUS' is accepted with one rank)")
    al = t("AL")
    values = dict(
        preset=f"dramsim3:{path.name}", channels=get("system", "channels", 1, minimum=1),
        ranks=ranks,
        bankgroups=bankgroups, banks_per_group=banks_per_group, rows=rows, columns=columns,
        bus_width_bits=bus_width, burst_length=bl, transfers_per_clock=tpc,
        tck_ns=get("timing", "tCK", 1.0, float), cl=t("CL") + al, cwl=t("CWL") + al,
        trcd=t("tRCDRD") if hbm or gddr else t("tRCD") - al,
        trcdwr=t("tRCDWR") if hbm or gddr else 0,
        trp=t("tRP"), tras=t("tRAS"), trrd_s=t("tRRD_S"), trrd_l=t("tRRD_L"), tccd_s=t("tCCD_S"),
        tccd_l=t("tCCD_L"), twtr_s=t("tWTR_S"), twtr_l=t("tWTR_L"), tfaw=t("tFAW"), twr=t("tWR"),
        trtp=t("tRTP") + al, trfc=t("tRFC"), trefi=t("tREFI"), trtrs=t("tRTRS"),
        tppd=t("tPPD") if gddr or protocol == "LPDDR4" else 0,
        address_mapping=parser.get("system", "address_mapping", fallback="chrobabgraco"),
        page_policy="closed" if parser.get("system", "row_buf_policy", fallback="OPEN_PAGE")
        == "CLOSE_PAGE" else "open",
        queue_structure=parser.get("system", "queue_structure", fallback="PER_BANK").lower(),
        queue_depth=get("system", "cmd_queue_size", 16, minimum=1),
        transaction_queue_depth=get("system", "trans_queue_size", 32, minimum=1),
        dual_command_issue=hbm and parser.get("dram_structure", "hbm_dual_cmd", fallback="true").lower()
        not in ("false", "0", "no"),
        refresh=True, ideal=False)
    return dram_config_from_dict(values, where, prefix="")


def _ini_syntax(where: str, text: str, exc: configparser.Error) -> str:
    """configparser's (multi-line) syntax error as one line naming the file, line and text."""
    lineno = getattr(exc, "lineno", None)
    if lineno is None and getattr(exc, "errors", None):
        lineno = exc.errors[0][0]
    lines = text.splitlines()
    line = lines[lineno - 1].strip() if lineno and 0 < lineno <= len(lines) else ""
    if isinstance(exc, configparser.MissingSectionHeaderError):
        allowed = "the file must start with a [section] header such as [dram_structure]"
    elif isinstance(exc, configparser.DuplicateSectionError):
        allowed = f"section [{exc.section}] appears twice"
    elif isinstance(exc, configparser.DuplicateOptionError):
        allowed = f"key {exc.option} appears twice in [{exc.section}]"
    else:
        allowed = "expected 'key = value' or '[section]'"
    at = f"{where}:{lineno}" if lineno else where
    return f"{at}: {line!r}: not a DRAMsim3 .ini file: {allowed}"


# ---- kernel arrays ------------------------------------------------------------------------
def _kernel_params(cfg: DramConfig) -> np.ndarray:
    """The int64 ``params`` vector of :mod:`hw.memory._dram_kernel` (layout in its docstring)."""
    p = np.zeros(K.N_PARAMS, np.int64)
    widths, pos = cfg.field_widths(), cfg.field_positions()
    burst, rl, wl = cfg.burst_cycles, cfg.cl, cfg.cwl
    one_group = cfg.bankgroups == 1  # DRAMsim3: without bank groups the _L timings are the _S ones
    ccd_l = cfg.tccd_s if one_group else cfg.tccd_l
    wtr_l = cfg.twtr_s if one_group else cfg.twtr_l
    values = {
        K.P_CHANNELS: cfg.channels, K.P_RANKS: cfg.ranks, K.P_BANKGROUPS: cfg.bankgroups,
        K.P_BPG: cfg.banks_per_group, K.P_BANKS: cfg.banks, K.P_REQ_BYTES: cfg.request_bytes,
        K.P_SHIFT: int(math.log2(cfg.request_bytes)),
        K.P_BURST: burst, K.P_RL: rl, K.P_WL: wl,
        # command-to-command distances, DRAMsim3 timing.cc's table (AL folded into cl/cwl)
        K.P_RTRL: max(burst, ccd_l), K.P_RTRS: max(burst, cfg.tccd_s), K.P_RTRO: burst + cfg.trtrs,
        K.P_RTW: rl + burst - wl + cfg.trtrs, K.P_RTWO: rl + burst + cfg.trtrs - wl,
        K.P_RTP: cfg.trtp, K.P_RDA_ACT: burst + cfg.trtp + cfg.trp, K.P_RDA_REF: cfg.trtp + cfg.trp,
        K.P_WTRL: wl + burst + wtr_l, K.P_WTRS: wl + burst + cfg.twtr_s,
        K.P_WTRO: wl + burst + cfg.trtrs - rl, K.P_WTWL: max(burst, ccd_l),
        K.P_WTWS: max(burst, cfg.tccd_s), K.P_WTWO: burst, K.P_WTP: wl + burst + cfg.twr,
        K.P_WRA_ACT: wl + burst + cfg.twr + cfg.trp,
        K.P_RP: cfg.trp, K.P_RC: cfg.tras + cfg.trp, K.P_RAS: cfg.tras, K.P_RCDRD: cfg.trcd,
        K.P_RCDWR: cfg.trcdwr or cfg.trcd, K.P_RRDL: cfg.trrd_s if one_group else cfg.trrd_l,
        K.P_RRDS: cfg.trrd_s, K.P_FAW: cfg.tfaw, K.P_RFC: cfg.trfc,
        K.P_REF_INTERVAL: cfg.trefi // cfg.ranks, K.P_PPD: cfg.tppd,
        K.P_CLOSED: cfg.page_policy == "closed", K.P_PER_RANK: cfg.queue_structure == "per_rank",
        K.P_NQ: cfg.ranks if cfg.queue_structure == "per_rank" else cfg.ranks * cfg.banks,
        K.P_MASKED: (cfg.ranks if cfg.queue_structure == "per_rank" else cfg.ranks * cfg.banks) <= 64,
        K.P_QDEPTH: cfg.queue_depth, K.P_TQDEPTH: cfg.transaction_queue_depth,
        K.P_DUAL: cfg.dual_command_issue, K.P_REFRESH: cfg.refresh, K.P_IDEAL: cfg.ideal,
        K.P_LG_BANKS: cfg.banks.bit_length() - 1, K.P_LG_BPG: cfg.banks_per_group.bit_length() - 1,
    }
    for name, (ip, im) in {"ch": (K.P_CH_POS, K.P_CH_MASK), "ra": (K.P_RA_POS, K.P_RA_MASK),
                           "bg": (K.P_BG_POS, K.P_BG_MASK), "ba": (K.P_BA_POS, K.P_BA_MASK),
                           "ro": (K.P_RO_POS, K.P_RO_MASK)}.items():
        values[ip], values[im] = pos[name], (1 << widths[name]) - 1
    for index, value in values.items():
        p[index] = int(value)
    C, R, B, G = cfg.channels, cfg.ranks, cfg.banks, cfg.bankgroups
    nq, D, T = int(p[K.P_NQ]), cfg.queue_depth, cfg.transaction_queue_depth
    regions = [
        *[(o, C) for o in (K.P_O_TIME, K.P_O_RR, K.P_O_REF_NEXT, K.P_O_REF_RANK, K.P_O_REF_HEAD,
                           K.P_O_REF_LEN, K.P_O_QCOUNT, K.P_O_QMASK, K.P_O_SEQ, K.P_O_TQHEAD,
                           K.P_O_TQLEN, K.P_O_FM_VALID, K.P_O_FM, K.P_O_SEL_VALID, K.P_O_SEL_T,
                           K.P_O_SEL_Q, K.P_O_SEL_B, K.P_O_SEL_I, K.P_O_SEL_K)],
        (K.P_O_REF_FIFO, C * K.REF_FIFO), (K.P_O_MAXFIN, 1),
        *[(o, C * R * B) for o in (K.P_O_OPEN, K.P_O_HITS, K.P_O_NACT, K.P_O_NPRE, K.P_O_NRD,
                                   K.P_O_NWR, K.P_O_NREF, K.P_O_BHEAD, K.P_O_BLEN, K.P_O_BNWR, K.P_O_QC_VALID,
                                   K.P_O_QC_A, K.P_O_QC_RD, K.P_O_QC_WR, K.P_O_QT_A, K.P_O_QT_RD,
                                   K.P_O_QT_WR, K.P_O_QT_ROW_EPOCH, K.P_O_QT_COL_EPOCH)],
        *[(o, C * R * G) for o in (K.P_O_BG_NACT, K.P_O_BG_NRD, K.P_O_BG_NWR)],
        *[(o, C * R) for o in (K.P_O_RK_NACT, K.P_O_RK_NRD, K.P_O_RK_NWR, K.P_O_RK_NPRE,
                               K.P_O_RK_NREF, K.P_O_OTH_NRD, K.P_O_OTH_NWR, K.P_O_FAW_IDX,
                               K.P_O_RK_ROW_EPOCH, K.P_O_RK_COL_EPOCH, K.P_O_RBMASK)],
        (K.P_O_FAW, C * R * 4), (K.P_O_QLEN, C * nq),
        *[(o, C * R * B * D) for o in (K.P_O_BE_ROW, K.P_O_BE_WR, K.P_O_BE_REQ, K.P_O_BE_FLAG,
                                       K.P_O_BE_SEQ)],
        *[(o, C * T) for o in (K.P_O_TQ_BANK, K.P_O_TQ_ROW, K.P_O_TQ_WR, K.P_O_TQ_REQ,
                               K.P_O_TQ_Q, K.P_O_TQ_ARR)],
    ]
    offset = 0
    for index, size in regions:
        p[index] = offset
        offset += size
    p[K.P_O_SCRATCH] = offset                   # idle skipping: snapshot + change per round
    offset += 2 * (offset + K.N_STATS)
    p[K.P_STATE_SIZE] = offset
    return p


def _initial_state(p: np.ndarray) -> np.ndarray:
    s = np.zeros(int(p[K.P_STATE_SIZE]), np.int64)
    C, R, B = int(p[K.P_CHANNELS]), int(p[K.P_RANKS]), int(p[K.P_BANKS])
    s[p[K.P_O_TIME]:p[K.P_O_TIME] + C] = -1
    s[p[K.P_O_REF_NEXT]:p[K.P_O_REF_NEXT] + C] = p[K.P_REF_INTERVAL]
    s[p[K.P_O_OPEN]:p[K.P_O_OPEN] + C * R * B] = -1
    s[p[K.P_O_FAW]:p[K.P_O_FAW] + C * R * 4] = -(1 << 40)
    return s


# ---- replay -------------------------------------------------------------------------------
class TraceError(ConfigError):
    """A malformed trace line; the message names the file and line."""


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of :func:`replay`. Cycles are DRAM clock cycles (tCK); see the module docstring
    for what a completion includes.

    ``finish_cycles``/``latency_cycles``: per request, completion cycle and completion - issue.
    ``total_cycles``: from the first request's issue cycle to the last completion.
    ``bandwidth_gbps``: requests * request_bytes / (total_cycles * tck_ns); 0 if no time passed.
    ``commands`` (only with ``command_log=True``): one row per command, columns ``cycle,
    channel, rank, bankgroup, bank, row, kind`` with kind 0 ACT, 1 PRE, 2 RD, 3 WR, 4 RDA,
    5 WRA, 6 REF (row -1 for REF).
    """

    finish_cycles: np.ndarray
    latency_cycles: np.ndarray
    total_cycles: int
    reads: int
    writes: int
    row_hits: int
    row_misses: int
    row_conflicts: int
    activates: int
    precharges: int
    refreshes: int
    mean_latency_cycles: float
    bandwidth_gbps: float
    commands: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (arrays as lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v = v.tolist()
            if v is not None:
                out[f.name] = v
        return out

    def __repr__(self) -> str:
        n = self.reads + self.writes
        hits = 100 * self.row_hits / n if n else 0.0
        return (f"ReplayResult: {n:,} requests ({self.reads:,} reads, {self.writes:,} writes) in "
                f"{self.total_cycles:,} DRAM cycles, {self.bandwidth_gbps:.4g} GB/s\n"
                f"  row buffer {self.row_hits:,} hits ({hits:.1f} %), {self.row_misses:,} misses, "
                f"{self.row_conflicts:,} conflicts; {self.activates:,} ACT, "
                f"{self.precharges:,} PRE, {self.refreshes:,} REF\n"
                f"  latency mean {self.mean_latency_cycles:.1f} cycles, max "
                f"{int(self.latency_cycles.max()) if len(self.latency_cycles) else 0:,}")

    def to_pandas(self):
        """One row per request, in the order given: ``index``, ``issue_cycle``,
        ``finish_cycle``, ``latency_cycles`` (the columns of ``npulab dram replay
        --per-request`` without the address and op, which the caller holds). Needs pandas."""
        from hw._notebook import import_pandas
        pd = import_pandas()
        fin = np.asarray(self.finish_cycles, dtype=np.int64)
        lat = np.asarray(self.latency_cycles, dtype=np.int64)
        return pd.DataFrame({"index": np.arange(len(fin), dtype=np.int64),
                             "issue_cycle": fin - lat, "finish_cycle": fin,
                             "latency_cycles": lat})


#: The latest issue cycle a trace or :func:`replay` may give: 2**60 (a 2**62 sentinel is the
#: kernel's "never"); idle gaps of any length up to it cost a few refresh rounds (the kernel
#: skips idle time).
MAX_TRACE_CYCLE = 1 << 60


def _as_requests(addresses, is_write, issue_cycles):
    a = np.ascontiguousarray(addresses, dtype=np.int64).reshape(-1)
    w = np.ascontiguousarray(is_write).reshape(-1).astype(np.uint8)
    t = np.ascontiguousarray(issue_cycles, dtype=np.int64).reshape(-1)
    if not len(a) == len(w) == len(t):
        raise ValueError(f"replay: addresses, is_write and issue_cycles differ in length "
                         f"({len(a)}, {len(w)}, {len(t)})")
    if len(a) and (a.min() < 0 or t.min() < 0):
        raise ValueError("replay: addresses and issue cycles must be >= 0")
    if len(a) and t.max() > MAX_TRACE_CYCLE:
        raise ValueError(f"replay: issue cycle {int(t.max())}: must be <= {MAX_TRACE_CYCLE} "
                         f"(2**60)")
    return a, w, t


def replay(cfg: DramConfig, addresses, is_write, issue_cycles, *,
           command_log: bool = False) -> ReplayResult:
    """Replay requests on a fresh model. Requests are offered in the given order, request k at
    ``max(issue_cycles[k], cycle request k-1 was offered)`` (in-order front end, as DRAMsim3's
    trace reader) and later while its channel's transaction queue is full."""
    a, w, t = _as_requests(addresses, is_write, issue_cycles)
    n = len(a)
    cap = 4 * n + 64 if command_log else 0
    while True:
        model = DramModel(cfg)
        finish = np.empty(max(n, 1), np.int64)
        log = np.empty((cap, K.LOG_FIELDS), np.int64)
        logn = np.zeros(1, np.int64)
        if n:
            K.run_requests(model.params, model.state, model.stats, a, w, t, 0, False, 0, n, n,
                           finish, log, logn)
        if not command_log or logn[0] <= cap:
            break
        cap = int(logn[0])
    finish = finish[:n].copy()
    latency = finish - t
    total = int(finish.max() - t.min()) if n else 0
    c = model.counters()
    return ReplayResult(
        finish_cycles=finish, latency_cycles=latency, total_cycles=total, reads=c["reads"],
        writes=c["writes"], row_hits=c["row_hits"], row_misses=c["row_misses"],
        row_conflicts=c["row_conflicts"], activates=c["activates"], precharges=c["precharges"],
        refreshes=c["refreshes"], mean_latency_cycles=float(latency.mean()) if n else 0.0,
        bandwidth_gbps=n * cfg.request_bytes / (total * cfg.tck_ns) if total > 0 else 0.0,
        commands=log[:int(logn[0])].copy() if command_log else None)


def read_trace(path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a DRAMsim3 trace: one request per line, ``<hex address> READ|WRITE <cycle>``
    (e.g. ``0x12345680 READ 10``); blank lines and ``#`` comments are skipped. Returns
    (addresses, is_write, issue_cycles). TraceError names the file and line of bad input."""
    path = Path(path)
    text = read_config_text(path, "no such trace file", what="trace file", error=TraceError)
    addrs, writes, cycles = [], [], []
    kinds = {"READ": False, "R": False, "WRITE": True, "W": True}
    for lineno, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        parts = body.split()
        if len(parts) != 3:
            raise TraceError(f"{path}:{lineno}: {line.strip()!r}: expected "
                             f"'<hex address> READ|WRITE <cycle>'")
        try:
            addr = int(parts[0], 16)
        except ValueError:
            raise TraceError(f"{path}:{lineno}: address {parts[0]!r}: must be hexadecimal, "
                             f"e.g. 0x1f40") from None
        kind = kinds.get(parts[1].upper())
        if kind is None:
            raise TraceError(f"{path}:{lineno}: operation {parts[1]!r}: must be READ or WRITE")
        try:
            cycle = int(parts[2], 10)
        except ValueError:
            cycle = -1
        if not 0 <= cycle <= MAX_TRACE_CYCLE:
            raise TraceError(f"{path}:{lineno}: cycle {parts[2]!r}: must be a decimal integer "
                             f"in 0..{MAX_TRACE_CYCLE} (2**60)")
        if not 0 <= addr < 1 << 62:
            raise TraceError(f"{path}:{lineno}: address {parts[0]!r}: must be in 0x0.."
                             f"{(1 << 62) - 1:#x} (below 2**62)")
        addrs.append(addr)
        writes.append(kind)
        cycles.append(cycle)
    return (np.array(addrs, np.int64), np.array(writes, bool), np.array(cycles, np.int64))


# ---- stateful model -----------------------------------------------------------------------
_COUNTERS = ("reads", "writes", "row_hits", "row_misses", "row_conflicts", "activates",
             "precharges", "refreshes", "data_cycles", "refresh_cycles")   # K.ST_<NAME>


class DramModel:
    """Stateful DRAM: open rows, timing constraints, pending refreshes and counters persist
    across :meth:`transfer` calls (the executor issues many transfers).

    ``params``, ``state`` and ``stats`` are the int64 arrays behind it; Numba code may pass them
    to :func:`hw.memory._dram_kernel.dram_transfer` directly.
    """

    def __init__(self, cfg: DramConfig):
        if not isinstance(cfg, DramConfig):
            raise TypeError(f"DramModel: cfg must be a DramConfig, not {type(cfg).__name__}")
        self.cfg = cfg
        self.params = _kernel_params(cfg)
        self.state = _initial_state(self.params)
        self.stats = np.zeros(K.N_STATS, np.int64)

    def transfer(self, address: int, nbytes: int, is_write: bool, start_cycle: int,
                 max_outstanding: int) -> int:
        """A DMA burst: the column requests covering ``[address, address + nbytes)`` (that is
        ``ceil(nbytes / request_bytes)`` of them for an aligned address), offered in address
        order no earlier than ``start_cycle``, with request k waiting for request
        k - ``max_outstanding`` to complete. Returns the DRAM cycle the last one completes
        (``start_cycle`` for ``nbytes == 0`` and on the ideal model).

        The burst is simulated to completion before returning. Calls with non-decreasing
        ``start_cycle`` are the normal case; a channel already simulated past ``start_cycle``
        by an earlier call takes the new requests after that point (bursts overlapping in time
        are served one after another, not interleaved)."""
        if address < 0 or nbytes < 0 or start_cycle < 0 or max_outstanding < 1:
            raise ValueError(f"DramModel.transfer: need address, nbytes, start_cycle >= 0 and "
                             f"max_outstanding >= 1 (got {address}, {nbytes}, {start_cycle}, "
                             f"{max_outstanding})")
        return int(K.dram_transfer(self.params, self.state, self.stats, int(address), int(nbytes),
                                   bool(is_write), int(start_cycle), int(max_outstanding)))

    def counters(self) -> dict[str, int]:
        """Totals since construction: reads, writes, row_hits/misses/conflicts (per request:
        hit = its column command needed no ACT; miss = bank closed, ACT only; conflict = another
        row open, PRE + ACT), activates, precharges, refreshes, data_cycles (data-bus busy cycles,
        summed over channels) and refresh_cycles (tRFC per refresh)."""
        return {name: int(self.stats[getattr(K, "ST_" + name.upper())]) for name in _COUNTERS}
