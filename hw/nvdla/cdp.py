"""The NVDLA CDP (channel data processor): local response normalization through the LUT, bit
for bit, for int8/int16.

Per output element at channel ``c`` (NVIDIA's C model ``cmod/cdp/NV_NVDLA_cdp.cpp``,
``lookup_lut_int8`` / ``lookup_lut``; converters ``cmod/hls/cdp_libs/cdp_icvt.cpp`` and
``cdp_ocvt.cpp``; registers ``shared/nvdla/rdl/NVDLA_CDP.rdl``):

1. **Input converter** on every channel: ``v = sat(shift_right((x - datin_offset) * datin_scale,
   datin_shifter))`` to 9 bits (int8; the offset is taken as int8) or 17 bits (int16).
2. **Square sum** over the window of ``normalz_len`` channels centred on ``c`` (3, 5, 7 or 9;
   register ``D_LRN_CFG.NORMALZ_LEN`` = 0..3): ``s = sum(v[j]**2)``. Channels outside the cube
   are fed with ``datin_offset`` and so convert to 0. ``sqsum_bypass`` takes ``s = v[c]``.
3. **LUT** (:mod:`hw.nvdla.lut`, CDP rules): ``l = lut(s)`` in int16.
4. **Multiply**: ``m = l * v[c]`` (``mul_bypass``: ``m = l``).
5. **Output converter**: ``sat_out(shift_right((m - datout_offset) * datout_scale,
   datout_shifter))`` (:func:`hw.nvdla.numerics.cvt_out`; the int8 path takes the offset as
   25 bits). ``out_saturation`` counts outputs where the saturated result is more than 1 away
   from the truncated shift, as ``IntShiftRightSat`` (``cmod/hls/include/nvdla_int.h``) flags.

With the LUT programmed to ``(k + alpha/n * s)**-beta`` this is Caffe's LRN,
``x / (k + alpha/n * sum x**2)**beta``, in fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
from hw._jitcache import njit

from hw.numerics import wrap
from hw.nvdla.lut import LutParams, _check_int, _lut_one, _signed, lut_counters
from hw.nvdla.numerics import cvt_out, round_half_away, shift_right_sat

__all__ = ["CdpParams", "CdpResult", "cdp_lrn", "cdp_reference", "NORMALZ_LENS"]

#: Window sizes by ``D_LRN_CFG.NORMALZ_LEN`` code.
NORMALZ_LENS = (3, 5, 7, 9)
_PRECISIONS = {"int8": 0, "int16": 1}


@dataclass(frozen=True)
class CdpParams:
    """The CDP's ``D_*`` datapath registers as signed values (validated on construction).

    ``normalz_len``: window size 3/5/7/9. ``datin_offset``/``datin_scale``: int16;
    ``datin_shifter``: 0..31. ``datout_offset``: int32; ``datout_scale``: int16;
    ``datout_shifter``: 0..63. ``precision``: "int8" or "int16" (fp16 is not modelled).
    """

    normalz_len: int = 3
    precision: str = "int8"
    datin_offset: int = 0
    datin_scale: int = 1
    datin_shifter: int = 0
    datout_offset: int = 0
    datout_scale: int = 1
    datout_shifter: int = 0
    sqsum_bypass: bool = False
    mul_bypass: bool = False

    def __post_init__(self):
        if self.normalz_len not in NORMALZ_LENS or isinstance(self.normalz_len, bool):
            raise ValueError(f"normalz_len = {self.normalz_len!r}: must be one of "
                             f"{NORMALZ_LENS} channels")
        if self.precision not in _PRECISIONS:
            raise ValueError(f"precision = {self.precision!r}: must be 'int8' or 'int16' "
                             f"(fp16 is not modelled)")
        _check_int("datin_offset", self.datin_offset, -32768, 32767, " (int16 register)")
        _check_int("datin_scale", self.datin_scale, -32768, 32767, " (int16 register)")
        _check_int("datin_shifter", self.datin_shifter, 0, 31, " (5-bit register)")
        _check_int("datout_offset", self.datout_offset, -(1 << 31), (1 << 31) - 1,
                   " (int32 register)")
        _check_int("datout_scale", self.datout_scale, -32768, 32767, " (int16 register)")
        _check_int("datout_shifter", self.datout_shifter, 0, 63, " (6-bit register)")
        for name in ("sqsum_bypass", "mul_bypass"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} = {getattr(self, name)!r}: must be True or False")

    @classmethod
    def from_registers(cls, regs: Mapping[str, int]) -> "CdpParams":
        """Decode raw NVDLA_CDP register words (names without prefix and ``_0`` suffix:
        ``D_LRN_CFG``, ``D_DATA_FORMAT``, ``D_DATIN_OFFSET``, ``D_DATIN_SCALE``,
        ``D_DATIN_SHIFTER``, ``D_DATOUT_OFFSET``, ``D_DATOUT_SCALE``, ``D_DATOUT_SHIFTER``,
        ``D_FUNC_BYPASS``); a register not given holds its reset value 0 (scales reset to 0
        too). Other keys are ignored, so a trace's whole CDP register dict can be passed."""
        def reg(name):
            v = regs.get(name, 0)
            return _check_int(f"register {name}", v, 0, 0xFFFFFFFF, " (32-bit word)")

        fmt = reg("D_DATA_FORMAT") & 3
        if fmt not in (0, 1):
            raise ValueError(f"D_DATA_FORMAT.INPUT_DATA_TYPE = {fmt}: only INT8 (0) and "
                             f"INT16 (1) are modelled (2 is FP16)")
        byp = reg("D_FUNC_BYPASS")
        return cls(
            normalz_len=NORMALZ_LENS[reg("D_LRN_CFG") & 3],
            precision="int8" if fmt == 0 else "int16",
            datin_offset=_signed(reg("D_DATIN_OFFSET"), 16),
            datin_scale=_signed(reg("D_DATIN_SCALE"), 16),
            datin_shifter=reg("D_DATIN_SHIFTER") & 0x1F,
            datout_offset=_signed(reg("D_DATOUT_OFFSET"), 32),
            datout_scale=_signed(reg("D_DATOUT_SCALE"), 16),
            datout_shifter=reg("D_DATOUT_SHIFTER") & 0x3F,
            sqsum_bypass=bool(byp & 1), mul_bypass=bool(byp >> 1 & 1),
        )


