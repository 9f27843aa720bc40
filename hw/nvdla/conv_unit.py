"""The NVDLA convolution pipeline as its registers program it: CDMA -> CSC -> CMAC -> CACC -> SDP.

:func:`run_conv` executes one hardware layer from a :class:`hw.nvdla.regfile.RegView` (the
``CDMA``, ``CSC``, ``CMAC_A/B``, ``CACC`` and ``SDP`` registers at the moment ``D_OP_ENABLE``
was set) on a :class:`hw.nvdla.memimage.SparseMemory`: it decodes the registers, fetches input
and weights exactly as the DMAs do, computes what CACC delivers with the bit-exact
:mod:`hw.nvdla.conv`, and hands that cube to the SDP on the fly
(:func:`hw.nvdla.sdp_unit.run_sdp`), which writes the output through its WDMA. nv_small only:
int8, atomic-C = atomic-K = 8, 8-byte memory atoms, direct convolution.

Rules, with their sources (NVIDIA nvdla/hw ``cmod/``, ``doc/hw/format.rst``; register fields
from ``spec/manual/NVDLA_*.rdl``):

* **Feature input** (``CDMA.D_DATAIN_FORMAT.DATAIN_FORMAT = FEATURE``): the cube is read in the
  feature layout (:mod:`hw.nvdla.surface`); with ``D_CVT_CFG.CVT_EN`` each int8 element goes
  through the converter with ``D_CVT_OFFSET`` (``cmod/cdma/NV_NVDLA_cdma.cpp``,
  ``DirectConvDataResponseSequencerCommon`` -> ``hls_convertor``, signed 8-bit input).
* **Pixel input** (``PIXEL``, ``PIXEL_MAPPING = PITCH_LINEAR``): pixel ``w`` of line ``h`` is at
  ``D_DAIN_ADDR + h * D_LINE_STRIDE + (PIXEL_X_OFFSET + w) * bytes_per_pixel``; its bytes are
  reordered into R, G, B, A (or Y, U, V, A) by ``PIXEL_FORMAT`` and converted per channel:
  ``sat8(round((p - mean_or_offset) * CVT_SCALE / 2**CVT_TRUNCATE))`` with ``p`` unsigned
  (``PIXEL_SIGN_OVERRIDE = UNSIGNED_INT``) or signed, the subtrahend ``D_MEAN_RY/GU/BV/AX`` per
  channel when ``D_MEAN_FORMAT = ENABLE`` else ``D_CVT_OFFSET``; without ``CVT_EN`` the byte is
  stored as is. ``PAD_LEFT``/``PAD_RIGHT`` pixels of ``D_ZERO_PADDING_VALUE`` (low byte) are
  added to each line, unconverted (``ImageConvDataResponseSequencerCommon``).
* **CSC**, feature (``cmod/csc/NV_NVDLA_csc.cpp``, ``SendDataToMacSequencerDirectConvCommon``):
  input pixel ``(p * sy + r * dy - PAD_TOP, q * sx + s * dx - PAD_LEFT)``, stride
  ``D_CONV_STRIDE_EXT``, dilation ``D_DILATION_EXT``; outside the cube the MAC sees the low
  byte of ``CSC.D_ZERO_PADDING_VALUE`` as int8. Image (``SendImageDataToMacSequencerConvCommon``,
  ``csc_read_one_image_entry``): the kernel is *channel-extended*, width 1 and
  ``WEIGHT_CHANNEL_EXT + 1 = S * C`` channels; output ``(p, q)`` row ``r`` reads the
  ``S * C`` consecutive line elements starting at ``q * sx * (DATAIN_CHANNEL_EXT + 1)``
  of line ``p * sy + r - PAD_TOP`` (pad value outside the image).
* **Weights** (``doc/hw/format.rst``, uncompressed): kernel groups of atomic-K, then channel
  groups of atomic-C (the last one not padded), then R, S, kernel, channel (:func:`weight_offsets`).
* **CMAC/CACC**: :func:`hw.nvdla.conv.conv_cacc` (exact atomic-C partial sums accumulated in
  hardware order, 34-bit saturation), then ``sat32(shift_right(acc, CLIP_TRUNCATE))`` with
  ``CACC.D_CLIP_CFG.CLIP_TRUNCATE``
  (:func:`hw.nvdla.conv.conv_to_sdp`).

Unsupported register values (Winograd, weight compression, int16/fp16, batches, post-Y
extension, semi-planar or 10/16-bit pixel formats) raise :class:`ConfigError` naming the
register field, its value and what is supported, before any Numba kernel runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from hw.nvdla.conv import cdma_convert, conv_cacc, conv_to_sdp, reference_conv
from hw.nvdla.numerics import round_half_away
from hw.nvdla.surface import LayerRun, read_cube
from hw.systolic.config import ConfigError

__all__ = ["ConvProgram", "ConvCore", "PIXEL_FORMATS", "decode_conv", "weight_offsets",
           "read_weights", "read_pixels", "convert_input", "image_lines", "image_extend",
           "run_conv_core", "run_conv"]

#: nv_small: MAC atomic-C and atomic-K, memory atom bytes, CACC accumulator width (RTL).
ATOMIC_C = 8
ATOMIC_K = 8
ATOM_BYTES = 8
ACC_BITS = 34

#: 8-bit pitch-linear pixel formats: (bytes per pixel, which byte of the pixel becomes CBUF
#: channel 0, 1, 2, 3 -- R, G, B, A or Y, U, V, A). From the reorder tables of
#: ``ImageConvDataResponseSequencerCommon`` (``cmod/cdma/NV_NVDLA_cdma.cpp``). X formats keep the
#: X byte as the fourth channel.
PIXEL_FORMATS = {
    "T_R8": (1, (0,)),
    "T_A8B8G8R8": (4, (0, 1, 2, 3)),
    "T_X8B8G8R8": (4, (0, 1, 2, 3)),
    "T_A8R8G8B8": (4, (2, 1, 0, 3)),
    "T_X8R8G8B8": (4, (2, 1, 0, 3)),
    "T_A8Y8U8V8": (4, (2, 1, 0, 3)),
    "T_B8G8R8A8": (4, (1, 2, 3, 0)),
    "T_B8G8R8X8": (4, (1, 2, 3, 0)),
    "T_V8U8Y8A8": (4, (1, 2, 3, 0)),
    "T_R8G8B8A8": (4, (3, 2, 1, 0)),
    "T_R8G8B8X8": (4, (3, 2, 1, 0)),
}


def _s8(v: int) -> int:
    """The low byte of a register field read as int8 (the int8 pad value)."""
    v &= 0xFF
    return v - 0x100 if v & 0x80 else v


@dataclass(frozen=True)
class ConvProgram:
    """The decoded convolution registers (one hardware layer). Sizes are real sizes (register
    value + 1); ``pad_value`` is the int8 the MAC sees for padded pixels."""

    mode: str                      # "feature" or "pixel"
    in_h: int
    in_w: int
    in_c: int                      # CDMA DATAIN_CHANNEL + 1
    data_base: int
    line_stride: int
    surf_stride: int
    pixel_format: str | None       # PIXEL_FORMAT enum name (pixel mode)
    x_offset: int                  # PIXEL_X_OFFSET
    pixel_signed: bool             # PIXEL_SIGN_OVERRIDE = SIGNED_INT
    cvt_en: bool
    cvt_offset: int
    cvt_scale: int
    cvt_truncate: int
    mean_en: bool
    means: tuple                   # (RY, GU, BV, AX) as int16
    cdma_pad: tuple                # CDMA (left, right, top, bottom)
    cdma_pad_value: int            # CDMA D_ZERO_PADDING_VALUE low byte, int8
    pad_top: int                   # CSC
    pad_left: int                  # CSC
    pad_value: int                 # CSC D_ZERO_PADDING_VALUE low byte, int8
    stride: tuple                  # (y, x), CSC D_CONV_STRIDE_EXT
    dilation: tuple                # (y, x), CSC D_DILATION_EXT
    csc_in_c: int                  # CSC DATAIN_CHANNEL_EXT + 1 (pixel stride in image mode)
    weight_base: int
    weight_bytes: int
    kernels: int
    kernel_h: int                  # CSC WEIGHT_HEIGHT_EXT + 1
    kernel_w: int                  # CSC WEIGHT_WIDTH_EXT + 1 (1 in image mode)
    kernel_c: int                  # CSC WEIGHT_CHANNEL_EXT + 1 (S * C in image mode)
    out_h: int
    out_w: int
    out_c: int
    clip_truncate: int


@dataclass
class ConvCore:
    """What the convolution core computed for one layer, before the SDP.

    x: what CSC feeds the MACs, (H, W, C) int64 after the CDMA converter (feature mode) or
    the channel-extended lines (H, Q, S*C) (pixel mode); weights: (K, R, S, C) int8 as CSC
    reads them; acc: CACC contents (P, Q, K) int64; to_sdp: what CACC delivers (P, Q, K) int64
    (int32 range); reference: the same from numpy only (:func:`_reference_core`)."""

    layer: ConvProgram
    x: np.ndarray
    weights: np.ndarray
    acc: np.ndarray
    to_sdp: np.ndarray
    reference: np.ndarray


# ------------------------------------------------------------------------------ decoding
def _need(cond: bool, key: str, value, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{key} = {value}: {allowed}")


def decode_conv(regs) -> ConvProgram:
    """Decode and check the convolution registers of ``regs`` (a RegView). Raises ConfigError
    naming the register field, its value and what is supported."""
    f, e = regs.field, regs.enum
    for unit in ("CDMA", "CSC", "CACC"):
        mode = e(f"{unit}.D_MISC_CFG", "CONV_MODE")
        _need(mode == "DIRECT", f"{unit}.D_MISC_CFG.CONV_MODE", mode,
              "only DIRECT convolution is modelled (nv_small has no Winograd)")
        prec = e(f"{unit}.D_MISC_CFG", "PROC_PRECISION")
        _need(prec == "INT8", f"{unit}.D_MISC_CFG.PROC_PRECISION", prec,
              "only INT8 is modelled (nv_small is int8-only)")
    for unit in ("CDMA", "CSC"):
        prec = e(f"{unit}.D_MISC_CFG", "IN_PRECISION")
        _need(prec == "INT8", f"{unit}.D_MISC_CFG.IN_PRECISION", prec, "only INT8 is modelled")
        wf = e(f"{unit}.D_WEIGHT_FORMAT", "WEIGHT_FORMAT")
        _need(wf == "UNCOMPRESSED", f"{unit}.D_WEIGHT_FORMAT.WEIGHT_FORMAT", wf,
              "only UNCOMPRESSED weights are modelled (no WMB/WGS decompression)")
        b = f(f"{unit}.D_BATCH_NUMBER", "BATCHES")
        _need(b == 0, f"{unit}.D_BATCH_NUMBER.BATCHES", b, "only 0 (one batch) is modelled")
    ye = f("CSC.D_POST_Y_EXTENSION", "Y_EXTENSION")
    _need(ye == 0, "CSC.D_POST_Y_EXTENSION.Y_EXTENSION", ye,
          "only 0 (no post-Y extension) is modelled")

    mode = "pixel" if e("CDMA.D_DATAIN_FORMAT", "DATAIN_FORMAT") == "PIXEL" else "feature"
    csc_mode = "pixel" if e("CSC.D_DATAIN_FORMAT", "DATAIN_FORMAT") == "PIXEL" else "feature"
    _need(mode == csc_mode, "CSC.D_DATAIN_FORMAT.DATAIN_FORMAT", csc_mode.upper(),
          f"must match CDMA.D_DATAIN_FORMAT.DATAIN_FORMAT ({mode.upper()})")
    pixel_format = None
    if mode == "pixel":
        mapping = e("CDMA.D_DATAIN_FORMAT", "PIXEL_MAPPING")
        _need(mapping == "PITCH_LINEAR", "CDMA.D_DATAIN_FORMAT.PIXEL_MAPPING", mapping,
              "only PITCH_LINEAR is modelled")
        pixel_format = e("CDMA.D_DATAIN_FORMAT", "PIXEL_FORMAT")
        _need(pixel_format in PIXEL_FORMATS, "CDMA.D_DATAIN_FORMAT.PIXEL_FORMAT", pixel_format,
              f"modelled formats (8-bit, single plane): {', '.join(PIXEL_FORMATS)}")

    in_w = f("CDMA.D_DATAIN_SIZE_0", "DATAIN_WIDTH") + 1
    in_h = f("CDMA.D_DATAIN_SIZE_0", "DATAIN_HEIGHT") + 1
    in_c = f("CDMA.D_DATAIN_SIZE_1", "DATAIN_CHANNEL") + 1
    for key, fld, want in (("CDMA.D_DATAIN_SIZE_EXT_0", "DATAIN_WIDTH_EXT", in_w),
                           ("CDMA.D_DATAIN_SIZE_EXT_0", "DATAIN_HEIGHT_EXT", in_h),
                           ("CSC.D_DATAIN_SIZE_EXT_0", "DATAIN_WIDTH_EXT", in_w),
                           ("CSC.D_DATAIN_SIZE_EXT_0", "DATAIN_HEIGHT_EXT", in_h)):
        v = f(key, fld) + 1
        _need(v == want, f"{key}.{fld}", v - 1,
              f"must equal the CDMA input size - 1 ({want - 1}) in direct convolution")
    csc_in_c = f("CSC.D_DATAIN_SIZE_EXT_1", "DATAIN_CHANNEL_EXT") + 1

    kernels = f("CSC.D_WEIGHT_SIZE_EXT_1", "WEIGHT_KERNEL") + 1
    kernel_c = f("CSC.D_WEIGHT_SIZE_EXT_1", "WEIGHT_CHANNEL_EXT") + 1
    kernel_w = f("CSC.D_WEIGHT_SIZE_EXT_0", "WEIGHT_WIDTH_EXT") + 1
    kernel_h = f("CSC.D_WEIGHT_SIZE_EXT_0", "WEIGHT_HEIGHT_EXT") + 1
    cdma_k = f("CDMA.D_WEIGHT_SIZE_1", "WEIGHT_KERNEL") + 1
    _need(cdma_k == kernels, "CDMA.D_WEIGHT_SIZE_1.WEIGHT_KERNEL", cdma_k - 1,
          f"must equal CSC.D_WEIGHT_SIZE_EXT_1.WEIGHT_KERNEL ({kernels - 1})")
    bpk = f("CDMA.D_WEIGHT_SIZE_0", "BYTE_PER_KERNEL") + 1
    _need(bpk == kernel_h * kernel_w * kernel_c, "CDMA.D_WEIGHT_SIZE_0.BYTE_PER_KERNEL", bpk - 1,
          f"must be R*S*C - 1 = {kernel_h * kernel_w * kernel_c - 1} (CSC weight size "
          f"{kernel_h}x{kernel_w}x{kernel_c})")
    weight_bytes = f("CDMA.D_WEIGHT_BYTES", "WEIGHT_BYTES")
    _need(weight_bytes >= kernels * bpk, "CDMA.D_WEIGHT_BYTES.WEIGHT_BYTES", weight_bytes,
          f"must hold {kernels} kernels of {bpk} bytes ({kernels * bpk})")
    if mode == "feature":
        _need(kernel_c == in_c, "CSC.D_WEIGHT_SIZE_EXT_1.WEIGHT_CHANNEL_EXT", kernel_c - 1,
              f"must be the input channels - 1 ({in_c - 1}) for feature input")
        _need(csc_in_c == in_c, "CSC.D_DATAIN_SIZE_EXT_1.DATAIN_CHANNEL_EXT", csc_in_c - 1,
              f"must equal CDMA.D_DATAIN_SIZE_1.DATAIN_CHANNEL ({in_c - 1})")
    else:
        _need(kernel_w == 1, "CSC.D_WEIGHT_SIZE_EXT_0.WEIGHT_WIDTH_EXT", kernel_w - 1,
              "must be 0 for pixel input (the kernel width is folded into the channels)")

    out_w = f("CSC.D_DATAOUT_SIZE_0", "DATAOUT_WIDTH") + 1
    out_h = f("CSC.D_DATAOUT_SIZE_0", "DATAOUT_HEIGHT") + 1
    out_c = f("CSC.D_DATAOUT_SIZE_1", "DATAOUT_CHANNEL") + 1
    _need(out_c == kernels, "CSC.D_DATAOUT_SIZE_1.DATAOUT_CHANNEL", out_c - 1,
          f"must be the kernel count - 1 ({kernels - 1})")
    for key, fld, want in (("CACC.D_DATAOUT_SIZE_0", "DATAOUT_WIDTH", out_w),
                           ("CACC.D_DATAOUT_SIZE_0", "DATAOUT_HEIGHT", out_h),
                           ("CACC.D_DATAOUT_SIZE_1", "DATAOUT_CHANNEL", out_c)):
        v = f(key, fld) + 1
        _need(v == want, f"{key}.{fld}", v - 1, f"must equal CSC's ({want - 1})")

    for fld, want in (("WIDTH", out_w), ("HEIGHT", out_h), ("CHANNEL", out_c)):
        v = f(f"SDP.D_DATA_CUBE_{fld}", fld) + 1
        _need(v == want, f"SDP.D_DATA_CUBE_{fld}.{fld}", v - 1,
              f"the SDP on the fly takes CACC's cube: must be {want - 1}")
    stride = (f("CSC.D_CONV_STRIDE_EXT", "CONV_Y_STRIDE_EXT") + 1,
              f("CSC.D_CONV_STRIDE_EXT", "CONV_X_STRIDE_EXT") + 1)
    dilation = (f("CSC.D_DILATION_EXT", "Y_DILATION_EXT") + 1,
                f("CSC.D_DILATION_EXT", "X_DILATION_EXT") + 1)
    if mode == "pixel":
        _need(dilation == (1, 1), "CSC.D_DILATION_EXT", f"{dilation[0] - 1}/{dilation[1] - 1}"
              " (Y/X)", "must be 0/0 for pixel input (image convolution has no dilation)")
    pad = (f("CDMA.D_ZERO_PADDING", "PAD_LEFT"), f("CDMA.D_ZERO_PADDING", "PAD_RIGHT"),
           f("CDMA.D_ZERO_PADDING", "PAD_TOP"), f("CDMA.D_ZERO_PADDING", "PAD_BOTTOM"))

    data_base = regs["CDMA.D_DAIN_ADDR_HIGH_0"] << 32 | regs["CDMA.D_DAIN_ADDR_LOW_0"]
    line_stride = f("CDMA.D_LINE_STRIDE", "LINE_STRIDE")
    x_offset = f("CDMA.D_PIXEL_OFFSET", "PIXEL_X_OFFSET")
    if mode == "pixel":
        bpp = PIXEL_FORMATS[pixel_format][0]
        _need((x_offset + in_w) * bpp <= line_stride, "CDMA.D_LINE_STRIDE.LINE_STRIDE",
              line_stride, f"must hold (PIXEL_X_OFFSET + width) * {bpp} bytes = "
              f"{(x_offset + in_w) * bpp} bytes of a {pixel_format} line")

    return ConvProgram(
        mode=mode, in_h=in_h, in_w=in_w, in_c=in_c, data_base=data_base,
        line_stride=line_stride, surf_stride=f("CDMA.D_SURF_STRIDE", "SURF_STRIDE"),
        pixel_format=pixel_format, x_offset=x_offset,
        pixel_signed=e("CDMA.D_DATAIN_FORMAT", "PIXEL_SIGN_OVERRIDE") == "SIGNED_INT",
        cvt_en=e("CDMA.D_CVT_CFG", "CVT_EN") == "ENABLE",
        cvt_offset=regs.signed("CDMA.D_CVT_OFFSET", "CVT_OFFSET"),
        cvt_scale=regs.signed("CDMA.D_CVT_SCALE", "CVT_SCALE"),
        cvt_truncate=f("CDMA.D_CVT_CFG", "CVT_TRUNCATE"),
        mean_en=e("CDMA.D_MEAN_FORMAT", "MEAN_FORMAT") == "ENABLE",
        means=tuple(regs.signed(f"CDMA.D_MEAN_GLOBAL_{i}", m)
                    for i, m in ((0, "MEAN_RY"), (0, "MEAN_GU"), (1, "MEAN_BV"), (1, "MEAN_AX"))),
        cdma_pad=pad, cdma_pad_value=_s8(f("CDMA.D_ZERO_PADDING_VALUE", "PAD_VALUE")),
        pad_top=f("CSC.D_ZERO_PADDING", "PAD_TOP"), pad_left=f("CSC.D_ZERO_PADDING", "PAD_LEFT"),
        pad_value=_s8(f("CSC.D_ZERO_PADDING_VALUE", "PAD_VALUE")),
        stride=stride, dilation=dilation, csc_in_c=csc_in_c,
        weight_base=regs.address("CDMA", "D_WEIGHT_ADDR"),
        weight_bytes=weight_bytes, kernels=kernels, kernel_h=kernel_h, kernel_w=kernel_w,
        kernel_c=kernel_c, out_h=out_h, out_w=out_w, out_c=out_c,
        clip_truncate=f("CACC.D_CLIP_CFG", "CLIP_TRUNCATE"))


# ------------------------------------------------------------------------------ weights
def weight_offsets(k: int, r: int, s: int, c: int, *, atomic_k: int = ATOMIC_K,
                   atomic_c: int = ATOMIC_C) -> np.ndarray:
    """Byte offset (int64, shape (K, R, S, C)) of every int8 weight from the weight base,
    uncompressed direct-convolution layout (``doc/hw/format.rst``, "Weight Format"): kernel
    groups of ``atomic_k`` kernels (the last may be short), in each group channel groups of
    ``atomic_c`` (the last one not padded), in each channel group R, then S, then the group's
    kernels, then the channels."""
    if min(k, r, s, c) < 1 or atomic_k < 1 or atomic_c < 1:
        raise ValueError(f"weight shape {k}x{r}x{s}x{c}, atomic_k {atomic_k}, atomic_c "
                         f"{atomic_c}: every size must be >= 1")
    kk = np.arange(k, dtype=np.int64)[:, None, None, None]
    rr = np.arange(r, dtype=np.int64)[None, :, None, None]
    ss = np.arange(s, dtype=np.int64)[None, None, :, None]
    cc = np.arange(c, dtype=np.int64)[None, None, None, :]
    group = kk // atomic_k
    group_size = np.minimum(atomic_k, k - group * atomic_k)   # kernels in this group
    cgroup = cc // atomic_c
    cgroup_size = np.minimum(atomic_c, c - cgroup * atomic_c)  # channels in this group
    return (group * atomic_k * r * s * c                      # whole kernel groups before
            + cgroup * atomic_c * r * s * group_size          # channel groups before, this group
            + ((rr * s + ss) * group_size + kk % atomic_k) * cgroup_size
            + cc % atomic_c)


def read_weights(mem, base: int, k: int, r: int, s: int, c: int) -> np.ndarray:
    """The (K, R, S, C) int8 weights at ``base`` (:func:`weight_offsets` layout, nv_small)."""
    return mem.gather(base + weight_offsets(k, r, s, c)).view(np.int8)


# ------------------------------------------------------------------------------ input data
def read_pixels(mem, layer: ConvProgram) -> np.ndarray:
    """The image as CDMA fetches it, reordered to CBUF channels: (H, W, E) int64 with E the
    pixel format's channel count, values 0..255 (or -128..127 with PIXEL_SIGN_OVERRIDE =
    SIGNED_INT). Pixel ``w`` of line ``h`` starts at ``base + h * line_stride + (x_offset + w)
    * bytes_per_pixel``."""
    bpp, order = PIXEL_FORMATS[layer.pixel_format]
    h = np.arange(layer.in_h, dtype=np.int64)[:, None, None]
    w = np.arange(layer.in_w, dtype=np.int64)[None, :, None]
    b = np.asarray(order, np.int64)[None, None, :]
    raw = mem.gather(layer.data_base + h * layer.line_stride + (layer.x_offset + w) * bpp + b)
    return (raw.view(np.int8) if layer.pixel_signed else raw).astype(np.int64)


def _offsets(layer: ConvProgram, channels: int) -> np.ndarray:
    if layer.mode == "pixel" and layer.mean_en:
        return np.asarray(layer.means[:channels], np.int64)
    return np.asarray([layer.cvt_offset], np.int64)


def convert_input(layer: ConvProgram, values: np.ndarray) -> np.ndarray:
    """CDMA's converter on fetched data (last axis = channels): with CVT_EN,
    :func:`hw.nvdla.conv.cdma_convert` (per-channel means in pixel mode with MEAN_FORMAT =
    ENABLE, else CVT_OFFSET); without it the byte passes unchanged, read as int8."""
    if not layer.cvt_en:
        return values.astype(np.uint8).view(np.int8).astype(np.int64)
    return cdma_convert(values, _offsets(layer, values.shape[-1]), layer.cvt_scale,
                        layer.cvt_truncate)


def image_lines(layer: ConvProgram, pixels: np.ndarray) -> np.ndarray:
    """The lines CDMA writes to CBUF in image mode: (H, (PAD_LEFT + W + PAD_RIGHT) * E) int64,
    converted pixels between ``PAD_LEFT``/``PAD_RIGHT`` pixels of the CDMA pad value."""
    left, right = layer.cdma_pad[0], layer.cdma_pad[1]
    h, w, e = pixels.shape
    lines = np.full((h, left + w + right, e), layer.cdma_pad_value, np.int64)
    lines[:, left:left + w, :] = convert_input(layer, pixels)
    return lines.reshape(h, -1)


def image_extend(lines: np.ndarray, out_w: int, stride_x: int, pixel_c: int,
                 kernel_c: int) -> np.ndarray:
    """CSC's channel extension: (H, Q, kernel_c) where output column ``q`` of line ``y`` holds
    line elements ``q * stride_x * pixel_c .. + kernel_c`` (``SendImageDataToMacSequencerConv
    Common``). Elements past the line's end read 0 (CBUF holds no data there)."""
    h, n = lines.shape
    idx = (np.arange(out_w, dtype=np.int64)[:, None] * stride_x * pixel_c
           + np.arange(kernel_c, dtype=np.int64)[None, :])
    padded = np.zeros((h, max(n, int(idx.max()) + 1)), np.int64)
    padded[:, :n] = lines
    return padded[:, idx]


