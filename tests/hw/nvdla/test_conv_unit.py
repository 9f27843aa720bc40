"""The convolution pipeline from registers (hw/nvdla/conv_unit.py): NVIDIA's nv_small dc_* and
img_* trace CRCs, the pixel formats' channel order and the CDMA converter worked by hand, the
weight layout read back from bytes placed by hand, small register programs against a numpy
convolution, and the errors for register values the model does not cover.

Trace folder: ``$NPULAB_NVDLA_TRACES`` (holding ``nv_small/``), default ``../shared/nvdla/traces``;
missing: skipped locally, a failure when ``CI`` is set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hw.nvdla.conv import cdma_convert, reference_conv
from hw.nvdla.conv_unit import (PIXEL_FORMATS, decode_conv, read_pixels, read_weights,
                                run_conv, run_conv_core, weight_offsets)
from hw.nvdla.memimage import SparseMemory
from hw.nvdla.regfile import RegisterFile, RegView
from hw.nvdla.surface import read_cube, write_cube
from hw.nvdla.trace import default_trace_dir, load_trace
from hw.systolic.config import ConfigError

REPO = Path(__file__).resolve().parents[3]
NV_SMALL = default_trace_dir(REPO) / "nv_small"
_ALL = sorted(p.name for p in NV_SMALL.iterdir() if p.is_dir()) if NV_SMALL.is_dir() else []
DC = [n for n in _ALL if n.startswith("dc_")]
IMG = [n for n in _ALL if n.startswith("img_")]


def replay(name):
    """The registers at launch, the memory image and the check_crc (addr, size, crc) of a trace,
    built from its commands; returns also the mem_load files absent from the folder and the
    mem_init ranges."""
    t = load_trace(NV_SMALL / name)
    rf, mem = RegisterFile(), SparseMemory()
    missing, inits, crc = [], [], None
    for c in t.commands:
        if c.op == "mem_init":
            mem.fill(c.args[1], c.args[2], c.args[3])
            inits.append((c.args[1], c.args[2]))
        elif c.op == "mem_load":
            path = t.folder / c.args[2]
            if path.is_file():
                mem.load_dat(c.args[1], path)
            else:
                missing.append((c.args[1], c.args[2]))
        elif c.op == "reg_write":
            rf.write(*c.args)
        elif c.op == "check_crc":
            crc = c.args[2:]
    return rf.view(), mem, crc, missing, inits


def test_the_conv_traces_are_found(nv_small_traces):
    assert len(DC) == 9 and len(IMG) == 8


@pytest.mark.parametrize("name", DC or ["<no traces>"])
def test_nvidia_dc_trace_crc(name, nv_small_traces):
    t = load_trace(NV_SMALL / name)
    missing = [c.args[2] for c in t.commands
               if c.op == "mem_load" and not (t.folder / c.args[2]).is_file()]
    if missing:
        pytest.skip(f"{name}: input surface(s) {missing} are not in {NV_SMALL} (not shipped "
                    f"in shared/), so the layer cannot be reproduced")
    regs, mem, (addr, size, crc), _, _ = replay(name)
    core = run_conv_core(regs, mem)
    assert np.array_equal(core.to_sdp, core.reference)        # Numba path == numpy gold
    run = run_conv(regs, mem)
    assert run.unit == "conv" and run.mismatches == 0
    assert run.out.shape == (core.layer.out_h, core.layer.out_w, core.layer.out_c)
    assert mem.crc32(addr, size) == crc, name


@pytest.mark.parametrize("name", IMG or ["<no traces>"])
def test_nvidia_img_trace_crc_for_any_image(name, nv_small_traces):
    """The img_* traces ship weights but not their image (``*_dt.dat`` is not in shared/).
    Their mean registers make the result independent of the image: every channel's
    (pixel - mean) * scale lies beyond int8 for all pixels 0..255 (RY = -6883, GU = -30923,
    AX = -5435 give +127; BV = 5906 gives -128). So the trace's CRC must hold for any image
    content; this fills the image with random bytes and checks it, and that CSC saw only the
    saturated values."""
    regs, mem, (addr, size, crc), missing, inits = replay(name)
    lay = decode_conv(regs)
    assert lay.mode == "pixel" and lay.mean_en and lay.cvt_en
    for base, n in inits:
        if base == lay.data_base:                              # the image's mem_init range
            mem.fill(base, min(n, lay.in_h * lay.line_stride), "RANDOM", seed=len(name))
    core = run_conv_core(regs, mem)
    assert set(np.unique(core.x)) <= {-128, 127}
    assert np.array_equal(core.to_sdp, core.reference)
    run = run_conv(regs, mem)
    assert run.mismatches == 0
    assert mem.crc32(addr, size) == crc, name


# ---------------------------------------------------------------------- small register programs
def program(*, h, w, c, k, r, s, stride=(1, 1), dilation=(1, 1), pad=(0, 0, 0, 0), pad_value=0,
            clip=0, pixel=None, x_offset=0, cvt=None, means=None, signed=False, extra=None):
    """A complete register set for one conv layer (nv_small addresses below), SDP on the fly
    with every unit bypassed and an identity output converter. ``pad`` = (top, left, bottom,
    right); pixel mode: ``pixel`` is a PIXEL_FORMAT name, ``c`` its channel count and the
    kernel is channel-extended (CSC width 1, S*C channels)."""
    top, left, bottom, right = pad
    sy, sx = stride
    dy, dx = dilation
    p = (h + top + bottom - (r - 1) * dy - 1) // sy + 1
    q = (w + left + right - (s - 1) * dx - 1) // sx + 1
    enum = {"T_R8": 0, "T_R16": 3, "T_A8B8G8R8": 12, "T_A8R8G8B8": 13, "T_B8G8R8A8": 14,
            "T_R8G8B8A8": 15, "T_X8B8G8R8": 16, "T_X8R8G8B8": 17, "T_B8G8R8X8": 18,
            "T_R8G8B8X8": 19, "T_A8Y8U8V8": 26, "T_V8U8Y8A8": 27, "T_Y8___U8V8_N444": 28}
    assert pixel is None or pixel in enum
    bpp = PIXEL_FORMATS[pixel][0] if pixel in PIXEL_FORMATS else 4
    line = (x_offset + w) * bpp if pixel else w * 8
    ks, kc = (1, s * c) if pixel else (s, c)
    v = {
        "CDMA.D_MISC_CFG": 0, "CSC.D_MISC_CFG": 0, "CACC.D_MISC_CFG": 0,
        "CDMA.D_DATAIN_FORMAT": (1 | enum[pixel] << 8 | int(signed) << 20) if pixel else 0,
        "CSC.D_DATAIN_FORMAT": 1 if pixel else 0,
        "CDMA.D_DATAIN_SIZE_0": (w - 1) | (h - 1) << 16,
        "CDMA.D_DATAIN_SIZE_EXT_0": (w - 1) | (h - 1) << 16,
        "CSC.D_DATAIN_SIZE_EXT_0": (w - 1) | (h - 1) << 16,
        "CDMA.D_DATAIN_SIZE_1": c - 1, "CSC.D_DATAIN_SIZE_EXT_1": c - 1,
        "CDMA.D_DAIN_ADDR_LOW_0": 0x1000, "CDMA.D_LINE_STRIDE": line,
        "CDMA.D_SURF_STRIDE": line * h, "CDMA.D_PIXEL_OFFSET": x_offset,
        "CDMA.D_ZERO_PADDING": left | right << 8 | top << 16 | bottom << 24,
        "CSC.D_ZERO_PADDING": left | top << 16,
        "CDMA.D_ZERO_PADDING_VALUE": pad_value & 0xFFFF,
        "CSC.D_ZERO_PADDING_VALUE": pad_value & 0xFFFF,
        "CDMA.D_CONV_STRIDE": (sx - 1) | (sy - 1) << 16,
        "CSC.D_CONV_STRIDE_EXT": (sx - 1) | (sy - 1) << 16,
        "CSC.D_DILATION_EXT": (dx - 1) | (dy - 1) << 16,
        "CSC.D_WEIGHT_SIZE_EXT_0": (ks - 1) | (r - 1) << 16,
        "CSC.D_WEIGHT_SIZE_EXT_1": (kc - 1) | (k - 1) << 16,
        "CDMA.D_WEIGHT_SIZE_0": r * s * c - 1, "CDMA.D_WEIGHT_SIZE_1": k - 1,
        "CDMA.D_WEIGHT_BYTES": -(-k * r * s * c // 128) * 128, "CDMA.D_WEIGHT_ADDR_LOW": 0x100000,
        "CSC.D_DATAOUT_SIZE_0": (q - 1) | (p - 1) << 16, "CSC.D_DATAOUT_SIZE_1": k - 1,
        "CACC.D_DATAOUT_SIZE_0": (q - 1) | (p - 1) << 16, "CACC.D_DATAOUT_SIZE_1": k - 1,
        "CACC.D_CLIP_CFG": clip,
        "SDP.D_DATA_CUBE_WIDTH": q - 1, "SDP.D_DATA_CUBE_HEIGHT": p - 1,
        "SDP.D_DATA_CUBE_CHANNEL": k - 1, "SDP.D_DST_BASE_ADDR_LOW": 0x200000,
        "SDP.D_DST_LINE_STRIDE": q * 8, "SDP.D_DST_SURFACE_STRIDE": p * q * 8,
        "SDP.D_FEATURE_MODE_CFG": 1, "SDP.D_DST_DMA_CFG": 1, "SDP.D_CVT_SCALE": 1,
        "SDP.D_DP_BS_CFG": 0x5B, "SDP.D_DP_BN_CFG": 0x53, "SDP.D_DP_EW_CFG": 0x53,
    }
    if cvt is not None:                                  # (offset, scale, truncate)
        off, scale, trunc = cvt
        v["CDMA.D_CVT_CFG"] = 1 | trunc << 4
        v["CDMA.D_CVT_OFFSET"], v["CDMA.D_CVT_SCALE"] = off & 0xFFFF, scale & 0xFFFF
    if means is not None:
        ry, gu, bv, ax = (m & 0xFFFF for m in means)
        v["CDMA.D_MEAN_FORMAT"] = 1
        v["CDMA.D_MEAN_GLOBAL_0"], v["CDMA.D_MEAN_GLOBAL_1"] = ry | gu << 16, bv | ax << 16
    v.update(extra or {})
    return RegView.from_dict(v), (p, q)


def place_weights_by_hand(mem, base, wt):
    """format.rst's weight order, written out as loops: kernel groups of 8, channel groups of 8
    (last one short), R, S, kernel, channel; one byte after the other."""
    k, r, s, c = wt.shape
    addr = base
    for g in range(0, k, 8):
        for c0 in range(0, c, 8):
            for rr in range(r):
                for ss in range(s):
                    for kk in range(g, min(g + 8, k)):
                        for cc in range(c0, min(c0 + 8, c)):
                            mem.write(addr, bytes([int(wt[kk, rr, ss, cc]) & 0xFF]))
                            addr += 1
    return addr - base


def test_weight_offsets_worked_by_hand():
    # K=9, 1x1, C=9: kernel group 0 (kernels 0..7) holds channel group 0 (c 0..7, kernel k at
    # k*8 + c, bytes 0..63) then channel group 1 (c 8 alone, kernel k at 64 + k, bytes 64..71);
    # kernel group 1 (kernel 8): c 0..7 at 72..79, c 8 at 80.
    off = weight_offsets(9, 1, 1, 9)
    assert off[3, 0, 0, 5] == 29 and off[3, 0, 0, 8] == 67
    assert off[8, 0, 0, 2] == 74 and off[8, 0, 0, 8] == 80
    assert sorted(off.ravel()) == list(range(81))           # a permutation: nothing overlaps


def test_weights_read_back_from_hand_placed_bytes():
    rng = np.random.default_rng(7)
    wt = rng.integers(-128, 128, (11, 2, 3, 10)).astype(np.int8)   # short last K and C groups
    mem = SparseMemory()
    assert place_weights_by_hand(mem, 0x5000, wt) == wt.size
    assert np.array_equal(read_weights(mem, 0x5000, *wt.shape), wt)


# The channel order of each 8-bit format, from its name alone: a format names the components of
# a 32-bit little-endian word from the most significant byte down, so T_A8B8G8R8 stores the bytes
# R, G, B, A. CBUF takes R, G, B, A (Y, U, V, A) in that order. Memory bytes 0x11 0x22 0x33 0x44:
PIXEL_CASES = {
    "T_A8B8G8R8": (0x11, 0x22, 0x33, 0x44),   # bytes R G B A
    "T_X8B8G8R8": (0x11, 0x22, 0x33, 0x44),   # bytes R G B X (X kept as the 4th channel)
    "T_A8R8G8B8": (0x33, 0x22, 0x11, 0x44),   # bytes B G R A
    "T_X8R8G8B8": (0x33, 0x22, 0x11, 0x44),
    "T_B8G8R8A8": (0x22, 0x33, 0x44, 0x11),   # bytes A R G B
    "T_B8G8R8X8": (0x22, 0x33, 0x44, 0x11),
    "T_R8G8B8A8": (0x44, 0x33, 0x22, 0x11),   # bytes A B G R
    "T_R8G8B8X8": (0x44, 0x33, 0x22, 0x11),
    "T_A8Y8U8V8": (0x33, 0x22, 0x11, 0x44),   # bytes V U Y A -> Y U V A
    "T_V8U8Y8A8": (0x22, 0x33, 0x44, 0x11),   # bytes A Y U V -> Y U V A
    "T_R8": (0x11,),
}


@pytest.mark.parametrize("fmt", sorted(PIXEL_CASES))
def test_pixel_format_channel_order(fmt):
    e = len(PIXEL_CASES[fmt])
    regs, _ = program(h=1, w=3, c=e, k=1, r=1, s=1, pixel=fmt, x_offset=1)
    mem = SparseMemory()
    bpp = PIXEL_FORMATS[fmt][0]
    # the constructed pixel is pixel 1 of the line (x offset 1 skips pixel 0 of memory)
    mem.write(0x1000 + 2 * bpp, bytes([0x11, 0x22, 0x33, 0x44][:bpp]))
    px = read_pixels(mem, decode_conv(regs))
    assert px.shape == (1, 3, e)
    assert tuple(px[0, 1]) == PIXEL_CASES[fmt]
    assert not px[0, 0].any() and not px[0, 2].any()


def test_cdma_converter_hand_vectors():
    # (x - offset) * scale / 2**truncate, rounded half away from zero, saturated to int8:
    # (200-100)*3/4 = 75; (10-0)*3/4 = 7.5 -> 8; (-10-0)*3/4 = -7.5 -> -8;
    # (255-0)*3/4 = 191.25 -> 127; (0-300)... offset -300 is int16: (5+300)*3/4 = 228.75 -> 127
    assert cdma_convert(np.array([200]), [100], 3, 2).tolist() == [75]
    assert cdma_convert(np.array([10, -10, 255]), [0], 3, 2).tolist() == [8, -8, 127]
    assert cdma_convert(np.array([5]), [-300], 3, 2).tolist() == [127]
    # per channel: (-1-0)*3/2 = -1.5 -> -2; (7-9)*3/2 = -3; truncate 0: (7-9)*100 = -200 -> -128
    assert cdma_convert(np.array([-1, 7]), [0, 9], 3, 1).tolist() == [-2, -3]
    assert cdma_convert(np.array([7]), [9], 100, 0).tolist() == [-128]
    # per-channel offsets follow the last axis: (10-1, 10-2, 10-3) * 2 = 18, 16, 14
    assert cdma_convert(np.array([[10, 10, 10]]), [1, 2, 3], 2, 0).tolist() == [[18, 16, 14]]
    with pytest.raises(ValueError, match="truncate"):
        cdma_convert(np.array([1]), [0], 1, 64)


def test_pixel_conversion_uses_means_per_channel_and_the_sign_override():
    """A8B8G8R8 pixel bytes R=0xF0 G=0x10 B=0x80 A=0x01, means RY=100 GU=-20 BV=0 AX=1,
    scale 1, truncate 1. Unsigned: (240-100)/2 = 70, (16+20)/2 = 18, 128/2 = 64, 0 -> 0.
    SIGNED_INT override: R = -16: (-16-100)/2 = -58; B = -128: -64."""
    for signed, want in ((False, [70, 18, 64, 0]), (True, [-58, 18, -64, 0])):
        regs, _ = program(h=1, w=1, c=4, k=1, r=1, s=1, pixel="T_A8B8G8R8", cvt=(0, 1, 1),
                          means=(100, -20, 0, 1), signed=signed)
        mem = SparseMemory()
        mem.write(0x1000, bytes([0xF0, 0x10, 0x80, 0x01]))
        place_weights_by_hand(mem, 0x100000, np.ones((1, 1, 1, 4), np.int8))
        core = run_conv_core(regs, mem)
        assert core.x[0, 0].tolist() == want
        assert core.to_sdp[0, 0, 0] == sum(want)


def test_feature_converter_and_pad_value_by_hand():
    """1x1x1 input x = -5, 3x3 kernel of ones, pad 1 all round with pad value 0x1F3 (low byte
    0xF3 = -13). CVT offset 3, scale -2, truncate 1: (-5-3)*-2/2 = 8. Sum = 8 + 8 * -13 = -96.
    Without CVT_EN the input stays -5: -5 - 104 = -109."""
    for cvt, want in (((3, -2, 1), -96), (None, -109)):
        regs, (p, q) = program(h=1, w=1, c=1, k=1, r=3, s=3, pad=(1, 1, 1, 1), pad_value=0x1F3,
                               cvt=cvt)
        assert (p, q) == (1, 1)
        mem = SparseMemory()
        mem.write(0x1000, bytes([(-5) & 0xFF]))
        place_weights_by_hand(mem, 0x100000, np.ones((1, 3, 3, 1), np.int8))
        run = run_conv(regs, mem)
        assert run.out[0, 0, 0] == want and run.mismatches == 0
        assert mem.read(0x200000, 1).view(np.int8)[0] == want


def _numpy_feature(x, wt, stride, pad, dilation, pad_value, clip):
    top, left, bottom, right = pad
    acc = reference_conv(x[None].astype(np.int64), wt.astype(np.int64), stride,
                         (top, left, bottom, right), dilation, 1, pad_value)[0]
    mag = (np.abs(acc) + ((1 << clip) >> 1)) >> clip
    return np.clip(np.where(acc < 0, -mag, mag), -2**31, 2**31 - 1)


@pytest.mark.parametrize("case", [
    # h, w, c, k, r, s, stride, dilation, pad (t, l, b, r), clip
    (6, 7, 11, 10, 3, 2, (1, 2), (1, 1), (1, 0, 2, 1), 4),
    (9, 5, 16, 3, 2, 3, (2, 1), (2, 2), (0, 2, 1, 0), 0),
    (4, 4, 3, 17, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), 7),
])
def test_feature_program_matches_numpy(case):
    h, w, c, k, r, s, stride, dilation, pad, clip = case
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.integers(-128, 128, (h, w, c)).astype(np.int8)
    wt = rng.integers(-128, 128, (k, r, s, c)).astype(np.int8)
    regs, (p, q) = program(h=h, w=w, c=c, k=k, r=r, s=s, stride=stride, dilation=dilation,
                           pad=pad, pad_value=-37, clip=clip)
    mem = SparseMemory()
    write_cube(mem, 0x1000, w * 8, w * 8 * h, x)
    place_weights_by_hand(mem, 0x100000, wt)
    want = _numpy_feature(x, wt, stride, pad, dilation, -37, clip)
    core = run_conv_core(regs, mem)
    assert core.to_sdp.shape == (p, q, k)
    assert np.array_equal(core.to_sdp, want)
    run = run_conv(regs, mem)                       # identity SDP: int8 saturation only
    assert np.array_equal(run.out, np.clip(want, -128, 127))
    assert np.array_equal(read_cube(mem, 0x200000, q * 8, p * q * 8, p, q, k), run.out)


def test_image_program_matches_direct_convolution():
    """Image mode on R8G8B8A8 with x offset, left/right/top padding, stride 2x3 and means: CSC's
    channel extension must equal an ordinary R x S x 4 convolution of the padded, converted
    image (computed here with numpy from the bytes placed in memory)."""
    h, w, e, k, r, s, sy, sx = 7, 9, 4, 5, 3, 2, 2, 3
    top, left, right, pv = 1, 2, 1, 0x7E
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (h, w, 4)).astype(np.uint8)      # memory bytes A, B, G, R
    wt = rng.integers(-128, 128, (k, r, s * e)).astype(np.int8)  # channel-extended kernel
    regs, (p, q) = program(h=h, w=w, c=e, k=k, r=r, s=s, stride=(sy, sx), pad=(top, left, 0, right),
                           pad_value=pv, pixel="T_R8G8B8A8", x_offset=2, cvt=(0, 3, 2),
                           means=(10, 20, 30, 40), clip=2)
    mem = SparseMemory()
    line = (2 + w) * 4
    for y in range(h):
        mem.write(0x1000 + y * line + 2 * 4, img[y].tobytes())
    place_weights_by_hand(mem, 0x100000, wt.reshape(k, r, 1, s * e))
    rgba = img[..., ::-1].astype(np.int64)                       # R, G, B, A
    conv = (rgba - np.array([10, 20, 30, 40])) * 3
    conv = np.clip(np.sign(conv) * ((np.abs(conv) + 2) >> 2), -128, 127)
    padded = np.full((h, left + w + right, e), pv, np.int64)
    padded[:, left:left + w] = conv
    acc = reference_conv(padded[None], wt.reshape(k, r, s, e).astype(np.int64), (sy, sx),
                         (top, 0, r, 0), (1, 1), 1, pv)[0][:p, :q]
    want = np.clip(np.sign(acc) * ((np.abs(acc) + 2) >> 2), -2**31, 2**31 - 1)
    core = run_conv_core(regs, mem)
    assert core.x.shape == (h, q, s * e)
    assert np.array_equal(core.to_sdp, want)
    assert np.array_equal(run_conv(regs, mem).out, np.clip(want, -128, 127))


# ---------------------------------------------------------------------- errors
BASE = dict(h=2, w=2, c=8, k=1, r=1, s=1)


@pytest.mark.parametrize("extra, pixel, message", [
    ({"CDMA.D_MISC_CFG": 1}, None, r"CDMA\.D_MISC_CFG\.CONV_MODE = WINOGRAD: only DIRECT"),
    ({"CDMA.D_WEIGHT_FORMAT": 1}, None,
     r"CDMA\.D_WEIGHT_FORMAT\.WEIGHT_FORMAT = COMPRESSED: only UNCOMPRESSED"),
    ({"CDMA.D_MISC_CFG": 2 << 8 | 2 << 12}, None, r"PROC_PRECISION = FP16: only INT8"),
    ({"CSC.D_MISC_CFG": 1 << 8}, None, r"CSC\.D_MISC_CFG\.IN_PRECISION = INT16: only INT8"),
    ({"CDMA.D_BATCH_NUMBER": 3}, None, r"CDMA\.D_BATCH_NUMBER\.BATCHES = 3: only 0"),
    ({"CSC.D_POST_Y_EXTENSION": 1}, None, r"CSC\.D_POST_Y_EXTENSION\.Y_EXTENSION = 1"),
    ({}, "T_R16", r"PIXEL_FORMAT = T_R16: modelled formats .*T_A8B8G8R8"),
    ({}, "T_Y8___U8V8_N444", r"PIXEL_FORMAT = T_Y8___U8V8_N444"),
    ({"CDMA.D_DATAIN_FORMAT": 1 | 12 << 8 | 1 << 16}, "T_A8B8G8R8",
     r"PIXEL_MAPPING = RESERVED_LINEAR: only PITCH_LINEAR"),
    ({"CDMA.D_WEIGHT_SIZE_1": 4}, None, r"CDMA\.D_WEIGHT_SIZE_1\.WEIGHT_KERNEL = 4: must equal"),
    ({"CACC.D_DATAOUT_SIZE_1": 2}, None, r"CACC\.D_DATAOUT_SIZE_1\.DATAOUT_CHANNEL = 2"),
    ({"CDMA.D_LINE_STRIDE": 4}, "T_A8B8G8R8", r"CDMA\.D_LINE_STRIDE\.LINE_STRIDE = 4: must hold"),
])
def test_unsupported_registers_are_named(extra, pixel, message):
    kw = dict(BASE, c=4 if pixel in PIXEL_FORMATS else (1 if pixel else 8))
    regs, _ = program(**kw, pixel=pixel, extra=extra)
    with pytest.raises(ConfigError, match=message):
        run_conv(regs, SparseMemory())


def test_sdp_cube_must_be_caccs():
    regs, _ = program(**BASE, extra={"SDP.D_DATA_CUBE_WIDTH": 5})
    with pytest.raises(ConfigError, match=r"SDP\.D_DATA_CUBE_WIDTH\.WIDTH = 5: .*must be 1"):
        run_conv(regs, SparseMemory())


def test_outputs_past_the_input_read_the_pad_value():
    """CSC walks DATAOUT_SIZE (here 1x3 from a 1x1 input, 1x1 kernel of 2, no padding
    registers): columns 1 and 2 read past the cube and get the pad value -4. Outputs:
    5 * 2 = 10, then -4 * 2 = -8 twice."""
    regs, _ = program(h=1, w=1, c=1, k=1, r=1, s=1, pad_value=-4,
                      extra={"CSC.D_DATAOUT_SIZE_0": 2, "CACC.D_DATAOUT_SIZE_0": 2,
                             "SDP.D_DATA_CUBE_WIDTH": 2, "SDP.D_DST_LINE_STRIDE": 24,
                             "SDP.D_DST_SURFACE_STRIDE": 24})
    mem = SparseMemory()
    mem.write(0x1000, bytes([5]))
    place_weights_by_hand(mem, 0x100000, np.full((1, 1, 1, 1), 2, np.int8))
    run = run_conv(regs, mem)
    assert run.out[0, :, 0].tolist() == [10, -8, -8] and run.mismatches == 0
