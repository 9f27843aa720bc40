"""Amaranth RTL of NVDLA datapath units, bit-exact with :mod:`hw.nvdla.numerics`.

* :mod:`.units` -- :class:`~.units.MacCell`, :class:`~.units.CaccTruncate`,
  :class:`~.units.SdpX`, :class:`~.units.OutputConverter` (latency 1, ``valid`` alongside), the
  shared rounding-shift and saturation logic, and Yosys synthesis of one unit.
* :mod:`.cosim` -- random and edge-case vectors through each unit in Amaranth's simulator,
  compared with the Numba numerics every cycle.
"""

from hw.nvdla.rtl.units import CaccTruncate, MacCell, OutputConverter, SdpX

__all__ = ["MacCell", "CaccTruncate", "SdpX", "OutputConverter"]
