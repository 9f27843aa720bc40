"""The NVDLA SDP from its registers: decode ``NVDLA_SDP`` / ``NVDLA_SDP_RDMA``, read the input and
the operand surfaces as the SDP's DMAs do, run the bit-exact pipeline, write the output (WDMA).

This is the register-level front end of :mod:`hw.nvdla.sdp` (the datapath, X1/X2/Y/LUT/output
converter, one Numba kernel). It adds what the hardware does around the datapath, following
NVIDIA's C model ``cmod/sdp/NV_NVDLA_sdp.cpp`` (``SdpRdmaCore``,
``ExtractRdmaResponsePayloadCore``, ``SdpDataOperationDC``, ``WdmaSequenceDC``), its unpacker
``cmod/include/NvdlaPacker.cpp`` and the register fields of ``shared/nvdla/rdl/NVDLA_SDP.rdl`` /
``NVDLA_SDP_RDMA.rdl``:

* **Input.** ``D_FEATURE_MODE_CFG.FLYING_MODE = ON``: the int32 cube CACC delivers (``flying``).
  ``OFF``: the MRDMA reads the feature cube at ``SDP_RDMA.D_SRC_BASE_ADDR_*`` with
  ``D_SRC_LINE_STRIDE`` / ``D_SRC_SURFACE_STRIDE`` in the feature layout (``doc/hw/format.rst``,
  :func:`hw.nvdla.surface.cube_addresses`), int8 or int16 (``SDP_RDMA.D_FEATURE_MODE_CFG``
  ``IN_PRECISION``), sign-extended to 32 bits. A 1x1 cube is read packed (the C model fetches
  it as one run of atoms).
* **Whole atoms.** The datapath processes every lane of every atom: the channels past C in the
  last surface (C rounded up to a multiple of ``atom_bytes / element bytes``) are computed from
  whatever the input atom holds there, with the operands the DMAs read for those lanes, and the
  WDMA writes whole atoms. Flying input is padded with zeros.
* **Operand DMAs** BRDMA (X1 = ``BS``), NRDMA (X2 = ``BN``), ERDMA (Y = ``EW``), each
  ``D_*RDMA_CFG``: ``DISABLE``, ``DATA_USE`` (``ALU``, ``MUL``, ``BOTH``), ``DATA_SIZE``
  (``ONE_BYTE`` int8 / ``TWO_BYTE`` int16 little-endian, sign-extended), ``DATA_MODE``,
  ``RAM_TYPE``. An element has ``bpe = size x (2 if BOTH else 1)`` bytes; with ``BOTH`` the ALU
  and MUL operands of one element are interleaved (ALU first: ``A0 M0 A1 M1 ...``,
  ``NvdlaPacker::set_payload``). Channel groups hold ``g = atom_bytes / element bytes`` channels
  (8 for int8 on nv_small), so:

  - ``PER_KERNEL``: one contiguous run from the base address, channel ``k`` at
    ``base + k * bpe`` (+ ``size`` for the MUL operand of ``BOTH``);
  - ``PER_ELEMENT``: ``base + (k // g) * SURFACE_STRIDE + h * LINE_STRIDE + w * g * bpe
    + (k % g) * bpe`` (+ ``size`` for MUL), i.e. the feature layout with ``g * bpe``-byte atoms.

* **Output.** ``OUTPUT_DST = MEM``: the WDMA writes the cube at ``D_DST_BASE_ADDR_*`` with
  ``D_DST_LINE_STRIDE`` / ``D_DST_SURFACE_STRIDE`` as int8 or int16 (``D_DATA_FORMAT``
  ``OUT_PRECISION``); a 1x1 cube is written packed. ``OUTPUT_DST = PDP``: nothing is written,
  the cube goes on to the PDP (the caller's job).

Registers outside what this model covers raise :class:`~hw.systolic.config.ConfigError` naming
the register, the field, its value and what is supported, before any Numba kernel runs: fp16,
mixed precisions (``IN != PROC`` or ``PROC != OUT``; the C model stops on them too: "precision
conversion is not supported in openDLA"), ``WINOGRAD``, ``BATCH_NUMBER > 0``, the ``EQL``
compare mode (it writes only ``D_STATUS``), a memory operand with its DMA disabled or reading
the other operand, an enabled DMA whose data nothing uses, and ``RAM_TYPE = CV`` without a
CV-SRAM image (nv_small has no CV-SRAM port).

:func:`sdp_reference` is an independent, vectorized numpy model of the same integer pipeline
(X1, X2, Y with its operand converters and LUT, output converter); :func:`run_sdp` returns both
results so a failing CRC shows which elements differ.
"""

from __future__ import annotations

import numpy as np

