"""The shipped presets (``sim_configs/*.toml``): where they are and how a name resolves.

One lookup serves the command line and the Python API, so ``load_chip_config("gemmini_like")``
and ``npulab run --config gemmini_like`` accept the same names. The folder is the checkout's
``sim_configs/`` or, in an installed copy, the ``npulab/sim_configs`` package data, located
without importing ``npulab`` (``hw`` never imports the layers above it). Imports nothing heavy:
the command line lists these names in its help.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["presets_dir", "chip_preset_names", "nvdla_preset_names", "preset_path",
           "looks_like_path"]


def presets_dir() -> Path:
    """``sim_configs/`` of a source checkout, or the installed ``npulab/sim_configs``."""
    checkout = Path(__file__).resolve().parents[1] / "sim_configs"
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec("npulab")
    if spec is not None and spec.origin:
        installed = Path(spec.origin).parent / "sim_configs"
        if installed.is_dir():
            return installed
    return checkout


def chip_preset_names() -> list[str]:
    """Systolic chip presets (every ``*.toml`` but the NVDLA builds ``nv_*.toml``)."""
    return sorted(p.stem for p in presets_dir().glob("*.toml") if not p.stem.startswith("nv_"))


def nvdla_preset_names() -> list[str]:
    """NVDLA builds (``nv_*.toml``)."""
    return sorted(p.stem for p in presets_dir().glob("nv_*.toml"))


def looks_like_path(name_or_path: str | Path) -> bool:
    """A ``.toml`` name, a name with a folder, or an existing file is a path; else a preset."""
    text = str(name_or_path)
    return (isinstance(name_or_path, Path) or text.endswith(".toml") or "/" in text
            or Path(text).exists())


def preset_path(name: str) -> Path | None:
    """The file of preset ``name`` (chip or NVDLA build), or None when there is none."""
    if name in chip_preset_names() or name in nvdla_preset_names():
        return presets_dir() / f"{name}.toml"
    return None
