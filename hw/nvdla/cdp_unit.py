"""CDP (channel data processor, LRN) as its registers program it: RDMA read, LRN, WDMA write.

Registers (``shared/nvdla/rdl/NVDLA_CDP.rdl``, ``NVDLA_CDP_RDMA.rdl``): the cube
``CDP_RDMA.D_DATA_CUBE_WIDTH/HEIGHT/CHANNEL`` (minus one) and source ``CDP_RDMA.D_SRC_*``; the
datapath ``CDP.D_LRN_CFG``, ``D_DATIN_*``, ``D_DATOUT_*``, ``D_FUNC_BYPASS``, ``D_DATA_FORMAT``
(:meth:`hw.nvdla.cdp.CdpParams.from_registers`); the LUT ``CDP.S_LUT_*`` and its tables
(:meth:`hw.nvdla.lut.LutParams.from_registers`); the destination ``CDP.D_DST_*``. The CDP writes
the cube's own channels (NVIDIA's CRCs match with the lanes past ``C`` left as they were).
"""

from __future__ import annotations

import numpy as np

from hw.nvdla.cdp import CdpParams, cdp_lrn, cdp_reference
from hw.nvdla.lut import LutParams
from hw.nvdla.regfile import RegisterError
from hw.nvdla.surface import LayerRun, read_cube, write_cube

__all__ = ["run_cdp", "cdp_params_from_registers"]


def cdp_params_from_registers(regs) -> tuple[CdpParams, LutParams]:
    """The CDP datapath and LUT parameters the registers describe."""
    values = regs.unit_values("CDP")
    try:
        cdp = CdpParams.from_registers(values)
    except ValueError as e:
        raise RegisterError(f"CDP registers: {e}") from None
    le, lo = regs.lut("CDP")
    lut_regs = {k: v for k, v in values.items() if k.startswith("S_LUT_") and "ACCESS" not in k}
    return cdp, LutParams.from_registers(lut_regs, le, lo, unit="cdp", precision=cdp.precision)


def run_cdp(regs, mem, *, atom_bytes: int = 8) -> LayerRun:
    """Run the CDP layer ``regs`` programs: read the cube, normalize, write it, return the
    LayerRun (``detail`` carries the LUT hit/overflow counters, ``D_PERF_LUT_*``)."""
    cdp, lut = cdp_params_from_registers(regs)
    rdma_fmt = regs.enum("CDP_RDMA.D_DATA_FORMAT", "INPUT_DATA").lower()
    if rdma_fmt != cdp.precision:
        raise RegisterError(f"CDP_RDMA.D_DATA_FORMAT = {rdma_fmt.upper()} but CDP.D_DATA_FORMAT "
                            f"= {cdp.precision.upper()}: the two must agree")
    for key, field in (("CDP_RDMA.D_SRC_DMA_CFG", "SRC_RAM_TYPE"),
                       ("CDP.D_DST_DMA_CFG", "DST_RAM_TYPE")):
        if regs.enum(key, field) != "MC":
            raise RegisterError(f"{key}.{field} = CV: nv_small has no CV-SRAM; use MC "
                                f"(primary memory)")
    dtype = np.int8 if cdp.precision == "int8" else np.int16
    h, w, c = (regs.field(f"CDP_RDMA.D_DATA_CUBE_{d}", d) + 1
               for d in ("HEIGHT", "WIDTH", "CHANNEL"))
    src = regs.address("CDP_RDMA", "D_SRC_BASE_ADDR")
    x = read_cube(mem, src, regs["CDP_RDMA.D_SRC_LINE_STRIDE"],
                  regs["CDP_RDMA.D_SRC_SURFACE_STRIDE"], h, w, c, dtype=dtype,
                  atom_bytes=atom_bytes)
    r = cdp_lrn(x, cdp, lut)
    dst = regs.address("CDP", "D_DST_BASE_ADDR")
    write_cube(mem, dst, regs["CDP.D_DST_LINE_STRIDE"], regs["CDP.D_DST_SURFACE_STRIDE"], r.out,
               atom_bytes=atom_bytes)
    detail = {"cube": f"{h}x{w}x{c}", "window": cdp.normalz_len, "precision": cdp.precision,
              **{k: v for k, v in r.counters.items()}}
    return LayerRun("cdp", r.out, cdp_reference(x, cdp, lut).astype(dtype), dst, detail)
