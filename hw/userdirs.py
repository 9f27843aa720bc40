"""npulab's one folder for things it builds or downloads once per user (compiled Numba kernels,
Verilator simulators and cocotb builds, NVIDIA's trace tests).

``$NPULAB_CACHE`` if set, else ``$XDG_CACHE_HOME/npulab``, else ``~/.cache/npulab``. Each user
keeps its own sub-folder (``numba/``, ``verilator/``, ``nvdla-traces/``); deleting any of them is
safe: it is rebuilt or fetched again.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_cache_dir"]


def user_cache_dir() -> Path:
    """``$NPULAB_CACHE``, else ``$XDG_CACHE_HOME/npulab``, else ``~/.cache/npulab``."""
    if os.environ.get("NPULAB_CACHE"):
        return Path(os.environ["NPULAB_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "npulab"