@dataclass(frozen=True)
class CdpResult:
    """``out``: the output tensor (input shape, int8 or int16 dtype); ``flags``: the LUT flags
    per element (uint8, :mod:`hw.nvdla.lut`); ``counters``: ``lut_uflow``, ``lut_oflow``,
    ``lut_hybrid``, ``lut_le_hit``, ``lut_lo_hit`` (``D_PERF_LUT_*``) and ``out_saturation``
    (``D_OUT_SATURATION``)."""

    out: np.ndarray
    flags: np.ndarray
    counters: dict


@njit(cache=True)
def _cdp_kernel(x, half, in_off, in_scale, in_shift, in_bits, cvt_bits, sqsum_bypass,
                mul_bypass, out_off, out_scale, out_shift, out_bits, p, le_tab, lo_tab):
    """x: (pixels, C) int64. Returns (out, flags, saturation count)."""
    n_pix, n_ch = x.shape
    out = np.empty((n_pix, n_ch), np.int64)
    flags = np.empty((n_pix, n_ch), np.uint8)
    v = np.zeros(n_ch + 2 * half, np.int64)  # converted channels, zero-padded at both ends
    sat = np.int64(0)
    for i in range(n_pix):
        for c in range(n_ch):
            v[half + c] = shift_right_sat((x[i, c] - in_off) * in_scale, in_shift, in_bits,
                                          cvt_bits)
        for c in range(n_ch):
            if sqsum_bypass:
                s = v[half + c]
            else:
                s = np.int64(0)
                for j in range(c, c + 2 * half + 1):
                    s += v[j] * v[j]
            lut, flags[i, c] = _lut_one(s, p, le_tab, lo_tab)
            m = lut if mul_bypass else lut * v[half + c]
            o = cvt_out(m, out_off, out_scale, out_shift, out_bits)
            out[i, c] = o
            t = (m - out_off) * out_scale
            fl = t >> out_shift  # the C model's saturation test: truncated shift vs result
            if fl > o + 1 or fl < o - 1:
                sat += 1
    return out, flags, sat


