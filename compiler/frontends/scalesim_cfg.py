"""Read and write SCALE-Sim ``.cfg`` hardware configs (``scalesim/scale_config.py``).

The file is a :mod:`configparser` INI (SCALE-Sim uses a default ``ConfigParser``, so keys are
case-insensitive, ``:`` and ``=`` both separate, and ``%`` is an interpolation character)::

    [general]              run_name
    [architecture_presets] ArrayHeight, ArrayWidth, IfmapSramSzkB, FilterSramSzkB, OfmapSramSzkB,
                           IfmapOffset, FilterOffset, OfmapOffset, Dataflow (os|ws|is), Bandwidth,
                           ReadRequestBuffer, WriteRequestBuffer
    [run_presets]          InterfaceBandwidth (CALC|USER), UseRamulatorTrace     (v3)
    [layout], [sparsity]   custom SRAM layouts, N:M sparsity                      (v3)
                           ([layout]'s Ifmap/Filter SRAMBankBandwidth, -Num and -Port are
                           checked to be integers >= 1; they matter only for custom layouts)

Units are SCALE-Sim's: SRAM sizes in kB of 1024 bytes, 1-byte words (``single_layer_sim.py``),
offsets are word addresses, Bandwidth is words per cycle. SCALE-Sim parses Bandwidth as a
comma-separated list and reads it only in USER mode; it is a tuple here, ``()`` when absent.

Differences from SCALE-Sim 3.0.0, which requires every v3 section: a v2 file (no
``[run_presets]``) means ``InterfaceBandwidth = CALC``; ``ReadRequestBuffer``/``WriteRequestBuffer``
(read by v3 only, used only with Ramulator traces) are ``None`` when absent. Features npulab does
not model are rejected rather than silently dropped: ``SparsitySupport``, custom layouts and
Ramulator traces. Dataflow and InterfaceBandwidth are matched case-sensitively, as SCALE-Sim does.
Unknown keys (e.g. ``MemoryBanks`` in SCALE-Sim's own configs/scale.cfg) are ignored, as there.
"""

from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from hw.files import read_text

__all__ = [
    "ScaleSimConfigError",
    "ScaleSimConfig",
    "DATAFLOWS",
    "BANDWIDTH_MODES",
    "read_scalesim_cfg",
    "write_scalesim_cfg",
]

PathLike = Union[str, "os.PathLike[str]"]

DATAFLOWS = ("os", "ws", "is")  # scale_config.valid_df_list
BANDWIDTH_MODES = ("CALC", "USER")  # scale_config.read_conf_file, "ISSUE #2. Patch"
KB = 1024  # single_layer_sim.py: buf_size_bytes = 1024 * buf_size_kb

_DIGITS = re.compile(r"[0-9]+")
_ARCH = "architecture_presets"

# (field, section, key, minimum, required); key spellings follow SCALE-Sim's sample configs.
_INT_KEYS = (
    ("array_rows", _ARCH, "ArrayHeight", 1, True),
    ("array_cols", _ARCH, "ArrayWidth", 1, True),
    ("ifmap_sram_kb", _ARCH, "IfmapSramSzkB", 1, True),
    ("filter_sram_kb", _ARCH, "FilterSramSzkB", 1, True),
    ("ofmap_sram_kb", _ARCH, "OfmapSramSzkB", 1, True),
    ("ifmap_offset", _ARCH, "IfmapOffset", 0, True),
    ("filter_offset", _ARCH, "FilterOffset", 0, True),
    ("ofmap_offset", _ARCH, "OfmapOffset", 0, True),
    ("read_request_buffer", _ARCH, "ReadRequestBuffer", 1, False),
    ("write_request_buffer", _ARCH, "WriteRequestBuffer", 1, False),
)
# [layout] bank parameters (v3): read by SCALE-Sim only for custom layouts, which npulab rejects,
# but checked like every other number so that a typo is not silently carried along.
_LAYOUT_INT_KEYS = tuple(f"{operand}SRAMBank{what}" for operand in ("Ifmap", "Filter")
                         for what in ("Bandwidth", "Num", "Port"))
# (section, key, why) for v3 switches npulab does not model; true values are rejected.
_UNMODELLED = (
    ("layout", "IfmapCustomLayout", "custom ifmap SRAM layouts"),
    ("layout", "FilterCustomLayout", "custom filter SRAM layouts"),
    ("sparsity", "SparsitySupport", "N:M sparsity"),
    ("run_presets", "UseRamulatorTrace", "Ramulator DRAM traces"),
)


class ScaleSimConfigError(ValueError):
    """A SCALE-Sim config file (or a :class:`ScaleSimConfig`) is not valid."""


