"""npulab: a cycle-level simulator of deep-learning accelerators.

The user-facing layer: Python API, command line, runner and reports. ``hw`` holds the hardware
models and ``compiler`` the workloads; this package glues them together.

>>> from npulab import simulate, load_chip_config, zoo
>>> result = simulate(zoo.get("resnet18"), load_chip_config())
>>> result.totals["cycles"] > 0
True
"""

from compiler.frontends import zoo
from hw.configfile import load_chip_config
from npulab.simulate import RunResult, simulate

__all__ = ["__version__", "simulate", "load_chip_config", "zoo", "RunResult"]

__version__ = "0.1.0"
