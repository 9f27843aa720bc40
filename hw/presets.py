"""The shipped presets (``sim_configs/*.toml``): where they are and how a name resolves.

One lookup serves the command line and the Python API, so ``load_chip_config("gemmini_like")``
and ``npulab run --config gemmini_like`` accept the same names. The folder is ``sim_configs``
beside this module in an installed copy (package data ``hw.sim_configs``), else the checkout's
``sim_configs/`` next to ``hw/``. Imports nothing heavy: the command line lists these names in
its help.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["presets_dir", "chip_preset_names", "nvdla_preset_names", "preset_path",
           "looks_like_path"]


def presets_dir() -> Path:
    """The installed ``hw/sim_configs``, or ``sim_configs/`` of a source checkout."""
    here = Path(__file__).resolve().parent
    installed = here / "sim_configs"
    return installed if installed.is_dir() else here.parent / "sim_configs"


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
