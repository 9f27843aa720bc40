"""Import a module on first attribute access (the standard library's ``LazyLoader``).

Configuration modules that also run a Numba kernel (``hw.memory.dram``) use it for the kernel
module, so reading configs and preset names (the command line's ``--help``) does not load Numba.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["lazy_module"]


def lazy_module(name: str) -> ModuleType:
    """``name``, imported when one of its attributes is first read (at once if already loaded)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
