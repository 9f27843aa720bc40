"""NVDLA PDP (planar data processor): max, min and average pooling on real int8/int16 values.

:func:`pdp` computes what the PDP writes for a whole NHWC tensor, bit for bit as NVIDIA's C model
``cmod/pdp/NV_NVDLA_pdp.cpp`` (``LineOperation``, ``PoolingStage0Calc``, ``PoolingStage1Calc``)
does; register names and field widths are those of ``NVDLA_PDP.rdl``
(``D_POOLING_KERNEL_CFG``, ``D_POOLING_PADDING_CFG``, ``D_POOLING_PADDING_VALUE_1..7_CFG``,
``D_RECIP_KERNEL_WIDTH/HEIGHT``, ``D_OPERATION_MODE_CFG``, ``D_PARTIAL_WIDTH_IN/OUT``).

What the hardware computes (facts read from the C model; the code here is our own):

* **Windows.** Kernel 1..8 and stride 1..16 per dimension, padding 0..7 per side (3-bit fields).
  An output exists for every window that lies inside the padded extent, so
  ``out = (in + pad_lo + pad_hi - kernel) // stride + 1`` (the value software writes to
  ``D_DATA_CUBE_OUT_WIDTH/HEIGHT`` plus one; checked against all 12 ``nv_small`` PDP traces).
  Stride may exceed the kernel (rows/columns are then skipped). Every window must hold at least
  one real element, which is the case exactly when each padding is smaller than the kernel in
  its dimension; otherwise the C model never initializes that output, so it is rejected here.
* **Max / min** run over the real elements only: padded positions are excluded (the C model
  seeds each accumulator with the window's first real element and never reads a pad value).
* **Average** includes the padded positions with the pad-value registers: for a window with
  ``n_w`` padded columns and ``n_h`` padded rows, each of its ``kernel_h - n_h`` real rows gets
  ``PAD_VALUE_{n_w}X`` (added once per row by ``LineOperation``) and the window gets
  ``kernel_w * PAD_VALUE_{n_h}X`` once (``PoolingStage0Calc``). Software writes
  ``PAD_VALUE_NX = N * pad_value``, which makes the total ``sum(real) + n_pad * pad_value``.
  The sum is then divided by the full kernel area through the two 17-bit reciprocal registers
  (``value * 2**16``, default :func:`~hw.nvdla.numerics.pdp_recip`, i.e. ``2**16 // k``):
  ``round(round(sum * recip_w / 2**16) * recip_h / 2**16)``, both rounds half away from zero
  (:func:`~hw.nvdla.numerics.pdp_average`). The final value is cast to int8/int16 as the C
  model's ``static_cast`` does (two's-complement wrap); with reciprocals ``<= 2**16 // k`` the
  result is always in range. The C model's accumulators (int16 for int8 data, int32 for int16)
  cannot overflow: ``|sum| <= 64*128 + 8*1024 + 8*1024 = 24576`` (int8, pad fields of 8..11
  bits) and ``<= 2**21 + 2**22`` (int16, 16..19 bits).
* **Split width** (``SPLIT_NUM > 0``, registers ``D_PARTIAL_WIDTH_IN/OUT``): the input is read
  in width slices. Slice 0 reads ``in_first`` columns with the left padding; slice ``i > 0``
  starts at column ``in_first + (i-1)*in_mid - (kernel_w - stride_w)`` (an overlap of
  ``kernel_w - stride_w`` columns, negative when the stride is larger) and reads
  ``in_{mid|last} + kernel_w - stride_w`` columns; only the last slice has the right padding;
  slice ``i`` writes ``out_{first|mid|last}`` output columns after those of the earlier slices
  (``PdpRdmaSequenceThread``, ``PoolingStage0SequenceThread``, ``PdpWdmaSequenceThread``).
  :func:`pdp` runs the slices exactly so; when the registers are consistent (checked, see
  :class:`PdpSplit`) the result equals the unsplit one. :func:`pdp_split_plan` computes a
  consistent set of registers for a maximum slice output width (the line buffer limit; the RDL
  gives 128 output columns for nv_full).

All 12 ``nv_small`` PDP trace tests (``verif/tests/trace_tests/nv_small/pdp_*``) replay to
their output CRCs through :func:`pdp` (``tests/hw/nvdla/test_pdp.py``). fp16 pooling
(``HLS_PDP_*_FP16``) and on-the-fly input from the SDP are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hw._jitcache import njit

from hw.numerics import wrap
from hw.nvdla.numerics import pdp_average, pdp_recip, round_half_away

__all__ = ["pdp_reference", "pdp", "pdp_output_shape", "PdpSplit", "pdp_split_plan", "pdp_pad_value_bits",
           "pdp_pad_values_from_regs", "METHODS"]

#: Pooling methods and their ``D_OPERATION_MODE_CFG.POOLING_METHOD`` codes.
METHODS = {"average": 0, "max": 1, "min": 2}

_PRECISION_BITS = {"int8": 8, "int16": 16}
#: Width of the signed value the C model reads from PAD_VALUE_1X..7X (``int_sign_extend``).
_PAD_BITS = {"int8": (8, 9, 10, 10, 11, 11, 11), "int16": (16, 17, 18, 18, 19, 19, 19)}


def pdp_pad_value_bits(precision: str) -> tuple[int, ...]:
    """Signed widths of ``PAD_VALUE_1X..7X`` as the C model reads them for ``precision``."""
    _check_precision(precision)
    return _PAD_BITS[precision]


# ---------------------------------------------------------------------- the kernel
@njit(cache=True)
def _pdp_kernel(x, kh, kw, sh, sw, pad_top, col0, in_w, pad_left, q0, q_n, method, pad_vals,
                recip_w, recip_h, out_bits, out):
    """Pool output columns ``q0 .. q0+q_n`` from the input columns ``col0 .. col0+in_w`` (one
    width slice, or the whole tensor) with that slice's left padding; rows are never split.
    ``method``: 0 average, 1 max, 2 min. ``pad_vals[n-1]`` is PAD_VALUE_nX."""
    n_img, h, _, c_all = x.shape
    p_all = out.shape[1]
    acc = np.empty(c_all, np.int64)
    for n in range(n_img):
        for p in range(p_all):
            y_start = p * sh - pad_top
            y_lo = max(y_start, 0)
            y_hi = min(y_start + kh, h)
            for q in range(q_n):
                x_start = q * sw - pad_left
                x_lo = max(x_start, 0)
                x_hi = min(x_start + kw, in_w)
                first = True
                for iy in range(y_lo, y_hi):
                    for ix in range(x_lo, x_hi):
                        for c in range(c_all):
                            v = np.int64(x[n, iy, col0 + ix, c])
                            if first:
                                acc[c] = v
                            elif method == 0:
                                acc[c] += v
                            elif method == 1:
                                if v > acc[c]:
                                    acc[c] = v
                            elif v < acc[c]:
                                acc[c] = v
                        first = False
                if method == 0:
                    n_pad_w = kw - (x_hi - x_lo)
                    n_pad_h = kh - (y_hi - y_lo)
                    pad = np.int64(0)
                    if n_pad_w > 0:  # once per real row (LineOperation)
                        pad += np.int64(y_hi - y_lo) * pad_vals[n_pad_w - 1]
                    if n_pad_h > 0:  # padded rows: kernel_w * PAD_VALUE_{n_h}X (Stage0Calc)
                        pad += np.int64(kw) * pad_vals[n_pad_h - 1]
                    for c in range(c_all):
                        out[n, p, q0 + q, c] = wrap(pdp_average(acc[c] + pad, recip_w, recip_h),
                                                    out_bits)
                else:
                    for c in range(c_all):
                        out[n, p, q0 + q, c] = acc[c]


# ---------------------------------------------------------------------- shapes and split
def pdp_output_shape(h: int, w: int, kernel=(1, 1), stride=(1, 1),
                     padding=(0, 0, 0, 0)) -> tuple[int, int]:
    """(out_h, out_w) the PDP produces; ``padding`` is (top, bottom, left, right):
    ``(in + pad_lo + pad_hi - kernel) // stride + 1`` per dimension."""
    top, bottom, left, right = padding
    return ((h + top + bottom - kernel[0]) // stride[0] + 1,
            (w + left + right - kernel[1]) // stride[1] + 1)


@dataclass(frozen=True)
class PdpSplit:
    """Split-width registers as actual widths (register value + 1); ``num`` is SPLIT_NUM + 1
    (2..256). ``in_mid``/``out_mid`` are ignored by the hardware when ``num == 2``."""

    num: int
    in_first: int
    in_mid: int
    in_last: int
    out_first: int
    out_mid: int
    out_last: int

    @classmethod
    def from_regs(cls, operation_mode_cfg: int, partial_width_in: int,
                  partial_width_out: int) -> "PdpSplit | None":
        """Decode ``D_OPERATION_MODE_CFG`` (SPLIT_NUM in bits 15:8) and ``D_PARTIAL_WIDTH_IN/OUT``
        (FIRST 9:0, LAST 19:10, MID 29:20, each + 1); None when SPLIT_NUM is 0 (no split)."""
        split_num = (operation_mode_cfg >> 8) & 0xFF
        if split_num == 0:
            return None

        def field(reg, lo):
            return ((reg >> lo) & 0x3FF) + 1
        return cls(split_num + 1, field(partial_width_in, 0), field(partial_width_in, 20),
                   field(partial_width_in, 10), field(partial_width_out, 0),
                   field(partial_width_out, 20), field(partial_width_out, 10))

    def slices(self, kernel_w: int, stride_w: int, pad_left: int, pad_right: int):
        """Per slice, as the hardware runs it: (first input column, input columns, left pad,
        right pad, first output column, output columns)."""
        overlap = kernel_w - stride_w
        out = []
        for i in range(self.num):
            last = i == self.num - 1
            if i == 0:
                col0, cols = 0, self.in_first
            else:
                col0 = self.in_first + (i - 1) * self.in_mid - overlap
                cols = (self.in_last if last else self.in_mid) + overlap
            q0 = 0 if i == 0 else self.out_first + (i - 1) * self.out_mid
            q_n = self.out_first if i == 0 else (self.out_last if last else self.out_mid)
            out.append((col0, cols, pad_left if i == 0 else 0, pad_right if last else 0, q0, q_n))
        return out


def pdp_split_plan(in_w: int, kernel_w: int, stride_w: int, pad_left: int, pad_right: int,
                   max_out_width: int) -> PdpSplit | None:
    """A consistent set of split registers with at most ``max_out_width`` output columns per
    slice (None when the whole width fits): ``out_first = out_mid = max_out_width``,
    ``in_first = (out_first - 1) * stride + kernel - pad_left`` (the first slice ends where its
    last window ends), ``in_mid = out_mid * stride``, and the last slice takes the rest."""
    if not isinstance(max_out_width, (int, np.integer)) or not 1 <= max_out_width <= 1024:
        raise ValueError(f"max_out_width = {max_out_width!r}: must be an integer in 1..1024 "
                         f"(PARTIAL_WIDTH_OUT fields are 10 bits, + 1)")
    _check_geometry(1, in_w, (1, kernel_w), (1, stride_w), (0, 0, pad_left, pad_right))
    out_w = (in_w + pad_left + pad_right - kernel_w) // stride_w + 1
    if out_w <= max_out_width:
        return None
    num = -(-out_w // max_out_width)
    out_first = out_mid = max_out_width
    out_last = out_w - out_first - (num - 2) * out_mid
    in_first = (out_first - 1) * stride_w + kernel_w - pad_left
    in_mid = out_mid * stride_w
    in_last = in_w - in_first - (num - 2) * in_mid
    if in_last < 1:
        raise ValueError(f"max_out_width = {max_out_width}: the last slice would read no new input "
                         f"column (its windows lie in the overlap and the right padding), which "
                         f"PARTIAL_WIDTH_IN_LAST cannot express; use a larger max_out_width")
    split = PdpSplit(num, in_first, in_mid, in_last, out_first, out_mid, out_last)
    _check_split(split, in_w, out_w, kernel_w, stride_w, pad_left, pad_right)
    return split


def _check_split(split, in_w, out_w, kernel_w, stride_w, pad_left, pad_right):
    if not isinstance(split, PdpSplit):
        raise ValueError(f"split = {split!r}: must be a PdpSplit or None")
    if not 2 <= split.num <= 256:
        raise ValueError(f"split.num = {split.num!r}: must be in 2..256 (SPLIT_NUM + 1, 8 bits)")
    for name in ("in_first", "in_mid", "in_last", "out_first", "out_mid", "out_last"):
        v = getattr(split, name)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 1024:
            raise ValueError(f"split.{name} = {v!r}: must be an integer in 1..1024 "
                             f"(a 10-bit PARTIAL_WIDTH field + 1)")
    mids = split.num - 2
    total_in = split.in_first + mids * split.in_mid + split.in_last
    if total_in != in_w:
        raise ValueError(f"split: in_first + {mids} * in_mid + in_last = {total_in}, but the "
                         f"input width is {in_w}")
    total_out = split.out_first + mids * split.out_mid + split.out_last
    if total_out != out_w:
        raise ValueError(f"split: out_first + {mids} * out_mid + out_last = {total_out}, but the "
                         f"output width is {out_w}")
    for i, (col0, cols, pl, pr, q0, q_n) in enumerate(
            split.slices(kernel_w, stride_w, pad_left, pad_right)):
        if cols < 1:
            raise ValueError(f"split: slice {i} reads {cols} input columns (must be >= 1)")
        if col0 < 0:
            raise ValueError(f"split: slice {i} starts at input column {col0}: the hardware "
                             f"would read {-col0} column(s) before the cube (make the first "
                             f"slice at least {-(-pad_left // stride_w)} output columns wide)")
        if i > 0 and col0 != q0 * stride_w - pad_left:
            raise ValueError(f"split: slice {i} starts at input column {col0}, but its first "
                             f"output column {q0} needs the window starting at "
                             f"{q0 * stride_w - pad_left}")
        got = (cols + pl + pr - kernel_w) // stride_w + 1
        if got != q_n:
            raise ValueError(f"split: slice {i} ({cols} input columns, pad {pl}/{pr}) holds "
                             f"{max(got, 0)} windows, but its PARTIAL_WIDTH_OUT says {q_n}")


# ---------------------------------------------------------------------- validation
def _check_precision(precision):
    if precision not in _PRECISION_BITS:
        raise ValueError(f"precision = {precision!r}: PDP takes 'int8' or 'int16' here "
                         f"(fp16 pooling is not modelled)")


def _pair(name, value):
    try:
        a, b = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r}: must be a pair (height, width)") from None
    return a, b


def _check_int(name, value, lo, hi, why):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} = {value!r}: must be an integer in {lo}..{hi} ({why})")


