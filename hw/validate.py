"""Checks shared by every config dataclass and config-file reader in :mod:`hw`.

Each raises :class:`~hw.systolic.config.ConfigError` with a one-line message naming where the
value came from, the key, the value and what is allowed (``_nonneg_int`` checks a function
argument, not a config value, and raises ``ValueError``).
"""

from __future__ import annotations

import math
import numbers
import tomllib
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from hw.files import read_text
from hw.systolic.config import ConfigError

__all__ = ["config_from_table", "read_config_text", "read_toml", "toml_value", "toml_text"]


def config_from_table(cls, data: Any, where: str, prefix: str):
    """Build the frozen config ``cls`` from one TOML table, then ``validate(where, prefix)`` it.

    Unknown keys are an error listing the allowed ones; a missing key takes the field's default
    (or default factory); a field with neither is required.
    """
    section = prefix.rstrip(".")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {section} = {data!r}: must be a table of keys")
    allowed = [f.name for f in fields(cls)]
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}: {prefix}{key}: unknown key; allowed keys in [{section}]: "
                              f"{', '.join(allowed)}")
    obj = object.__new__(cls)
    for f in fields(cls):
        if f.name in data:
            value = data[f.name]
        elif f.default is not MISSING:
            value = f.default
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        else:
            raise ConfigError(f"{where}: {prefix}{f.name}: missing; this key is required")
        object.__setattr__(obj, f.name, value)
    obj.validate(where, prefix)
    return obj


def read_config_text(path: str | Path, missing: str = "no such file", *, what: str = "file",
                     error: type[Exception] = ConfigError) -> str:
    """The text of a config file, read by :func:`hw.files.read_text` (UTF-8, one-line errors
    naming the file for a missing path, a directory, an unreadable file or bad bytes)."""
    return read_text(path, what, missing=missing, error=error)


def read_toml(path: str | Path, missing: str = "no such config file", *,
              what: str = "TOML file", error: type[Exception] = ConfigError) -> dict[str, Any]:
    """A TOML config file parsed; a missing file, bad bytes (:func:`hw.files.read_text`) or
    invalid TOML is an ``error`` (default ConfigError) naming the file."""
    text = read_config_text(path, missing=missing, what=what, error=error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


def toml_text(value: Any) -> str:
    """``value`` written as TOML (what :func:`toml_value` reads back): booleans, numbers,
    strings quoted, and lists or tuples of those as arrays."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def toml_value(raw: str) -> Any:
    """A ``--set KEY=VALUE`` value: TOML syntax, or the text itself when it is not valid TOML
    (a bare word such as ``os`` is a string)."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _is_bool(value) -> bool:
    """Python's or numpy's bool (numpy's is not registered as a number; checked by type name so
    that reading a config does not import numpy)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy"
                                       and type(value).__name__ in ("bool", "bool_"))


def _is_int(value) -> bool:
    """An integer, Python's or numpy's, and not a bool."""
    return not _is_bool(value) and isinstance(value, numbers.Integral)


def _number_in(value, key: str, where: str, lo: float, hi: float, *,
               lo_open: bool = False) -> float:
    """A finite real in [lo, hi] (or (lo, hi] with ``lo_open``), returned as float."""
    ok = (not _is_bool(value) and isinstance(value, numbers.Real)
          and math.isfinite(value) and (lo < value if lo_open else lo <= value) and value <= hi)
    if not ok:
        interval = f"({lo:g}, {hi:g}]" if lo_open else f"[{lo:g}, {hi:g}]"
        raise ConfigError(f"{where}: {key} = {value!r}: must be a number in {interval}")
    return float(value)


def _bool(value, key: str, where: str) -> bool:
    if not _is_bool(value):
        raise ConfigError(f"{where}: {key} = {value!r}: must be true or false")
    return bool(value)


def _one_of(value, key: str, where: str, allowed: tuple[int, ...]) -> int:
    if not _is_int(value) or value not in allowed:
        raise ConfigError(f"{where}: {key} = {value!r}: must be one of "
                          f"{', '.join(str(a) for a in allowed)}")
    return int(value)


def _nonneg_int(name: str, value) -> int:
    """An argument (not a config value) that must be an integer >= 0; ValueError otherwise."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} = {value!r}: must be an integer >= 0")
    return int(value)
