"""npulab: a cycle-level simulator of deep-learning accelerators.

The user-facing layer: Python API, command line, runner and reports. ``hw`` holds the hardware
models and ``compiler`` the workloads; this package glues them together.

>>> from npulab import simulate, load_chip_config, zoo
>>> result = simulate(zoo.get("resnet18"), load_chip_config())
>>> result.totals["cycles"] > 0
True

The names below are imported on first use (PEP 562), so ``import npulab`` (and with it
``npulab --version`` and every ``--help``) does not load Numba or the models.
"""

from __future__ import annotations

import importlib
import sys
import types

__all__ = ["__version__", "run", "RunOptions", "load_chip", "simulate", "load_chip_config", "zoo",
           "RunResult"]

__version__ = "0.1.0"

_LAZY = {
    "run": ("npulab.pipeline", "run"),
    "RunOptions": ("npulab.pipeline", "RunOptions"),
    "load_chip": ("hw.configfile", "load_chip"),
    "simulate": ("npulab.simulate", "simulate"),
    "RunResult": ("npulab.simulate", "RunResult"),
    "load_chip_config": ("hw.configfile", "load_chip_config"),
    "zoo": ("compiler.frontends.zoo", None),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'npulab' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``npulab.simulate`` is both a submodule and the function the package exports. Importing
    the submodule makes Python set the package attribute to the module; keep the function."""

    def __setattr__(self, name: str, value) -> None:
        if name == "simulate" and isinstance(value, types.ModuleType):
            value = value.simulate
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