def _check_geometry(h, w, kernel, stride, padding):
    kh, kw = _pair("kernel", kernel)
    sh, sw = _pair("stride", stride)
    _check_int("kernel height", kh, 1, 8, "D_POOLING_KERNEL_CFG")
    _check_int("kernel width", kw, 1, 8, "D_POOLING_KERNEL_CFG")
    _check_int("stride height", sh, 1, 16, "D_POOLING_KERNEL_CFG")
    _check_int("stride width", sw, 1, 16, "D_POOLING_KERNEL_CFG")
    try:
        top, bottom, left, right = padding
    except (TypeError, ValueError):
        raise ValueError(f"padding = {padding!r}: must be (top, bottom, left, right)") from None
    for side, pad, k in (("top", top, kh), ("bottom", bottom, kh), ("left", left, kw),
                         ("right", right, kw)):
        _check_int(f"padding {side}", pad, 0, min(7, k - 1),
                   "3-bit D_POOLING_PADDING_CFG field, and smaller than the kernel so that every "
                   "window holds a real element")
    _check_int("input height", h, 1, 8192, "D_DATA_CUBE_IN_HEIGHT")
    _check_int("input width", w, 1, 8192, "D_DATA_CUBE_IN_WIDTH")
    if h + top + bottom < kh or w + left + right < kw:
        raise ValueError(f"kernel {kh}x{kw} does not fit the padded {h}x{w} input "
                         f"(padding {tuple(padding)})")