def cdp_lrn(x, cdp: CdpParams, lut: LutParams) -> CdpResult:
    """Run the CDP on a whole NHWC (or any ``(..., C)``) int8/int16 tensor; the window runs
    along the last axis. ``cdp.precision`` must match ``x``'s dtype (int8 or int16) — a wider
    integer dtype is accepted if its values fit."""
    if not isinstance(cdp, CdpParams):
        raise ValueError(f"cdp = {type(cdp).__name__}: must be a CdpParams")
    if not isinstance(lut, LutParams):
        raise ValueError(f"lut = {type(lut).__name__}: must be a LutParams")
    lut.check_for("cdp", cdp.precision)
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ValueError(f"x: dtype {a.dtype} is not an integer type")
    if a.ndim < 1 or a.shape[-1] == 0:
        raise ValueError(f"x has shape {a.shape}: needs a channel axis (last) of length >= 1")
    bits = 8 if cdp.precision == "int8" else 16
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        bad = int(a.min()) if int(a.min()) < lo else int(a.max())
        raise ValueError(f"x holds {bad}: precision {cdp.precision!r} takes {lo}..{hi}")
    int8 = cdp.precision == "int8"
    in_off = wrap(np.int64(cdp.datin_offset), 8) if int8 else np.int64(cdp.datin_offset)
    out_off = wrap(np.int64(cdp.datout_offset), 25) if int8 else np.int64(cdp.datout_offset)
    le, lo_t = lut.tables()
    flat = np.ascontiguousarray(a.reshape(-1, a.shape[-1]), dtype=np.int64)
    out, flags, sat = _cdp_kernel(
        flat, (cdp.normalz_len - 1) // 2, np.int64(in_off), cdp.datin_scale, cdp.datin_shifter,
        25 if int8 else 33, 9 if int8 else 17, cdp.sqsum_bypass, cdp.mul_bypass,
        np.int64(out_off), cdp.datout_scale, cdp.datout_shifter, bits, lut.vector("cdp"), le,
        lo_t)
    flags = flags.reshape(a.shape)
    c = lut_counters(flags, "cdp")
    counters = {f"lut_{k}": v for k, v in c.items()}
    counters["out_saturation"] = int(sat)
    return CdpResult(out=out.reshape(a.shape).astype(np.int8 if int8 else np.int16),
                     flags=flags, counters=counters)


def cdp_reference(x, cdp: CdpParams, lut: LutParams) -> np.ndarray:
    """The gold model of :func:`cdp_lrn` in vectorized numpy (int64 out): the converters as
    saturating rounded shifts, the square sum as a sum of shifted channel slices of the
    zero-padded squares, the LUT through :func:`hw.nvdla.lut.lut_lookup`."""
    from hw.nvdla.lut import lut_lookup
    int8 = cdp.precision == "int8"
    b = 9 if int8 else 17
    off = (cdp.datin_offset + 128) % 256 - 128 if int8 else cdp.datin_offset
    v = np.clip(round_half_away((np.asarray(x, np.int64) - off) * cdp.datin_scale,
                           cdp.datin_shifter), -(1 << (b - 1)), (1 << (b - 1)) - 1)
    half = (cdp.normalz_len - 1) // 2
    if cdp.sqsum_bypass:
        s = v
    else:
        pad = np.pad(v * v, [(0, 0)] * (v.ndim - 1) + [(half, half)])
        s = sum(pad[..., j:j + v.shape[-1]] for j in range(2 * half + 1))
    looked, _ = lut_lookup(s, lut, "cdp", cdp.precision)
    m = looked if cdp.mul_bypass else looked * v
    oo = (cdp.datout_offset + (1 << 24)) % (1 << 25) - (1 << 24) if int8 else cdp.datout_offset
    ob = 8 if int8 else 16
    o = round_half_away((m - oo) * cdp.datout_scale, cdp.datout_shifter)
    return np.clip(o, -(1 << (ob - 1)), (1 << (ob - 1)) - 1)