from hw.nvdla.lut import LE_ENTRIES, LO_ENTRIES, LutParams
from hw.nvdla.numerics import round_half_away
from hw.nvdla.sdp import SdpCvtParams, SdpParams, SdpXParams, SdpYParams, sdp_apply
from hw.nvdla.surface import LayerRun, read_cube, write_cube
from hw.systolic.config import ConfigError

__all__ = ["sdp_params_from_registers", "run_sdp", "sdp_reference", "SdpLayout",
           "sdp_layout_from_registers", "operand_addresses"]

_LUT_REGS = ("S_LUT_CFG", "S_LUT_INFO", "S_LUT_LE_START", "S_LUT_LE_END", "S_LUT_LO_START",
             "S_LUT_LO_END", "S_LUT_LE_SLOPE_SCALE", "S_LUT_LE_SLOPE_SHIFT",
             "S_LUT_LO_SLOPE_SCALE", "S_LUT_LO_SLOPE_SHIFT")
#: Operand DMAs: (SDP unit prefix, RDMA name, RDMA register prefix of base/strides).
_DMAS = (("BS", "BRDMA", "BS"), ("BN", "NRDMA", "BN"), ("EW", "ERDMA", "EW"))
_ELEM_BYTES = {"INT8": 1, "INT16": 2}


def _enum(regs, key: str, field: str, allowed: tuple, why: str = "") -> str:
    name = regs.enum(key, field)
    if name not in allowed:
        raise ConfigError(f"{key}.{field} = {name} ({regs.field(key, field)}): supported: "
                          f"{', '.join(allowed)}{why}")
    return name