def _pad_array(pad_values, precision):
    bits = _PAD_BITS[precision]
    if isinstance(pad_values, (int, np.integer)) and not isinstance(pad_values, bool):
        lo, hi = -(1 << (bits[0] - 1)), (1 << (bits[0] - 1)) - 1
        if not lo <= pad_values <= hi:
            raise ValueError(f"pad_values = {pad_values!r}: a single pad value must be in the "
                             f"{precision} range {lo}..{hi}")
        return np.array([n * int(pad_values) for n in range(1, 8)], np.int64)
    try:
        vals = [v for v in pad_values]
    except TypeError:
        raise ValueError(f"pad_values = {pad_values!r}: must be one {precision} value or the 7 "
                         f"PAD_VALUE_1X..7X register values") from None
    if len(vals) != 7:
        raise ValueError(f"pad_values: {len(vals)} values given; the registers are "
                         f"PAD_VALUE_1X..7X, so 7 are needed")
    for n, (v, b) in enumerate(zip(vals, bits), start=1):
        lo, hi = -(1 << (b - 1)), (1 << (b - 1)) - 1
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise ValueError(f"pad_values[{n - 1}] (PAD_VALUE_{n}X) = {v!r}: must be an integer "
                             f"in {lo}..{hi} ({b}-bit signed for {precision})")
    return np.array(vals, np.int64)