@dataclass(frozen=True, kw_only=True)
class ScaleSimConfig:
    """One SCALE-Sim hardware config; field names keep SCALE-Sim's units (``_kb`` = 1024 B)."""

    run_name: str
    array_rows: int  # ArrayHeight
    array_cols: int  # ArrayWidth
    ifmap_sram_kb: int
    filter_sram_kb: int
    ofmap_sram_kb: int
    ifmap_offset: int = 0  # defaults: scale_config.__init__
    filter_offset: int = 10_000_000
    ofmap_offset: int = 20_000_000
    dataflow: str = "os"
    bandwidth: tuple[int, ...] = ()
    read_request_buffer: int | None = None
    write_request_buffer: int | None = None
    interface_bandwidth: str = "CALC"

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> ScaleSimConfigError:
            value = getattr(self, name)
            return ScaleSimConfigError(f"ScaleSimConfig: {name}: {value!r}: {allowed}")

        name = self.run_name
        if not isinstance(name, str) or not name.strip() or name != name.strip() \
                or any(c in name for c in "/%\r\n"):
            raise bad("run_name", "a non-empty name without surrounding whitespace, '/', '%' or "
                      "line breaks (SCALE-Sim makes it a directory; configparser interpolates %)")
        for name, _section, _key, minimum, required in _INT_KEYS:
            value = getattr(self, name)
            if value is None and not required:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise bad(name, f"must be an integer >= {minimum}")
        if self.dataflow not in DATAFLOWS:
            raise bad("dataflow", f"must be one of {', '.join(DATAFLOWS)} (lowercase)")
        if not isinstance(self.bandwidth, tuple) or not all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in self.bandwidth
        ):
            raise bad("bandwidth", "must be a tuple of integers >= 1 (words per cycle)")
        if self.interface_bandwidth not in BANDWIDTH_MODES:
            raise bad("interface_bandwidth", f"must be one of {', '.join(BANDWIDTH_MODES)}")
        if self.interface_bandwidth == "USER" and not self.bandwidth:
            raise bad("bandwidth", "USER interface bandwidth needs at least one value")

    @property
    def pes(self) -> int:
        return self.array_rows * self.array_cols

    @property
    def sram_bytes(self) -> tuple[int, int, int]:
        """(ifmap, filter, ofmap) SRAM sizes in bytes (= words: SCALE-Sim's word is 1 byte)."""
        return (self.ifmap_sram_kb * KB, self.filter_sram_kb * KB, self.ofmap_sram_kb * KB)


def read_scalesim_cfg(path: PathLike) -> ScaleSimConfig:
    """Parse a SCALE-Sim v2 or v3 ``.cfg``; raises :class:`ScaleSimConfigError` naming the file."""
    path = Path(path)
    parser = configparser.ConfigParser()  # SCALE-Sim's own parser settings
    text = read_text(path, "SCALE-Sim .cfg", error=ScaleSimConfigError)
    lines = text.splitlines()

    def syntax(lineno: int, allowed: str) -> ScaleSimConfigError:
        # Quote the offending line from the file itself: configparser's copies are repr()'d
        # (ParsingError) or lowercased (DuplicateOptionError).
        line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        return ScaleSimConfigError(f"{path}:{lineno}: syntax: {line!r}: {allowed}")

    try:
        parser.read_string(text, source=str(path))
    except configparser.MissingSectionHeaderError as exc:
        raise syntax(exc.lineno, "the file must start with a [section] header such as "
                     "[general]") from exc
    except configparser.ParsingError as exc:
        raise syntax(exc.errors[0][0], "expected 'key = value', 'key: value' or "
                     "'[section]'") from exc
    except configparser.DuplicateSectionError as exc:
        raise syntax(exc.lineno, f"section [{exc.section}] appears twice") from exc
    except configparser.DuplicateOptionError as exc:
        raise syntax(exc.lineno, f"key {exc.option} appears twice in [{exc.section}]") from exc

    def fail(section: str, key: str, value: object, allowed: str) -> ScaleSimConfigError:
        return ScaleSimConfigError(f"{path}: {section}.{key}: {value!r}: {allowed}")

    def get(section: str, key: str, required: bool = True) -> str | None:
        if not parser.has_section(section):
            if required:
                raise fail(section, key, None, f"missing: the file has no [{section}] section")
            return None
        if not parser.has_option(section, key):
            if required:
                raise fail(section, key, None, f"missing: [{section}] needs a {key} key")
            return None
        try:
            return parser.get(section, key).strip()
        except configparser.InterpolationError as exc:
            raw = parser.get(section, key, raw=True)
            raise fail(section, key, raw, "'%' must be written '%%' (configparser "
                       "interpolation, as SCALE-Sim reads it)") from exc

    values: dict[str, object] = {}
    run_name = get("general", "run_name")
    if not run_name or any(c in run_name for c in "/%"):
        raise fail("general", "run_name", run_name, "must be a non-empty name without '/' or "
                   "'%' (SCALE-Sim makes it the report directory)")
    values["run_name"] = run_name
    for name, section, key, minimum, required in _INT_KEYS:
        text = get(section, key, required)
        if text is None:
            continue
        if not _DIGITS.fullmatch(text) or int(text) < minimum:
            raise fail(section, key, text, f"must be a decimal integer >= {minimum}")
        values[name] = int(text)

    dataflow = get(_ARCH, "Dataflow")
    if dataflow not in DATAFLOWS:
        raise fail(_ARCH, "Dataflow", dataflow, f"must be one of {', '.join(DATAFLOWS)} "
                   "(lowercase: SCALE-Sim compares it case-sensitively)")
    values["dataflow"] = dataflow

    mode = get("run_presets", "InterfaceBandwidth", required=False)
    mode = "CALC" if mode is None else mode  # v2 files have no [run_presets]: CALC
    if mode not in BANDWIDTH_MODES:
        raise fail("run_presets", "InterfaceBandwidth", mode, f"must be one of "
                   f"{', '.join(BANDWIDTH_MODES)} (uppercase, as SCALE-Sim reads it)")
    values["interface_bandwidth"] = mode

    text = get(_ARCH, "Bandwidth", required=mode == "USER")
    if text is not None:
        parts = [p.strip() for p in text.split(",")]
        if not all(_DIGITS.fullmatch(p) and int(p) >= 1 for p in parts):
            raise fail(_ARCH, "Bandwidth", text, "must be a decimal integer >= 1 (words per "
                       "cycle), or a comma-separated list of them")
        values["bandwidth"] = tuple(int(p) for p in parts)

    for key in _LAYOUT_INT_KEYS:
        text = get("layout", key, required=False)
        if text is not None and (not _DIGITS.fullmatch(text) or int(text) < 1):
            raise fail("layout", key, text, "must be a decimal integer >= 1")

    for section, key, why in _UNMODELLED:
        text = get(section, key, required=False)
        if text is None:
            continue
        if text.lower() not in configparser.ConfigParser.BOOLEAN_STATES:
            raise fail(section, key, text, "must be a boolean (True or False)")
        if configparser.ConfigParser.BOOLEAN_STATES[text.lower()]:
            raise fail(section, key, text, f"npulab does not model {why}: set it to False")
    try:
        return ScaleSimConfig(**values)  # type: ignore[arg-type]
    except ScaleSimConfigError as exc:  # cross-field checks; re-raise with the file named
        raise ScaleSimConfigError(f"{path}: {exc}") from exc