class SdpLayout:
    """Where one SDP layer's data lives, decoded from the registers (plain attributes).

    h, w, c: the cube (``D_DATA_CUBE_*`` + 1); c_pad: c rounded up to whole atoms, the lanes the
    datapath processes; group: channels per atom (``atom_bytes`` / element bytes); precision:
    ``INT8``/``INT16``; flying: input from CACC; src: (base, line, surface stride) of the input
    or None; dst: (base, line, surface stride); to_pdp: ``OUTPUT_DST = PDP``; dst_ram, src_ram:
    ``MC``/``CV``; dmas: for ``BS``/``BN``/``EW``, None (disabled) or a dict ``use``, ``size``
    (1/2 bytes), ``mode``, ``ram``, ``base``, ``line``, ``surface``.
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return f"SdpLayout({self.__dict__!r})"


def sdp_layout_from_registers(regs, *, atom_bytes: int = 8) -> SdpLayout:
    """Decode the cube, precision, input/output and operand DMA registers (no memory access)."""
    if atom_bytes not in (8, 32):
        raise ValueError(f"atom_bytes = {atom_bytes!r}: 8 (nv_small) or 32 (nv_full)")
    fm = "SDP.D_FEATURE_MODE_CFG"
    rfm = "SDP_RDMA.D_FEATURE_MODE_CFG"
    h = regs.field("SDP.D_DATA_CUBE_HEIGHT", "HEIGHT") + 1
    w = regs.field("SDP.D_DATA_CUBE_WIDTH", "WIDTH") + 1
    c = regs.field("SDP.D_DATA_CUBE_CHANNEL", "CHANNEL") + 1
    fp16 = "; the fp16 SDP is not modelled by the register front end"
    proc = _enum(regs, "SDP.D_DATA_FORMAT", "PROC_PRECISION", ("INT8", "INT16"), fp16)
    out = _enum(regs, "SDP.D_DATA_FORMAT", "OUT_PRECISION", ("INT8", "INT16"), fp16)
    if out != proc:
        raise ConfigError(f"SDP.D_DATA_FORMAT.OUT_PRECISION = {out} with PROC_PRECISION = "
                          f"{proc}: precision conversion is not modelled (NVIDIA's C model: "
                          f"not supported in openDLA); use equal precisions")
    _enum(regs, fm, "WINOGRAD", ("OFF",), " (Winograd output is not modelled)")
    if regs.field(fm, "BATCH_NUMBER") != 0:
        raise ConfigError(f"{fm}.BATCH_NUMBER = {regs.field(fm, 'BATCH_NUMBER')}: only 0 "
                          f"(one batch) is supported; nv_small has no batching")
    ew_on = regs.enum("SDP.D_DP_EW_CFG", "EW_BYPASS") == "NO"
    if ew_on and regs.enum("SDP.D_DP_EW_CFG", "EW_ALU_BYPASS") == "NO" \
            and regs.enum("SDP.D_DP_EW_CFG", "EW_ALU_ALGO") == "EQL":
        raise ConfigError("SDP.D_DP_EW_CFG.EW_ALU_ALGO = EQL (3): the compare mode writes no "
                          "surface, only D_STATUS; supported: MAX, MIN, SUM")
    flying = regs.enum(fm, "FLYING_MODE") == "ON"
    group = atom_bytes // _ELEM_BYTES[proc]
    c_pad = -(-c // group) * group

    dmas = {}
    for unit, dma, pre in _DMAS:
        key = f"SDP_RDMA.D_{dma}_CFG"
        if regs.enum(key, f"{dma}_DISABLE") == "YES":
            dmas[unit] = None
            continue
        dmas[unit] = dict(
            use=regs.enum(key, f"{dma}_DATA_USE"),
            size=1 if regs.enum(key, f"{dma}_DATA_SIZE") == "ONE_BYTE" else 2,
            mode=regs.enum(key, f"{dma}_DATA_MODE"), ram=regs.enum(key, f"{dma}_RAM_TYPE"),
            base=regs.address("SDP_RDMA", f"D_{pre}_BASE_ADDR"),
            line=regs[f"SDP_RDMA.D_{pre}_LINE_STRIDE"],
            surface=regs[f"SDP_RDMA.D_{pre}_SURFACE_STRIDE"], register=key, dma=dma)

    rdma_used = not flying or any(dmas.values())
    src = None
    if rdma_used:
        # the SDP_RDMA registers matter only when one of its DMAs runs (a conv layer with the
        # SDP on the fly leaves them at reset)
        for dim, n in (("HEIGHT", h), ("WIDTH", w), ("CHANNEL", c)):
            got = regs.field(f"SDP_RDMA.D_DATA_CUBE_{dim}", dim) + 1
            if got != n:
                raise ConfigError(f"SDP_RDMA.D_DATA_CUBE_{dim} = {got - 1}: the RDMA cube must "
                                  f"match SDP.D_DATA_CUBE_{dim} = {n - 1}")
        rproc = _enum(regs, rfm, "PROC_PRECISION", ("INT8", "INT16"), fp16)
        if rproc != proc:
            raise ConfigError(f"{rfm}.PROC_PRECISION = {rproc}: must equal "
                              f"SDP.D_DATA_FORMAT.PROC_PRECISION = {proc}")
        if not flying:
            if regs.enum(rfm, "FLYING_MODE") != "OFF":
                raise ConfigError(f"{rfm}.FLYING_MODE = ON with SDP.D_FEATURE_MODE_CFG."
                                  f"FLYING_MODE = OFF: the MRDMA must read the input")
            rin = _enum(regs, rfm, "IN_PRECISION", ("INT8", "INT16"), fp16)
            if rin != proc:
                raise ConfigError(f"{rfm}.IN_PRECISION = {rin} with PROC_PRECISION = {proc}: "
                                  f"precision conversion is not modelled (NVIDIA's C model: "
                                  f"not supported in openDLA)")
            src = (regs.address("SDP_RDMA", "D_SRC_BASE_ADDR"),
                   regs["SDP_RDMA.D_SRC_LINE_STRIDE"], regs["SDP_RDMA.D_SRC_SURFACE_STRIDE"])
    return SdpLayout(
        h=h, w=w, c=c, c_pad=c_pad, group=group, precision=proc, flying=flying, src=src,
        src_ram=regs.enum("SDP_RDMA.D_SRC_DMA_CFG", "SRC_RAM_TYPE") if src else None,
        dst=(regs.address("SDP", "D_DST_BASE_ADDR"), regs["SDP.D_DST_LINE_STRIDE"],
             regs["SDP.D_DST_SURFACE_STRIDE"]),
        dst_ram=regs.enum("SDP.D_DST_DMA_CFG", "DST_RAM_TYPE"),
        to_pdp=regs.enum(fm, "OUTPUT_DST") == "PDP", dmas=dmas, atom_bytes=atom_bytes)


# ------------------------------------------------------------------------------ operand DMAs
def operand_addresses(mode: str, base: int, line: int, surface: int, h: int, w: int, c: int, *,
                      size: int, both: bool, group: int) -> np.ndarray:
    """int64 addresses of the first byte of each operand a BRDMA/NRDMA/ERDMA reads (module
    docstring): shape (c,) for ``PER_KERNEL``, (h, w, c) for ``PER_ELEMENT``. With ``both`` the
    addresses are the ALU operands'; the MUL operand of each element is ``size`` bytes later."""
    bpe = size * (2 if both else 1)
    k = np.arange(c, dtype=np.int64)
    if mode == "PER_KERNEL":
        return int(base) + k * bpe
    hh = np.arange(h, dtype=np.int64)[:, None, None]
    ww = np.arange(w, dtype=np.int64)[None, :, None]
    return (int(base) + (k // group) * int(surface) + hh * int(line) + ww * (group * bpe)
            + (k % group) * bpe)


def _gather(mem, addrs: np.ndarray, size: int) -> np.ndarray:
    """Signed little-endian values of ``size`` bytes at ``addrs`` (int64)."""
    lo = mem.gather(addrs).astype(np.int64)
    if size == 1:
        return np.where(lo >= 128, lo - 256, lo)
    v = lo | (mem.gather(addrs + 1).astype(np.int64) << 8)
    return np.where(v >= 32768, v - 65536, v)


def _memory(ram: str, register: str, mem, cv_mem):
    if ram == "CV":
        if cv_mem is None:
            raise ConfigError(f"{register} = CV: the DMA reads/writes CV-SRAM, but no cv_mem "
                              f"image was given (nv_small has no CV-SRAM port); supported: MC")
        return cv_mem
    return mem


def _x_unit(regs, u: str) -> dict:
    """Register fields of X1 (``u = "BS"``) or X2 (``"BN"``) as SdpXParams keywords."""
    cfg = f"SDP.D_DP_{u}_CFG"
    return dict(
        bypass=regs.enum(cfg, f"{u}_BYPASS") == "YES",
        alu_bypass=regs.enum(cfg, f"{u}_ALU_BYPASS") == "YES",
        alu_algo=_enum(regs, cfg, f"{u}_ALU_ALGO", ("MAX", "MIN", "SUM")),
        alu_src=regs.enum(f"SDP.D_DP_{u}_ALU_CFG", f"{u}_ALU_SRC"),
        alu_shift_value=regs.field(f"SDP.D_DP_{u}_ALU_CFG", f"{u}_ALU_SHIFT_VALUE"),
        alu_operand=regs.signed(f"SDP.D_DP_{u}_ALU_SRC_VALUE", f"{u}_ALU_OPERAND"),
        mul_bypass=regs.enum(cfg, f"{u}_MUL_BYPASS") == "YES",
        mul_src=regs.enum(f"SDP.D_DP_{u}_MUL_CFG", f"{u}_MUL_SRC"),
        mul_shift_value=regs.field(f"SDP.D_DP_{u}_MUL_CFG", f"{u}_MUL_SHIFT_VALUE"),
        mul_operand=regs.signed(f"SDP.D_DP_{u}_MUL_SRC_VALUE", f"{u}_MUL_OPERAND"),
        mul_prelu=regs.enum(cfg, f"{u}_MUL_PRELU") == "YES",
        relu_bypass=regs.enum(cfg, f"{u}_RELU_BYPASS") == "YES",
    )


def _y_unit(regs) -> dict:
    cfg = "SDP.D_DP_EW_CFG"
    kw = dict(bypass=regs.enum(cfg, "EW_BYPASS") == "YES",
              alu_bypass=regs.enum(cfg, "EW_ALU_BYPASS") == "YES",
              alu_algo=regs.enum(cfg, "EW_ALU_ALGO"),
              mul_bypass=regs.enum(cfg, "EW_MUL_BYPASS") == "YES",
              mul_prelu=regs.enum(cfg, "EW_MUL_PRELU") == "YES",
              lut_bypass=regs.enum(cfg, "EW_LUT_BYPASS") == "YES",
              truncate=regs.field("SDP.D_DP_EW_TRUNCATE_VALUE", "EW_TRUNCATE"))
    for op in ("ALU", "MUL"):
        o = op.lower()
        kw[f"{o}_src"] = regs.enum(f"SDP.D_DP_EW_{op}_CFG", f"EW_{op}_SRC")
        kw[f"{o}_cvt_bypass"] = regs.enum(f"SDP.D_DP_EW_{op}_CFG", f"EW_{op}_CVT_BYPASS") == "YES"
        kw[f"{o}_operand"] = regs.signed(f"SDP.D_DP_EW_{op}_SRC_VALUE",
                                              f"EW_{op}_OPERAND")
        kw[f"{o}_cvt_offset"] = regs.signed(f"SDP.D_DP_EW_{op}_CVT_OFFSET_VALUE",
                                                 f"EW_{op}_CVT_OFFSET")
        kw[f"{o}_cvt_scale"] = regs.signed(f"SDP.D_DP_EW_{op}_CVT_SCALE_VALUE",
                                                f"EW_{op}_CVT_SCALE")
        kw[f"{o}_cvt_truncate"] = regs.field(f"SDP.D_DP_EW_{op}_CVT_TRUNCATE_VALUE",
                                             f"EW_{op}_CVT_TRUNCATE")
    return kw


def _read_operands(unit_kw: dict, dma: dict | None, u: str, lay: SdpLayout, mem, cv_mem):
    """The memory operands of one unit as {"alu": array, "mul": array}, checked against the
    RDMA's DATA_USE (each memory operand needs its DMA; an enabled DMA's data must be used)."""
    on = not unit_kw["bypass"]
    wants = [op for op in ("alu", "mul") if on and not unit_kw[f"{op}_bypass"]
             and unit_kw[f"{op}_src"] == "MEM"]
    name = {"BS": "BRDMA", "BN": "NRDMA", "EW": "ERDMA"}[u]
    if dma is None:
        if wants:
            raise ConfigError(f"SDP.D_DP_{u}_{wants[0].upper()}_CFG.{u}_{wants[0].upper()}_SRC "
                              f"= MEM but SDP_RDMA.D_{name}_CFG.{name}_DISABLE = YES: the "
                              f"operand must be read by the {name}")
        return {}
    reads = {"ALU": ["alu"], "MUL": ["mul"], "BOTH": ["alu", "mul"]}.get(dma["use"])
    if reads is None:
        raise ConfigError(f"{dma['register']}.{name}_DATA_USE = {dma['use']}: supported: MUL, "
                          f"ALU, BOTH")
    if sorted(reads) != sorted(wants):
        used = " and ".join(f"{u}_{op.upper()}" for op in wants) or "no operand"
        raise ConfigError(f"{dma['register']}.{name}_DATA_USE = {dma['use']}: the DMA reads the "
                          f"{' and '.join(r.upper() for r in reads)} operand(s) but the unit "
                          f"uses {used} from memory (bypass, *_SRC = REG or {u}_BYPASS); "
                          f"DATA_USE must name exactly the operands with *_SRC = MEM")
    m = _memory(dma["ram"], f"{dma['register']}.{name}_RAM_TYPE", mem, cv_mem)
    both = dma["use"] == "BOTH"
    addrs = operand_addresses(dma["mode"], dma["base"], dma["line"], dma["surface"], lay.h,
                              lay.w, lay.c_pad, size=dma["size"], both=both, group=lay.group)
    out = {}
    for i, op in enumerate(reads):
        out[op] = _gather(m, addrs + (dma["size"] if both and i == 1 else 0), dma["size"])
    return out


def _lut(regs) -> LutParams:
    le, lo = regs.lut("SDP")
    words = {name: regs[f"SDP.{name}"] for name in _LUT_REGS}
    return LutParams.from_registers(words, le, lo, unit="sdp")


def sdp_params_from_registers(regs, mem, *, atom_bytes: int = 8, cv_mem=None,
                              layout: SdpLayout | None = None):
    """Decode the SDP registers onto :class:`hw.nvdla.sdp.SdpParams` and read the memory
    operands through the BRDMA/NRDMA/ERDMA as the hardware does.

    Returns ``(params, ew_operand)``: X1/X2 memory operands are inside ``params``
    (``alu_data``/``mul_data``), Y's are ``ew_operand`` in the form :func:`sdp_apply` takes
    (None, one array, or an ``(alu, mul)`` pair). Operands cover the channels the datapath
    processes, C rounded up to whole atoms (``SdpLayout.c_pad``), so they fit an input cube of
    shape (H, W, c_pad). Raises ConfigError naming the register for anything not modelled.
    """
    lay = layout or sdp_layout_from_registers(regs, atom_bytes=atom_bytes)
    xs = {}
    for u in ("BS", "BN"):
        kw = _x_unit(regs, u)
        dma = lay.dmas[u]
        ops = _read_operands(kw, dma, u, lay, mem, cv_mem)
        if dma is not None:
            kw.update(data_mode=dma["mode"], data_size="ONE_BYTE" if dma["size"] == 1
                      else "TWO_BYTE")
        kw.update(alu_data=ops.get("alu"), mul_data=ops.get("mul"))
        xs[u] = SdpXParams(**kw)
    ykw = _y_unit(regs)
    dma = lay.dmas["EW"]
    ops = _read_operands(ykw, dma, "EW", lay, mem, cv_mem)
    if dma is not None:
        ykw.update(data_mode=dma["mode"], data_size="ONE_BYTE" if dma["size"] == 1
                   else "TWO_BYTE")
    if not ykw["bypass"] and not ykw["lut_bypass"]:
        ykw["lut"] = _lut(regs)
    ew = SdpYParams(**ykw)
    cvt = SdpCvtParams(cvt_offset=regs.signed("SDP.D_CVT_OFFSET", "CVT_OFFSET"),
                       cvt_scale=regs.signed("SDP.D_CVT_SCALE", "CVT_SCALE"),
                       cvt_shift=regs.field("SDP.D_CVT_SHIFT", "CVT_SHIFT"))
    params = SdpParams(bs=xs["BS"], bn=xs["BN"], ew=ew, cvt=cvt, proc_precision=lay.precision,
                       out_precision=lay.precision)
    if not ops:
        ew_operand = None
    elif len(ops) == 1:
        ew_operand = next(iter(ops.values()))
    else:
        ew_operand = (ops["alu"], ops["mul"])
    return params, ew_operand


# ------------------------------------------------------------------------------ executor
def run_sdp(regs, mem, *, flying: np.ndarray | None = None, atom_bytes: int = 8,
            cv_mem=None) -> LayerRun:
    """Run one SDP hardware layer from its registers (module docstring).

    ``regs``: a :class:`hw.nvdla.regfile.RegView` (or anything with its ``[]``, ``field``,
    ``enum`` and ``lut``); ``mem``: the primary memory (:class:`hw.nvdla.memimage.SparseMemory`);
    ``flying``: the int32 (H, W, C) cube from CACC when ``FLYING_MODE = ON``; ``cv_mem``: a
    CV-SRAM image for DMAs with ``RAM_TYPE = CV``. Writes the output to memory unless
    ``OUTPUT_DST = PDP`` and returns a :class:`hw.nvdla.surface.LayerRun` whose ``out`` and
    ``reference`` are the (H, W, C) output (int8 or int16) from the Numba datapath and from
    :func:`sdp_reference`.
    """
    lay = sdp_layout_from_registers(regs, atom_bytes=atom_bytes)
    dtype = np.int8 if lay.precision == "INT8" else np.int16
    if lay.flying:
        if flying is None:
            raise ValueError("flying = None: SDP.D_FEATURE_MODE_CFG.FLYING_MODE = ON takes its "
                             "input from CACC; pass the int32 cube as flying=")
        x = np.asarray(flying)
        if x.shape != (lay.h, lay.w, lay.c) or x.dtype.kind not in "iu":
            raise ValueError(f"flying: shape {x.shape}, dtype {x.dtype}: must be an integer "
                             f"cube of the registers' shape ({lay.h}, {lay.w}, {lay.c})")
        if x.size and (int(x.min()) < -2**31 or int(x.max()) > 2**31 - 1):
            raise ValueError("flying: values must lie in the int32 range (CACC output)")
        cube = np.zeros((lay.h, lay.w, lay.c_pad), np.int64)
        cube[..., :lay.c] = x
        source = "flying (CACC)"
    else:
        if flying is not None:
            raise ValueError("flying is given but SDP.D_FEATURE_MODE_CFG.FLYING_MODE = OFF: "
                             "the SDP reads its input from memory (SDP_RDMA.D_SRC_*)")
        m = _memory(lay.src_ram, "SDP_RDMA.D_SRC_DMA_CFG.SRC_RAM_TYPE", mem, cv_mem)
        base, line, surf = lay.src
        if lay.h == lay.w == 1:
            surf = atom_bytes  # a 1x1 cube is fetched as one run of atoms (SdpRdmaCore)
        cube = read_cube(m, base, line, surf, lay.h, lay.w, lay.c_pad, dtype=dtype,
                         atom_bytes=atom_bytes).astype(np.int64)
        source = f"memory {base:#x} ({lay.precision.lower()})"
    params, ew_operand = sdp_params_from_registers(regs, mem, atom_bytes=atom_bytes,
                                                   cv_mem=cv_mem, layout=lay)
    out = sdp_apply(cube[None], params, ew_operand)[0]
    ref = sdp_reference(cube[None], params, ew_operand)[0]
    base, line, surf = lay.dst
    if not lay.to_pdp:
        m = _memory(lay.dst_ram, "SDP.D_DST_DMA_CFG.DST_RAM_TYPE", mem, cv_mem)
        write_cube(m, base, line, atom_bytes if lay.h == lay.w == 1 else surf, out,
                   atom_bytes=atom_bytes)
    detail = {"cube": f"{lay.h}x{lay.w}x{lay.c}", "lanes": lay.c_pad, "input": source,
              "precision": lay.precision.lower(),
              "output": "PDP (on the fly, not written)" if lay.to_pdp else f"memory {base:#x}"}
    for name, p in (("x1", params.bs), ("x2", params.bn)):
        detail[name] = _describe_x(p, lay.dmas["BS" if name == "x1" else "BN"])
    detail["y"] = _describe_y(params.ew, lay.dmas["EW"])
    cv = params.cvt
    detail["cvt"] = f"offset {cv.cvt_offset} scale {cv.cvt_scale} shift {cv.cvt_shift}"
    detail["read_bytes"] = _read_bytes(lay)
    return LayerRun(unit="sdp", out=out[..., :lay.c], reference=ref[..., :lay.c],
                    out_base=base, detail=detail)


def _read_bytes(lay: SdpLayout) -> int:
    """Bytes the SDP's DMAs read: the input cube (MRDMA, whole atoms) and the operands."""
    elem = _ELEM_BYTES[lay.precision]
    total = 0 if lay.flying else lay.h * lay.w * lay.c_pad * elem
    for dma in lay.dmas.values():
        if dma is not None:
            n = lay.c_pad if dma["mode"] == "PER_KERNEL" else lay.h * lay.w * lay.c_pad
            total += n * dma["size"] * (2 if dma["use"] == "BOTH" else 1)
    return total


def _describe_x(p: SdpXParams, dma) -> str:
    if p.bypass:
        return "bypass"
    parts = []
    if not p.alu_bypass:
        parts.append(f"alu {p.alu_algo} {p.alu_src.lower()} <<{p.alu_shift_value}")
    if not p.mul_bypass:
        parts.append(f"mul {p.mul_src.lower()}{' prelu' if p.mul_prelu else ''}")
    parts.append(f">>{p.mul_shift_value}")
    if not p.relu_bypass:
        parts.append("relu")
    if dma is not None:
        parts.append(f"[{dma['dma']} {dma['use'].lower()} {dma['mode'].lower()} "
                     f"{dma['size']}B @{dma['base']:#x}]")
    return " ".join(parts)


def _describe_y(p: SdpYParams, dma) -> str:
    if p.bypass:
        return "bypass"
    parts = []
    if not p.mul_bypass:
        parts.append(f"mul {p.mul_src.lower()} >>{p.truncate}")
    if not p.alu_bypass:
        parts.append(f"alu {p.alu_algo} {p.alu_src.lower()}")
    if not p.lut_bypass:
        parts.append("lut")
    if dma is not None:
        parts.append(f"[ERDMA {dma['use'].lower()} {dma['mode'].lower()} {dma['size']}B "
                     f"@{dma['base']:#x}]")
    return " ".join(parts) or "pass"


# ------------------------------------------------------------------------------ numpy model
def _sat(v, bits: int) -> np.ndarray:
    return np.clip(v, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _trunc(v, s, in_bits: int, out_bits: int = 32) -> np.ndarray:
    """sat_out(round(v / 2**s)); a shift of ``in_bits`` or more gives 0."""
    s = np.asarray(s, np.int64)
    return np.where(s >= in_bits, 0, _sat(round_half_away(v, np.minimum(s, 63)), out_bits))


def _op(reg_value, data, mode_mem: bool, shape) -> np.ndarray:
    """Operand per element: the register value, or memory data broadcast (per kernel: (K,);
    per element: (H, W, K) or (N, H, W, K))."""
    if not mode_mem:
        return np.full(shape, reg_value, np.int64)
    return np.broadcast_to(np.asarray(data, np.int64), shape)


def _x_ref(d: np.ndarray, p: SdpXParams) -> np.ndarray:
    if p.bypass:
        return d
    shape = d.shape
    if p.alu_bypass:
        a = d
    else:
        op = _op(p.alu_operand, p.alu_data, p.alu_src == "MEM", shape)
        sh = p.alu_shift_value
        # |op| < 2**15: exact in int64 up to a shift of 48; beyond, any non-zero saturates
        shifted = _sat(op << sh if sh <= 48 else np.sign(op) << 62, 32)
        a = {"MAX": np.maximum, "MIN": np.minimum}.get(p.alu_algo, np.add)(d, shifted)
    if p.mul_bypass:
        o = _trunc(a, p.mul_shift_value, 49)
    else:
        op = _op(p.mul_operand, p.mul_data, p.mul_src == "MEM", shape)
        o = _trunc(a * op, p.mul_shift_value, 49)
        if p.mul_prelu:  # non-negative ALU results pass, kept to 32 bits by wrapping
            o = np.where(a >= 0, (a + (1 << 31)) % (1 << 32) - (1 << 31), o)
    return o if p.relu_bypass else np.maximum(o, 0)


def _y_operand(p: SdpYParams, op: str, data, shape) -> np.ndarray:
    if getattr(p, f"{op}_src") == "REG":
        return np.full(shape, getattr(p, f"{op}_operand"), np.int64)
    v = _op(0, data, True, shape)
    if getattr(p, f"{op}_cvt_bypass"):
        return v
    return _trunc((v - getattr(p, f"{op}_cvt_offset")) * getattr(p, f"{op}_cvt_scale"),
                  getattr(p, f"{op}_cvt_truncate"), 49)


def _lut_ref(x: np.ndarray, t: LutParams) -> np.ndarray:
    """The SDP Y LUT in numpy (C model ``sdp_y_idx.cpp``, ``sdp_y_inp.cpp``,
    ``sdp_hls_wrapper.cpp``): index, priorities, interpolation with a 35-bit fraction,
    under/overflow slopes with a signed shift (negative shifts left, then saturates)."""
    x = np.asarray(x, np.int64)

    def index(start, exponent, offset, sel, depth):
        d = x - start
        dd = np.maximum(d, 1)
        last = depth - 1
        if exponent:
            e = (np.frexp(dd.astype(np.float64))[1] - 1).astype(np.int64)  # exact: d < 2**34
            idx = e - offset
            frac = (dd - (np.int64(1) << e)) << (35 - e)
            uf = (d <= 0) | (idx < 0)
        elif sel >= 0:
            idx = dd >> min(sel, 63)
            r = dd & ((np.int64(1) << min(sel, 62)) - 1)
            frac = r << (35 - sel) if sel <= 35 else r >> min(sel - 35, 63)
            uf = d <= 0
        else:
            # a select of -20 or less puts any d >= 1 past the table
            idx = np.full_like(dd, last) if -sel >= 20 else dd << -sel
            frac = np.zeros_like(dd)
            uf = d <= 0
        of = ~uf & (idx >= last)
        hit = ~uf & ~of
        return uf, of, np.where(hit, idx, np.where(of, last, 0)), np.where(hit, frac, 0)

    exp_le = t.le_function == 0
    le = index(t.le_start, exp_le, t.le_index_offset, t.le_index_select, LE_ENTRIES)
    lo = index(t.lo_start, False, 0, t.lo_index_select, LO_ENTRIES)
    le_hit, lo_hit = ~(le[0] | le[1]), ~(lo[0] | lo[1])
    use_lo = np.where(le[0] & lo[0], t.uflow_priority == 1,
                      np.where(le[1] & lo[1], t.oflow_priority == 1,
                               np.where(le_hit == lo_hit, t.hybrid_priority == 1, lo_hit)))
    uf = np.where(use_lo, lo[0], le[0])
    of = np.where(use_lo, lo[1], le[1])
    idx = np.where(use_lo, lo[2], le[2])
    frac = np.where(use_lo, lo[3], le[3])
    le_t, lo_t = np.array(t.le_table, np.int64), np.array(t.lo_table, np.int64)
    y0 = np.where(use_lo, lo_t[np.minimum(idx, LO_ENTRIES - 1)],
                  le_t[np.minimum(idx, LE_ENTRIES - 1)])
    y1 = np.where(use_lo, lo_t[np.minimum(idx + 1, LO_ENTRIES - 1)],
                  le_t[np.minimum(idx + 1, LE_ENTRIES - 1)])
    hit_val = _sat(round_half_away(y0 * ((np.int64(1) << 35) - frac) + y1 * frac, 35), 32)
    bias = (1 << t.le_index_offset) if exp_le and t.le_index_offset > 0 else 0
    base = np.where(use_lo, np.where(uf, t.lo_start, t.lo_end),
                    np.where(uf, t.le_start + bias, t.le_end))
    scale = np.where(use_lo, np.where(uf, t.lo_slope_uflow_scale, t.lo_slope_oflow_scale),
                     np.where(uf, t.le_slope_uflow_scale, t.le_slope_oflow_scale))
    shift = np.where(use_lo, np.where(uf, t.lo_slope_uflow_shift, t.lo_slope_oflow_shift),
                     np.where(uf, t.le_slope_uflow_shift, t.le_slope_oflow_shift))
    prod = (x - base) * scale  # 34 x 16 bits
    left = np.clip(prod, -(1 << 33), 1 << 33) << np.clip(-shift, 0, 16)  # |.| < 2**50
    slope = np.where(shift < 0, _sat(left, 32), _trunc(prod, np.maximum(shift, 0), 50))
    flow_val = _sat(y0 + slope, 32)
    return np.where(uf | of, flow_val, hit_val)


def sdp_reference(x, params: SdpParams, ew_operand=None) -> np.ndarray:
    """Independent vectorized numpy model of the SDP integer pipeline (the gold model of
    :func:`hw.nvdla.sdp.sdp_apply`): X1, X2 (ALU with the saturated operand shift, MUL, the
    truncate, PReLU, ReLU), Y (operand converters, MUL with EW_TRUNCATE, ALU, the LUT), output
    converter. ``x``: (N, H, W, K) integers; operands as for ``sdp_apply``. Returns int8 or
    int16 (``params.out_precision``)."""
    d = np.asarray(x, np.int64)
    shape = d.shape
    d = _x_ref(_x_ref(d, params.bs), params.bn)
    y = params.ew
    if not y.bypass:
        mem_ops = y._mem_ops()
        data = {}
        if len(mem_ops) == 1:
            data[mem_ops[0]] = ew_operand
        elif len(mem_ops) == 2:
            data = {"alu": ew_operand[0], "mul": ew_operand[1]}
        if not y.mul_bypass:
            op = _y_operand(y, "mul", data.get("mul"), shape)
            m = _trunc(d * op, y.truncate, 64)
            d = np.where(y.mul_prelu & (d >= 0), d, m)
        if not y.alu_bypass:
            op = _y_operand(y, "alu", data.get("alu"), shape)
            if y.alu_algo == "EQL":
                d = (d != op).astype(np.int64)
            else:
                d = _sat({"MAX": np.maximum, "MIN": np.minimum, "SUM": np.add}[y.alu_algo](d, op),
                         32)
        if not y.lut_bypass:
            d = _lut_ref(d, y.lut)
    c = params.cvt
    bits = 8 if params.out_precision == "INT8" else 16
    o = _sat(_trunc((d - c.cvt_offset) * c.cvt_scale, c.cvt_shift, 49, 17), bits)
    return o.astype(np.int8 if bits == 8 else np.int16)