def pdp_pad_values_from_regs(regs, precision: str) -> tuple[int, ...]:
    """The signed PAD_VALUE_1X..7X values the C model uses from the raw 19-bit register words:
    the sign bit of value N sits at bit ``pdp_pad_value_bits(precision)[N-1] - 1`` and is copied
    upwards, OR-ed with the whole register word, then the result is kept in the C model's
    container (int16 for int8 data, int32 for int16 data), as ``int_sign_extend`` does."""
    _check_precision(precision)
    regs = list(regs)
    if len(regs) != 7:
        raise ValueError(f"regs: {len(regs)} register words given; PAD_VALUE_1X..7X are 7")
    container = 16 if precision == "int8" else 32
    out = []
    for reg, b in zip(regs, _PAD_BITS[precision]):
        _check_int("pad value register", reg, 0, (1 << 19) - 1, "19-bit PAD_VALUE field")
        v = int(reg)
        if (v >> (b - 1)) & 1:
            v |= -(1 << b)
        v &= (1 << container) - 1
        out.append(v - (1 << container) if v >> (container - 1) else v)
    return tuple(out)


def pdp_reference(x, kernel, stride, padding, method, pad_values, recip_width, recip_height,
                  bits) -> np.ndarray:
    """The gold model of :func:`pdp` without split mode, in plain numpy (int64 out, wrapped to
    ``bits`` as the C model's cast does): each window is clipped to the input; max/min see the
    real elements only; the average adds ``pad_values[n_w - 1]`` once per real row and
    ``kernel_w * pad_values[n_h - 1]`` once (n_w/n_h = padded columns/rows of the window), then
    multiplies by the width and the height reciprocal, each rounded half away from zero.
    ``padding`` is (top, bottom, left, right); ``pad_values`` the 7 PAD_VALUE_NX values."""
    kh, kw = kernel
    sh, sw = stride
    top, bottom, left, right = padding
    x = np.asarray(x, np.int64)
    n_img, h, w, c_all = x.shape
    oh, ow = pdp_output_shape(h, w, kernel, stride, padding)
    out = np.zeros((n_img, oh, ow, c_all), np.int64)
    half = 1 << (bits - 1)
    for p in range(oh):
        r0, r1 = max(p * sh - top, 0), min(p * sh - top + kh, h)
        for q in range(ow):
            c0, c1 = max(q * sw - left, 0), min(q * sw - left + kw, w)
            win = x[:, r0:r1, c0:c1, :]
            if method == "max":
                out[:, p, q] = win.max(axis=(1, 2))
            elif method == "min":
                out[:, p, q] = win.min(axis=(1, 2))
            else:
                total = win.sum(axis=(1, 2))
                if kw - (c1 - c0):
                    total = total + (r1 - r0) * int(pad_values[kw - (c1 - c0) - 1])
                if kh - (r1 - r0):
                    total = total + kw * int(pad_values[kh - (r1 - r0) - 1])
                v = round_half_away(total * int(recip_width), 16)
                v = round_half_away(v * int(recip_height), 16)
                out[:, p, q] = (v + half) % (2 * half) - half
    return out


