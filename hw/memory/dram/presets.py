"""The DRAM presets (DDR4, HBM2, HBM3, LPDDR4, LPDDR5, ideal) and the ``[dram]`` table.

Every preset cites where its figures come from. A ``[dram]`` table of a config file is a preset
plus field overrides (:func:`dram_config_from_dict`); :func:`dram_config_to_dict` writes a
config back as such a table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Any

from hw.memory.dram.config import DramConfig
from hw.systolic.config import ConfigError

__all__ = ["DRAM_PRESETS", "DRAM_PRESET_SOURCES", "DEFAULT_PRESET", "dram_preset",
           "dram_config_from_dict", "dram_config_to_dict"]


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
    # HBM2E 3.2 Gb/s (JESD235C speed grade; the A100 80GB's HBM2e runs at 3.19 Gb/s): the
    # organisation of hbm2 above (one stack, 8 channels x 128 bit, 409.6 GB/s) and DRAMsim3's
    # HBM2 timings in ns at tCK 0.625 ns (ns values x 1.6 rounded up; tCCD_S/L scaled the same;
    # trtrs as hbm2). No public JEDEC HBM2E AC table: as hbm3, the ns values carry over.
    "hbm2e": dict(channels=8, ranks=1, rows=32768, columns=128, bus_width_bits=128,
                  burst_length=4, tck_ns=0.625, cl=23, cwl=7, trcd=23, trcdwr=23, trp=23, tras=55,
                  trrd_s=7, trrd_l=10, tccd_s=2, tccd_l=4, twtr_s=10, twtr_l=13, tfaw=48, twr=26,
                  trtp=8, trfc=416, trefi=6240, trtrs=2, address_mapping="rorabacobgch",
                  queue_structure="per_rank", queue_depth=32, transaction_queue_depth=16,
                  dual_command_issue=True),
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
    "hbm2e": "DRAMsim3 HBM2_8Gb_x128.ini organisation and ns timings at 3.2 Gb/s (JESD235C)",
    "hbm3": "Ramulator 2.0 HBM3.cpp, HBM3_6.4Gbps (JESD238A organisation)",
    "lpddr4-3200": "JEDEC JESD209-4 timings (ns) at tCK 0.625 ns",
    "lpddr5-6400": "Ramulator 2.0 LPDDR5.cpp, LPDDR5_6400; Micron MT62F datasheet",
    "ideal": "zero latency, unlimited bandwidth",
}
DEFAULT_PRESET = "ddr4-3200"
_FIELD_NAMES = [f.name for f in fields(DramConfig)]
#: Fields a complete table may leave out (they take their defaults; dumps omit them then).
_OPTIONAL = ("model", "channel_hash")


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
    complete = all(f in data for f in _FIELD_NAMES if f not in _OPTIONAL)
    if not complete and name not in DRAM_PRESETS:
        raise ConfigError(f"{where}: {prefix}preset = {name!r}: must be one of "
                          f"{', '.join(repr(n) for n in DRAM_PRESETS)} (or give every field)")
    values = (dataclasses.asdict(DRAM_PRESETS[name]) if not complete
              else {f.name: f.default for f in fields(DramConfig) if f.name in _OPTIONAL})
    values.update(data)
    values["preset"] = name
    cfg = object.__new__(DramConfig)
    for key in _FIELD_NAMES:
        object.__setattr__(cfg, key, values[key])
    cfg.validate(where, prefix)
    return cfg


def dram_config_to_dict(cfg: DramConfig) -> dict[str, Any]:
    """Every field as plain data; :func:`dram_config_from_dict` rebuilds an equal config
    (``model`` and ``channel_hash`` only when set: configs without them read as they always
    did)."""
    out = dataclasses.asdict(cfg)
    if out["model"] == "cycle":
        del out["model"]
    if not out["channel_hash"]:
        del out["channel_hash"]
    return out
