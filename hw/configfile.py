"""Chip configs as TOML files: load (with ``SECTION.KEY=VALUE`` overrides), validate, dump.

File format (every key optional; missing keys take the defaults of :class:`~hw.chip.ChipConfig`)::

    [chip]
    name = "npulab-default"
    clock_mhz = 1000.0

    [array]
    rows = 32
    cols = 32
    dataflow = "ws"        # os | ws | is
    precision = "int8"     # int8 | int16 | fp16
    acc_bits = 32          # 16..64 for integers (default 32 for int8, 64 for int16); 32 for fp16
    overflow = "wrap"      # wrap | saturate

Every error is a :class:`~hw.systolic.config.ConfigError` whose one-line message names the
file (or ``--set``), the key, the value and what is allowed.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Iterable

from hw.chip import ChipConfig
from hw.systolic.config import ArrayConfig, ConfigError

__all__ = ["load_chip_config", "chip_config_from_dict", "chip_config_to_dict", "chip_config_to_toml",
           "parse_override"]

# section name -> (dataclass, where its values go)
_SECTIONS = {"chip": ChipConfig, "array": ArrayConfig}


def _allowed_keys(cls) -> list[str]:
    return [f.name for f in fields(cls) if not (cls is ChipConfig and f.name == "array")]


def _build(cls, values: dict[str, Any], where: str, section: str):
    """Construct a frozen config from a section's values, validating with file context."""
    allowed = _allowed_keys(cls)
    for key in values:
        if key not in allowed:
            raise ConfigError(
                f"{where}: {section}.{key}: unknown key; allowed keys in [{section}]: "
                f"{', '.join(allowed)}"
            )
    obj = object.__new__(cls)
    for f in fields(cls):
        if f.name in values:
            value = values[f.name]
        elif f.default is not MISSING:
            value = f.default
        else:
            value = f.default_factory()
        object.__setattr__(obj, f.name, value)
    obj.validate(where, prefix=f"{section}.")
    return obj


def chip_config_from_dict(data: dict[str, Any], where: str = "<config>",
                          overrides: Iterable[str] = ()) -> ChipConfig:
    """Build a :class:`ChipConfig` from parsed TOML (sections ``chip`` and ``array``), after
    applying ``--set``-style overrides; ``where`` names the source in error messages."""
    overrides = list(overrides)
    if overrides:
        data = apply_overrides(data, overrides)
        where = f"{where} with --set {' --set '.join(overrides)}"
    for section, value in data.items():
        if section not in _SECTIONS:
            raise ConfigError(
                f"{where}: [{section}]: unknown section; allowed sections: "
                f"{', '.join(_SECTIONS)}"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {section} = {value!r}: must be a [{section}] table")
    array = _build(ArrayConfig, data.get("array", {}), where, "array")
    chip_values = dict(data.get("chip", {}))
    chip = _build(ChipConfig, chip_values, where, "chip")
    object.__setattr__(chip, "array", array)
    return chip


def parse_override(text: str) -> tuple[str, str, Any]:
    """``"array.rows=16"`` -> ``("array", "rows", 16)``. Values use TOML syntax; a bare word
    that is not valid TOML is taken as a string (``--set array.dataflow=os``)."""
    where = f"--set {text}"
    if "=" not in text:
        raise ConfigError(f"{where}: expected SECTION.KEY=VALUE, e.g. array.rows=16")
    dotted, raw = text.split("=", 1)
    if dotted.count(".") != 1 or not all(dotted.split(".")):
        raise ConfigError(f"{where}: {dotted!r}: expected SECTION.KEY, e.g. array.rows")
    section, key = (part.strip() for part in dotted.split("."))
    if section not in _SECTIONS:
        raise ConfigError(f"{where}: [{section}]: unknown section; allowed sections: "
                          f"{', '.join(_SECTIONS)}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``SECTION.KEY=VALUE`` override applied."""
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for text in overrides:
        section, key, value = parse_override(text)
        merged.setdefault(section, {})[key] = value
    return merged


def load_chip_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> ChipConfig:
    """Load a chip config from a TOML file (``None``: the built-in default), then apply
    ``--set``-style overrides with the same validation as the file."""
    if path is None:
        data: dict[str, Any] = {}
        where = "default config"
    else:
        path = Path(path)
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{where}: no such config file") from None
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read: {exc.strerror}") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    return chip_config_from_dict(data, where, overrides)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def chip_config_to_dict(cfg: ChipConfig) -> dict[str, dict[str, Any]]:
    """The config as plain data, section by section (enums as their string values)."""
    def plain(value):
        return value.value if hasattr(value, "value") else value

    return {
        "chip": {k: plain(getattr(cfg, k)) for k in _allowed_keys(ChipConfig)},
        "array": {k: plain(getattr(cfg.array, k)) for k in _allowed_keys(ArrayConfig)},
    }


def chip_config_to_toml(cfg: ChipConfig) -> str:
    """The effective config as TOML that :func:`load_chip_config` reads back unchanged."""
    lines = []
    for section, values in chip_config_to_dict(cfg).items():
        lines += [f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()] + [""]
    return "\n".join(lines[:-1]) + "\n"
