"""PDP (planar data processor) as its registers program it: RDMA read, pooling, WDMA write.

Registers (``shared/nvdla/rdl/NVDLA_PDP.rdl``, ``NVDLA_PDP_RDMA.rdl``): the input cube
``PDP.D_DATA_CUBE_IN_*`` (minus one), ``D_OPERATION_MODE_CFG`` (POOLING_METHOD, FLYING_MODE,
SPLIT_NUM), ``D_POOLING_KERNEL_CFG`` (kernel and stride minus one), ``D_POOLING_PADDING_CFG``,
``D_POOLING_PADDING_VALUE_{1..7}_CFG``, ``D_RECIP_KERNEL_WIDTH/HEIGHT``,
``D_PARTIAL_WIDTH_IN/OUT`` (split-width mode), ``D_DATA_FORMAT``, and the surfaces: the source
through ``PDP_RDMA.D_SRC_*`` when FLYING_MODE is OFF_FLYING, the destination ``PDP.D_DST_*``.

The PDP works on whole atoms: every lane of the last surface is read, pooled and written, also
the lanes past ``C`` (NVIDIA's CRCs cover them; ``tests/hw/nvdla/test_pdp.py``). The arithmetic is
:func:`hw.nvdla.pdp.pdp`; the reference is :func:`hw.nvdla.pdp.pdp_reference`.
"""

from __future__ import annotations

import numpy as np

from hw.nvdla.pdp import PdpSplit, pdp, pdp_output_shape, pdp_pad_values_from_regs, pdp_reference
from hw.nvdla.regfile import RegisterError
from hw.nvdla.surface import LayerRun, read_cube, write_cube

__all__ = ["run_pdp", "pdp_params_from_registers"]

_METHODS = {"POOLING_METHOD_AVERAGE": "average", "POOLING_METHOD_MAX": "max",
            "POOLING_METHOD_MIN": "min"}


def pdp_params_from_registers(regs) -> dict:
    """The pooling the PDP registers describe, as keyword arguments of :func:`hw.nvdla.pdp.pdp`
    plus ``shape`` (H, W, C), ``out_shape`` (registered output H, W) and ``precision``."""
    fmt = regs.enum("PDP.D_DATA_FORMAT", "INPUT_DATA")
    if fmt == "FP16":
        raise RegisterError("PDP.D_DATA_FORMAT.INPUT_DATA = FP16: the register-level PDP runs "
                            "INT8 and INT16 (fp16 pooling is hw.nvdla.fp16.pdp_cdp_fp16_close)")
    precision = fmt.lower()
    kcfg = "PDP.D_POOLING_KERNEL_CFG"
    pcfg = "PDP.D_POOLING_PADDING_CFG"
    h, w, c = (regs.field(f"PDP.D_DATA_CUBE_IN_{d}", f"CUBE_IN_{d}") + 1
               for d in ("HEIGHT", "WIDTH", "CHANNEL"))
    mode = "PDP.D_OPERATION_MODE_CFG"
    split = PdpSplit.from_regs(regs[mode], regs["PDP.D_PARTIAL_WIDTH_IN"],
                               regs["PDP.D_PARTIAL_WIDTH_OUT"])      # None: SPLIT_NUM = 0
    return dict(
        shape=(h, w, c), precision=precision,
        out_shape=(regs.field("PDP.D_DATA_CUBE_OUT_HEIGHT", "CUBE_OUT_HEIGHT") + 1,
                   regs.field("PDP.D_DATA_CUBE_OUT_WIDTH", "CUBE_OUT_WIDTH") + 1),
        kernel=(regs.field(kcfg, "KERNEL_HEIGHT") + 1, regs.field(kcfg, "KERNEL_WIDTH") + 1),
        stride=(regs.field(kcfg, "KERNEL_STRIDE_HEIGHT") + 1,
                regs.field(kcfg, "KERNEL_STRIDE_WIDTH") + 1),
        padding=(regs.field(pcfg, "PAD_TOP"), regs.field(pcfg, "PAD_BOTTOM"),
                 regs.field(pcfg, "PAD_LEFT"), regs.field(pcfg, "PAD_RIGHT")),
        method=_METHODS[regs.enum(mode, "POOLING_METHOD")],
        pad_values=pdp_pad_values_from_regs(
            [regs[f"PDP.D_POOLING_PADDING_VALUE_{n}_CFG"] for n in range(1, 8)], precision),
        recip_width=regs.field("PDP.D_RECIP_KERNEL_WIDTH", "RECIP_KERNEL_WIDTH"),
        recip_height=regs.field("PDP.D_RECIP_KERNEL_HEIGHT", "RECIP_KERNEL_HEIGHT"),
        split=split)