# ------------------------------------------------------------------------------ the core
def _bottom_right(layer: ConvProgram, h: int, w: int, r: int, s: int, sy: int, sx: int,
                  dy: int, dx: int, top: int, left: int) -> tuple[int, int]:
    """Padding below/right so that the output has at least out_h x out_w positions. CSC has no
    bottom/right padding registers: it walks the DATAOUT_SIZE positions and any input
    coordinate past the cube reads the pad value (``SendDataToMacSequencerDirectConvCommon``),
    which is exactly padding by as much as the output size needs."""
    bottom = max(0, (layer.out_h - 1) * sy + (r - 1) * dy + 1 - h - top)
    right = max(0, (layer.out_w - 1) * sx + (s - 1) * dx + 1 - w - left)
    return bottom, right


def _reference_shift(acc: np.ndarray, t: int) -> np.ndarray:
    """Numpy only: round half away from zero of acc / 2**t, clamped to int32."""
    return np.clip(round_half_away(acc, t), -2**31, 2**31 - 1)


def _reference_convert(layer: ConvProgram, values: np.ndarray) -> np.ndarray:
    """Numpy only: the CDMA converter (see :func:`convert_input`)."""
    if not layer.cvt_en:
        return ((values.astype(np.int64) + 128) % 256) - 128
    prod = (values.astype(np.int64) - _offsets(layer, values.shape[-1])) * layer.cvt_scale
    return np.clip(round_half_away(prod, layer.cvt_truncate), -128, 127)