def write_scalesim_cfg(cfg: ScaleSimConfig, path: PathLike) -> None:
    """Write ``cfg`` as a SCALE-Sim config that SCALE-Sim 3.0.0 itself can load.

    3.0.0 requires ``[layout]``, ``[sparsity]`` and ``[run_presets]``; they are written with
    every feature off and SCALE-Sim's default bank parameters (its configs/google.cfg). The
    request buffers are written only when set (3.0.0 needs them; see ``benchmarks/scalesim_peer``).
    """
    if not isinstance(cfg, ScaleSimConfig):
        raise TypeError(f"write_scalesim_cfg: expected a ScaleSimConfig, got {type(cfg).__name__}")
    arch = [
        ("ArrayHeight", cfg.array_rows), ("ArrayWidth", cfg.array_cols),
        ("IfmapSramSzkB", cfg.ifmap_sram_kb), ("FilterSramSzkB", cfg.filter_sram_kb),
        ("OfmapSramSzkB", cfg.ofmap_sram_kb), ("IfmapOffset", cfg.ifmap_offset),
        ("FilterOffset", cfg.filter_offset), ("OfmapOffset", cfg.ofmap_offset),
    ]
    if cfg.bandwidth:
        arch.append(("Bandwidth", ",".join(str(b) for b in cfg.bandwidth)))
    arch.append(("Dataflow", cfg.dataflow))
    for key, value in (("ReadRequestBuffer", cfg.read_request_buffer),
                       ("WriteRequestBuffer", cfg.write_request_buffer)):
        if value is not None:
            arch.append((key, value))
    sections = [
        ("general", [("run_name", cfg.run_name)]),
        (_ARCH, arch),
        ("layout", [
            ("IfmapCustomLayout", "False"), ("IfmapSRAMBankBandwidth", 10),
            ("IfmapSRAMBankNum", 10), ("IfmapSRAMBankPort", 2),
            ("FilterCustomLayout", "False"), ("FilterSRAMBankBandwidth", 10),
            ("FilterSRAMBankNum", 10), ("FilterSRAMBankPort", 2),
        ]),
        ("sparsity", [
            ("SparsitySupport", "false"), ("SparseRep", "ellpack_block"),
            ("OptimizedMapping", "false"), ("BlockSize", 8), ("RandomNumberGeneratorSeed", 40),
        ]),
        ("run_presets", [
            ("InterfaceBandwidth", cfg.interface_bandwidth), ("UseRamulatorTrace", "False"),
        ]),
    ]
    text = "\n".join(
        f"[{name}]\n" + "".join(f"{key} = {value}\n" for key, value in items)
        for name, items in sections
    )
    Path(path).write_text(text, encoding="utf-8")

