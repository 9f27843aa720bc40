"""Names of choices the command line offers whose owners are heavy modules.

Building the parser (every ``--help``, ``--version``) must not load numpy's models or Numba, so
these names live here and their owners (:mod:`npulab.simulate`, :mod:`npulab.report`) import
them.
"""

__all__ = ["TIMING_MODES", "RUN_FORMATS", "ARRAY_PRECISIONS"]

#: ``simulate(..., timing=)``: the full chip, the array alone, or SCALE-Sim's formulas.
TIMING_MODES = ("native", "compute", "scalesim")
#: ``npulab run --format``.
RUN_FORMATS = ("table", "json", "csv")
#: A systolic array's operand precisions (:class:`hw.systolic.config.Precision`): ``npulab run
#: --precision`` on a systolic chip. int4 and binary are packed two and eight per byte in the
#: chip's memories (:mod:`hw.packing`).
ARRAY_PRECISIONS = ("int8", "int16", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int4", "binary")
