"""The configuration of a DRAM memory system: :class:`DramConfig`, its checks, and address decoding.

Organisation (channels, ranks, bank groups, banks, rows, columns), bus, clock, JEDEC timings in
command-clock cycles, address mapping, page policy and queues; validated when built, every error
naming the key, the value and what is allowed. The presets and the ``[dram]`` table are in
:mod:`hw.memory.dram.presets`, DRAMsim3's ``.ini`` files in :mod:`hw.memory.dram.ini`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from hw.systolic.config import ConfigError
from hw.validate import _is_bool, _is_int

__all__ = ["DramConfig", "decode_address", "MAPPING_FIELDS", "PAGE_POLICIES", "QUEUE_STRUCTURES"]

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


#: How transfers are timed (DramConfig.model).
DRAM_MODELS = ("cycle", "cached")


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
    channel_hash: XOR the channel bits with the address bits above them, folded into
        channel-wide groups, so strided streams (a row-major tile's rows, a power of two apart)
        spread over every channel instead of landing on one: what GPUs and many SoCs do
        (e.g. the permutation-based interleaving of Zhang et al., MICRO 2000). Default false:
        the mapping's bit fields alone.
    model: ``"cycle"`` (default): every request of every transfer goes through the
        controller model. ``"cached"`` (a simulation-speed option for chips that move gigabytes,
        such as an A100-scale chip): each distinct transfer shape (box, direction, alignment) is
        simulated once on an idle DRAM; later transfers of that shape reuse its latency, data
        time and statistics, and queue for the DRAM's data bus (:mod:`hw.executor`).
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
    channel_hash: bool = False
    model: str = "cycle"

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
        if self.model not in DRAM_MODELS:
            fail("model", self.model, "one of " + ", ".join(repr(m) for m in DRAM_MODELS))
        integer("queue_depth", 1, 4096)
        integer("transaction_queue_depth", 1, 4096)
        for key in ("dual_command_issue", "refresh", "ideal", "channel_hash"):
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
    above = sum(widths.values()) - pos["ch"] - widths["ch"]
    if cfg.channel_hash and widths["ch"] and above > 0:     # the kernel's XOR fold
        rest = (a >> (pos["ch"] + widths["ch"])) & ((1 << above) - 1)
        while rest:
            value["ch"] ^= rest & ((1 << widths["ch"]) - 1)
            rest >>= widths["ch"]
    return {"channel": value["ch"], "rank": value["ra"], "bankgroup": value["bg"],
            "bank": value["ba"], "row": value["ro"], "column": value["co"]}