def _reference_core(layer: ConvProgram, fetched: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Independent numpy model of what CACC delivers: converter, padding and an einsum
    convolution (:func:`hw.nvdla.conv.reference_conv`), then the clip. In image mode the
    channel-extended kernel is unfolded back to R x S x C over the padded image when S*C
    splits evenly (every modelled format), so the channel extension itself is checked."""
    sy, sx = layer.stride
    dy, dx = layer.dilation
    k, r = layer.kernels, layer.kernel_h
    x = _reference_convert(layer, fetched)
    if layer.mode == "feature":
        s, top, left = layer.kernel_w, layer.pad_top, layer.pad_left
        ww = w
    else:
        e = fetched.shape[-1]
        left, right = layer.cdma_pad[0], layer.cdma_pad[1]
        img = np.full((x.shape[0], left + x.shape[1] + right, e), layer.cdma_pad_value, np.int64)
        img[:, left:left + x.shape[1]] = x
        if layer.kernel_c % e or layer.csc_in_c != e:
            ext = image_extend(img.reshape(img.shape[0], -1), layer.out_w, sx, layer.csc_in_c,
                               layer.kernel_c)
            x, ww, s, sx, top, left = ext, w, 1, 1, layer.pad_top, 0
        else:
            s = layer.kernel_c // e
            x, ww, top, left = img, w.reshape(k, r, s, e), layer.pad_top, 0
    bottom, right = _bottom_right(layer, x.shape[0], x.shape[1], r, s, sy, sx, dy, dx, top, left)
    acc = reference_conv(x[None], ww.astype(np.int64), (sy, sx), (top, left, bottom, right),
                         (dy, dx), 1, layer.pad_value, np.int64)[0]
    return _reference_shift(acc[:layer.out_h, :layer.out_w], layer.clip_truncate)


def run_conv_core(regs, mem) -> ConvCore:
    """CDMA, CSC, CMAC and CACC of one layer: decode the registers, fetch the input and weights
    from ``mem``, compute the CACC contents and what CACC delivers to the SDP."""
    layer = decode_conv(regs)
    w = read_weights(mem, layer.weight_base, layer.kernels, layer.kernel_h, layer.kernel_w,
                     layer.kernel_c)
    sy, sx = layer.stride
    dy, dx = layer.dilation
    if layer.mode == "feature":
        fetched = read_cube(mem, layer.data_base, layer.line_stride, layer.surf_stride,
                            layer.in_h, layer.in_w, layer.in_c, dtype=np.int8,
                            atom_bytes=ATOM_BYTES).astype(np.int64)
        x = convert_input(layer, fetched) if layer.cvt_en else fetched
        r, s, top, left = layer.kernel_h, layer.kernel_w, layer.pad_top, layer.pad_left
        stride, dilation = (sy, sx), (dy, dx)
    else:
        fetched = read_pixels(mem, layer)
        lines = image_lines(layer, fetched)
        x = image_extend(lines, layer.out_w, sx, layer.csc_in_c, layer.kernel_c)
        r, s, top, left = layer.kernel_h, 1, layer.pad_top, 0
        stride, dilation = (sy, 1), (1, 1)
    bottom, right = _bottom_right(layer, x.shape[0], x.shape[1], r, s, *stride, *dilation,
                                  top, left)
    acc = conv_cacc(x[None], w, stride=stride, padding=(top, left, bottom, right),
                    dilation=dilation, atomic_c=ATOMIC_C, acc_bits=ACC_BITS, precision="int8",
                    pad_value=layer.pad_value)[0]
    acc = acc[:layer.out_h, :layer.out_w]
    to_sdp = conv_to_sdp(acc, layer.clip_truncate, ACC_BITS)
    return ConvCore(layer, x, w, acc, to_sdp, _reference_core(layer, fetched, w))


def run_conv(regs, mem) -> LayerRun:
    """Run one convolution layer from its registers: :func:`run_conv_core`, then the SDP on the
    fly (:func:`hw.nvdla.sdp_unit.run_sdp`), which writes the output cube through its WDMA.
    Returns the SDP's LayerRun as ``unit = "conv"`` with the convolution's details merged in;
    ``reference`` is numpy only (converter, einsum convolution, clip, then the SDP's reference
    model of that)."""
    from hw.nvdla.sdp_unit import run_sdp

    core = run_conv_core(regs, mem)
    lay = core.layer
    sub = f"means {lay.means}" if lay.mean_en and lay.mode == "pixel" else lay.cvt_offset
    shadow = None
    if not np.array_equal(core.to_sdp, core.reference):
        shadow = copy.deepcopy(mem)  # the SDP's reference of the reference CACC, memory untouched
    run = run_sdp(regs, mem, flying=core.to_sdp)
    reference = run.reference
    if shadow is not None:
        reference = run_sdp(regs, shadow, flying=core.reference).reference
    detail = {
        "conv.input": f"{lay.mode} {lay.in_h}x{lay.in_w}x{lay.in_c}"
                      + (f" {lay.pixel_format}" if lay.pixel_format else ""),
        "conv.kernel": f"{lay.kernels}x{lay.kernel_h}x{lay.kernel_w}x{lay.kernel_c}",
        "conv.stride": f"{lay.stride[0]}x{lay.stride[1]}",
        "conv.dilation": f"{lay.dilation[0]}x{lay.dilation[1]}",
        "conv.pad": f"top {lay.pad_top} left {lay.pad_left} value {lay.pad_value}",
        "conv.cvt": (f"subtract {sub} scale {lay.cvt_scale} truncate {lay.cvt_truncate}"
                     if lay.cvt_en else "off"),
        "conv.clip_truncate": lay.clip_truncate,
        "conv.output": f"{lay.out_h}x{lay.out_w}x{lay.out_c}",
        "conv.macs": lay.out_h * lay.out_w * lay.out_c * lay.kernel_h * lay.kernel_w * lay.kernel_c,
    }
    detail.update(run.detail)
    return LayerRun("conv", run.out, reference, run.out_base, detail, run.cycles,
                    cycle_layer=_cycle_layer(core))


def _cycle_layer(core: ConvCore):
    """The layer as :class:`hw.nvdla.conv_layer.ConvLayer` for the cycle model (the trace player's
    estimate), or None when the cycle model cannot describe it. Image input: C is the pixel's
    channel count and S the kernel width folded into CSC's extended channels. The cycle model
    has one dilation for both axes; when Y and X differ the smaller one is used."""
    from hw.nvdla.conv_layer import ConvLayer as CycleLayer
    lay = core.layer
    if lay.mode == "feature":
        c, s, left = lay.in_c, lay.kernel_w, lay.pad_left
    else:
        c = core.x.shape[-1] if lay.kernel_c % lay.csc_in_c else lay.csc_in_c
        s, left = max(1, lay.kernel_c // c), lay.cdma_pad[0]
    w_in = lay.in_w
    bottom, right = _bottom_right(lay, lay.in_h, w_in, lay.kernel_h, s, *lay.stride,
                                  *lay.dilation, lay.pad_top, left)
    try:
        return CycleLayer(C=c, H=lay.in_h, W=w_in, K=lay.kernels, R=lay.kernel_h, S=s,
                          stride_y=lay.stride[0], stride_x=lay.stride[1], pad_top=lay.pad_top,
                          pad_left=left, pad_bottom=bottom, pad_right=right,
                          dilation=min(lay.dilation), precision="int8",
                          image_input=lay.mode == "pixel")
    except ValueError:
        return None