# ---------------------------------------------------------------------- public entry point
def pdp(x, kernel=(1, 1), stride=(1, 1), padding=(0, 0, 0, 0), method: str = "max",
        pad_values=0, recip_width: int | None = None, recip_height: int | None = None,
        precision: str | None = None, split: PdpSplit | None = None) -> np.ndarray:
    """Pool ``x`` (N, H, W, C; int8 or int16 values) as NVDLA's PDP does; returns
    (N, out_h, out_w, C) in the precision's dtype.

    ``kernel`` and ``stride`` are (height, width); ``padding`` is (top, bottom, left, right);
    ``method`` is ``"max"``, ``"min"`` or ``"average"``. For average, ``pad_values`` is one pad
    value (registers ``N * value``) or the 7 PAD_VALUE_1X..7X register values, and the
    reciprocals default to :func:`~hw.nvdla.numerics.pdp_recip` of the kernel size.
    ``precision`` defaults to the dtype of ``x`` (int8/int16). ``split`` runs split-width mode
    with those registers (see :class:`PdpSplit`, :func:`pdp_split_plan`).
    Bad arguments raise ValueError naming the parameter, the value and what is allowed."""
    x = np.asarray(x)
    if precision is None:
        precision = {np.dtype(np.int8): "int8", np.dtype(np.int16): "int16"}.get(x.dtype)
        if precision is None:
            raise ValueError(f"x: dtype {x.dtype}: pass precision='int8' or 'int16' (it is "
                             f"taken from the dtype only for int8/int16 arrays)")
    _check_precision(precision)
    bits = _PRECISION_BITS[precision]
    if x.ndim != 4 or 0 in x.shape:
        raise ValueError(f"x: shape {x.shape}: must be non-empty (N, H, W, C)")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x: dtype {x.dtype}: {precision} takes integers")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if x.min() < lo or x.max() > hi:
        bad = x.min() if x.min() < lo else x.max()
        raise ValueError(f"x: value {int(bad)} is outside the {precision} range {lo}..{hi}")
    _check_int("channels", x.shape[3], 1, 8192, "D_DATA_CUBE_IN_CHANNEL")
    if method not in METHODS:
        raise ValueError(f"method = {method!r}: must be one of {', '.join(map(repr, METHODS))}")
    _check_geometry(x.shape[1], x.shape[2], kernel, stride, padding)
    kh, kw = kernel
    sh, sw = stride
    top, bottom, left, right = padding
    if method == "average":
        pads = _pad_array(pad_values, precision)
        recip_width = pdp_recip(kw) if recip_width is None else recip_width
        recip_height = pdp_recip(kh) if recip_height is None else recip_height
        _check_int("recip_width", recip_width, 0, (1 << 17) - 1, "17-bit D_RECIP_KERNEL_WIDTH")
        _check_int("recip_height", recip_height, 0, (1 << 17) - 1,
                   "17-bit D_RECIP_KERNEL_HEIGHT")
    else:  # the pad value and reciprocal registers are not read by max/min pooling
        pads = np.zeros(7, np.int64)
        recip_width = recip_height = 0
    out_h, out_w = pdp_output_shape(x.shape[1], x.shape[2], kernel, stride, padding)
    _check_int("output height", out_h, 1, 8192, "D_DATA_CUBE_OUT_HEIGHT")
    _check_int("output width", out_w, 1, 8192, "D_DATA_CUBE_OUT_WIDTH")
    if split is None:
        slices = [(0, x.shape[2], left, right, 0, out_w)]
    else:
        _check_split(split, x.shape[2], out_w, kw, sw, left, right)
        slices = split.slices(kw, sw, left, right)
    xi = np.ascontiguousarray(x, np.int32)
    out = np.empty((x.shape[0], out_h, out_w, x.shape[3]), np.int32)
    for col0, cols, pl, _pr, q0, q_n in slices:
        _pdp_kernel(xi, kh, kw, sh, sw, top, col0, cols, pl, q0, q_n, METHODS[method], pads,
                    int(recip_width), int(recip_height), bits, out)
    return out.astype(np.int8 if bits == 8 else np.int16)
