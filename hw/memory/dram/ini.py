"""DRAMsim3's ``.ini`` configuration files, read into a :class:`~hw.memory.dram.DramConfig`.

So that a trace can be replayed with exactly a DRAMsim3 configuration: DRAMsim3's defaults for
omitted keys, its rank count from ``channel_size``, AL folded into the latencies, and one-line
errors naming the file, the line or key, and what is allowed.
"""

from __future__ import annotations

import configparser
import math
from pathlib import Path

from hw.memory.dram.config import DramConfig
from hw.memory.dram.presets import dram_config_from_dict
from hw.systolic.config import ConfigError
from hw.validate import read_config_text

__all__ = ["dram_config_from_dramsim3_ini"]


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