def run_pdp(regs, mem, *, flying: np.ndarray | None = None, atom_bytes: int = 8) -> LayerRun:
    """Run the PDP layer ``regs`` programs. ``flying``: the SDP's output cube (H, W, C) when
    PDP's FLYING_MODE is ON_FLYING (SDP ``OUTPUT_DST = PDP``); otherwise the PDP RDMA reads the
    cube from ``mem``. Writes the pooled cube to ``PDP.D_DST_*`` and returns the LayerRun."""
    p = pdp_params_from_registers(regs)
    h, w, c = p.pop("shape")
    out_shape = p.pop("out_shape")
    precision = p.pop("precision")
    dtype = np.int8 if precision == "int8" else np.int16
    cpa = atom_bytes // np.dtype(dtype).itemsize
    lanes = -(-c // cpa) * cpa                    # whole atoms: every lane of the last surface
    on_fly = regs.enum("PDP.D_OPERATION_MODE_CFG", "FLYING_MODE") == "ON_FLYING"
    if on_fly:
        if flying is None:
            raise RegisterError("PDP.D_OPERATION_MODE_CFG.FLYING_MODE = ON_FLYING: the input "
                                "comes from the SDP (SDP.D_FEATURE_MODE_CFG.OUTPUT_DST = PDP), "
                                "but no SDP layer feeds this PDP layer")
        if flying.shape != (h, w, c):
            raise RegisterError(f"PDP.D_DATA_CUBE_IN = {h}x{w}x{c} (HxWxC) but the SDP delivers "
                                f"{'x'.join(map(str, flying.shape))}")
        x = np.zeros((h, w, lanes), dtype)
        x[..., :c] = flying
        src = None
    else:
        if regs.enum("PDP_RDMA.D_SRC_RAM_CFG", "SRC_RAM_TYPE") != "MC":
            raise RegisterError("PDP_RDMA.D_SRC_RAM_CFG.SRC_RAM_TYPE = CV: nv_small has no "
                                "CV-SRAM; use MC (primary memory)")
        src = regs.address("PDP_RDMA", "D_SRC_BASE_ADDR")
        x = read_cube(mem, src, regs["PDP_RDMA.D_SRC_LINE_STRIDE"],
                      regs["PDP_RDMA.D_SRC_SURFACE_STRIDE"], h, w, lanes, dtype=dtype,
                      atom_bytes=atom_bytes)
    if pdp_output_shape(h, w, p["kernel"], p["stride"], p["padding"]) != out_shape:
        raise RegisterError(
            f"PDP.D_DATA_CUBE_OUT_HEIGHT/WIDTH = {out_shape[0]}x{out_shape[1]} (minus one in the "
            f"registers), but a {p['kernel'][0]}x{p['kernel'][1]} kernel with stride "
            f"{p['stride']} and padding {p['padding']} on {h}x{w} gives "
            f"{'x'.join(map(str, pdp_output_shape(h, w, p['kernel'], p['stride'], p['padding'])))}")
    out = pdp(x[None], precision=precision, **p)[0]
    if regs.enum("PDP.D_DST_RAM_CFG", "DST_RAM_TYPE") != "MC":
        raise RegisterError("PDP.D_DST_RAM_CFG.DST_RAM_TYPE = CV: nv_small has no CV-SRAM; "
                            "use MC (primary memory)")
    dst = regs.address("PDP", "D_DST_BASE_ADDR")
    write_cube(mem, dst, regs["PDP.D_DST_LINE_STRIDE"], regs["PDP.D_DST_SURFACE_STRIDE"], out,
               atom_bytes=atom_bytes)
    ref = pdp_reference(x[None], p["kernel"], p["stride"], p["padding"], p["method"],
                        p["pad_values"], p["recip_width"], p["recip_height"],
                        8 if precision == "int8" else 16)[0].astype(dtype)
    detail = {"in": f"{h}x{w}x{c}", "out": f"{out.shape[0]}x{out.shape[1]}x{c}",
              "method": p["method"], "kernel": "x".join(map(str, p["kernel"])),
              "stride": "x".join(map(str, p["stride"])), "precision": precision,
              "source": "SDP on the fly" if on_fly else f"memory {src:#x}"}
    if p["split"] is not None:
        detail["split"] = p["split"].num
    return LayerRun("pdp", out, ref, dst, detail)
