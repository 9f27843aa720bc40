"""Names of choices the command line offers whose owners are heavy modules.

Building the parser (every ``--help``, ``--version``) must not load numpy's models or Numba, so
these names live here and their owners (:mod:`npulab.simulate`, :mod:`npulab.report`) import
them.
"""

__all__ = ["TIMING_MODES", "RUN_FORMATS"]

#: ``simulate(..., timing=)``: the full chip, the array alone, or SCALE-Sim's formulas.
TIMING_MODES = ("native", "compute", "scalesim")
#: ``npulab run --format``.
RUN_FORMATS = ("table", "json", "csv")
