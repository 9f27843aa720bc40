"""Lab 3 (examples/labs/03_quantization): the sheet's claims against numpy gold models.

* int8: the lab's bit-exact output equals an independent numpy computation of NVDLA's
  requantization (symmetric max-abs scales, per-channel weights, round half away from zero,
  ``clamp(relu(round((A + B 2**ls) s / 2**sh)))`` in exact integers), registers included;
* int16: the same at 16 bits with the CACC truncate, registers and outputs equal;
* fp16: SQNR within 0.2 dB of numpy float16 arithmetic (operands and output rounded to fp16);
* SQNR ordering (per-tensor int8 < int8 < fp16, int8 < int16) and the "rounding only" floor
  equal to the uniform-quantization formula ``10 log10(E[y^2] / (p * step^2 / 12))``;
* cycles: int16/fp16 MAC cycles are twice int8's, the ratio of nv_full's MAC counts
  (64 x 32 int8, 64 x 16 16-bit, NVDLA spec/defs); a MAC-bound total is startup + MAC + drain;
* requant.py: the bit-exact SDP equals the contract for register edits, and the edits have the
  effect the sheet predicts.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest
from labload import LABS, load_script

LAB = LABS / "03_quantization"


precisions = load_script(LAB, "precisions")
# requant.py imports its sibling as ``precisions`` (the script folder is on sys.path when run).
sys.modules.setdefault("precisions", precisions)
requant = load_script(LAB, "requant")

SIZE, C, K, SEED = 10, 64, 32, 11


def rha(v):
    """Round half away from zero, float64."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def irshift(n, k):
    """Exact integer round-half-away right shift on int64 arrays."""
    n = np.asarray(n, np.int64)
    return n if k == 0 else np.sign(n) * ((np.abs(n) + (1 << (k - 1))) >> k)


def conv_exact(x_q, w_q):
    """Integer 3x3 'same' convolution (NHWC x KRSC), exact via float64 (sums < 2**53)."""
    n, h, w, c = x_q.shape
    xp = np.pad(x_q.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, w, w_q.shape[0]))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nhwc,kc->nhwk", xp[:, r:r + h, s:s + w],
                             w_q[:, r, s].astype(np.float64))
    assert np.abs(out).max() < 2**53
    return out.astype(np.int64)


def folded(layer):
    """Batch-norm folding by hand: g = gamma / sqrt(var + eps), W' = W g,
    b' = (b - mean) g + beta."""
    g = layer.bn_gamma / np.sqrt(layer.bn_var + layer.bn_eps)
    return layer.weight * g[:, None, None, None], (layer.bias - layer.bn_mean) * g + layer.bn_beta


def gold_requant(x, layer, ref, qmax):
    """NVDLA's symmetric per-channel requantization at ``qmax`` (127 or 32767), in numpy."""
    w, b = folded(layer)
    s_x, s_y = np.abs(x).max() / qmax, np.abs(ref).max() / qmax
    s_w = np.abs(w).reshape(len(b), -1).max(axis=1) / qmax
    x_q = np.clip(rha(x / s_x), -qmax, qmax).astype(np.int64)
    w_q = np.clip(rha(w / s_w[:, None, None, None]), -qmax, qmax).astype(np.int64)
    acc = conv_exact(x_q, w_q)
    t = 0
    if qmax > 127:   # int16: truncate the worst case into int32
        bound = qmax * np.abs(w_q).reshape(len(b), -1).sum(axis=1).max()
        t = min(x for x in range(64) if bound <= (2**31 - 1) * 2**x)
    a_t = irshift(acc, t)
    m = s_x * s_w * 2.0**t / s_y
    sh = max(x for x in range(49) if rha(m.max() * 2.0**x) <= 32767)
    s = rha(m * 2.0**sh).astype(np.int64)
    b_acc = b / (s_x * s_w * 2.0**t)
    ls = min(x for x in range(17) if np.abs(rha(b_acc / 2.0**x)).max() <= 32767)
    bb = rha(b_acc / 2.0**ls).astype(np.int64)
    out = np.maximum(irshift((a_t + (bb << ls)) * s, sh), 0)
    out = np.clip(out, -qmax - 1, qmax)
    return {"out": out * s_y, "t": t, "sh": sh, "ls": ls, "s": s, "B": bb, "s_y": s_y}


def sqnr(out, ref):
    return 10 * math.log10(np.sum(ref**2) / np.sum((out - ref) ** 2))


@pytest.fixture(scope="module")
def lab():
    layer, x = precisions.make_layer(SIZE, C, K, SEED)
    return layer, x, precisions.run_precisions(layer, x)


def test_reference_is_the_float_layer(lab):
    layer, x, res = lab
    w, b = folded(layer)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = sum(np.einsum("nhwc,kc->nhwk", xp[:, r:r + SIZE, s:s + SIZE], w[:, r, s])
              for r in range(3) for s in range(3))
    np.testing.assert_allclose(res["reference"], np.maximum(ref + b, 0), rtol=1e-12, atol=1e-12)


def test_int8_equals_numpy_gold(lab):
    layer, x, res = lab
    gold = gold_requant(x, layer, res["reference"], 127)
    row = res["rows"]["int8"]
    q = row["q"]
    assert (q.mul_shift_value, q.alu_shift_value) == (gold["sh"], gold["ls"])
    np.testing.assert_array_equal(q.scale_operand, gold["s"])
    np.testing.assert_array_equal(q.bias_operand, gold["B"])
    np.testing.assert_array_equal(row["out"], gold["out"])
    assert row["sqnr_db"] == pytest.approx(sqnr(gold["out"], res["reference"]), abs=1e-9)


def test_int16_equals_numpy_gold(lab):
    layer, x, res = lab
    gold = gold_requant(x, layer, res["reference"], 32767)
    row = res["rows"]["int16"]
    q = row["q"]
    assert gold["t"] > 0     # 16x16-bit sums over 3x3x64 do not fit int32
    assert (q.clip_truncate, q.mul_shift_value, q.alu_shift_value) == \
        (gold["t"], gold["sh"], gold["ls"])
    np.testing.assert_array_equal(q.scale_operand, gold["s"])
    np.testing.assert_array_equal(q.bias_operand, gold["B"])
    np.testing.assert_array_equal(row["out"], gold["out"])


def test_fp16_close_to_numpy_float16(lab):
    layer, x, res = lab
    w, b = folded(layer)
    x16, w16 = x.astype(np.float16).astype(np.float64), w.astype(np.float16).astype(np.float64)
    xp = np.pad(x16, ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = sum(np.einsum("nhwc,kc->nhwk", xp[:, r:r + SIZE, s:s + SIZE], w16[:, r, s])
               for r in range(3) for s in range(3))
    y = np.maximum(conv + b.astype(np.float16).astype(np.float64), 0)
    y = y.astype(np.float16).astype(np.float64)
    assert res["rows"]["fp16"]["sqnr_db"] == pytest.approx(sqnr(y, res["reference"]), abs=0.2)


def test_sqnr_ordering_and_rounding_floor(lab):
    layer, x, res = lab
    rows, ref = res["rows"], res["reference"]
    db = {name: r["sqnr_db"] for name, r in rows.items()}
    assert db["int8 per-tensor"] < db["int8"] < db["fp16"]
    assert db["int8"] < db["int16"]
    for name, r in rows.items():            # the hardware never beats one rounding of the truth
        assert r["sqnr_db"] <= r["rounding_only_sqnr_db"] + 0.05, name
    # Uniform quantization noise step^2 / 12 on the nonzero outputs (ReLU zeros are exact).
    for name, qmax in (("int8", 127), ("int16", 32767)):
        step = np.abs(ref).max() / qmax
        formula = 10 * math.log10(np.mean(ref**2) / (np.mean(ref > 0) * step**2 / 12))
        assert rows[name]["rounding_only_sqnr_db"] == pytest.approx(formula, abs=0.5), name
    # A 16-bit format gains about 20 log10(32767 / 127) = 48 dB of rounding floor over int8.
    gain = rows["int16"]["rounding_only_sqnr_db"] - rows["int8"]["rounding_only_sqnr_db"]
    assert gain == pytest.approx(20 * math.log10(32767 / 127), abs=0.5)


def test_cycles_ratio_is_the_mac_rate_ratio():
    from hw.nvdla.config import load_nvdla_config
    cfg = load_nvdla_config("nv_full")
    # NVDLA nv_full spec/defs: atomic C 64 x atomic K 32 int8 MACs; 16-bit fuses pairs.
    assert (cfg.macs("int8"), cfg.macs("int16"), cfg.macs("fp16")) == (64 * 32, 64 * 16, 64 * 16)
    cyc = precisions.layer_cycles(28, 128, 128)
    macs = 28 * 28 * 128 * 128 * 9
    for p in ("int8", "int16", "fp16"):
        assert cyc[p]["mac_cycles"] == macs // cfg.macs(p)
        assert cyc[p]["bound"] == "mac"
        assert cyc[p]["total"] == math.ceil(cyc[p]["startup"] + cyc[p]["mac_cycles"]
                                            + cyc[p]["drain"])
    assert cyc["int16"]["mac_cycles"] / cyc["int8"]["mac_cycles"] == \
        cfg.macs("int8") / cfg.macs("int16") == 2
    assert cyc["fp16"]["total"] == cyc["int16"]["total"]
    assert 1.9 < cyc["int16"]["total"] / cyc["int8"]["total"] < 2.0


@pytest.fixture(scope="module")
def rq():
    layer, x, ref, q, acc, base = requant.setup(SIZE, C, K, SEED)
    return ref, q, acc, base


def _edit(base, **kw):
    return dataclasses.replace(base, **kw)


def test_requant_hardware_equals_contract(rq):
    ref, q, acc, base = rq
    s = base.scale.copy()
    s[3] = 20000
    edits = [base, _edit(base, mul_shift=base.mul_shift + 1),
             _edit(base, clip_truncate=4, mul_shift=base.mul_shift - 4),
             _edit(base, cvt_scale=3, cvt_shift=1), _edit(base, scale=s),
             _edit(base, cvt_offset=-5, cvt_scale=-2, cvt_shift=3)]
    for r in edits:
        np.testing.assert_array_equal(requant.hardware(acc, q.sdp, r), requant.contract(acc, r))


def test_requant_edits_have_the_predicted_effect(rq):
    ref, q, acc, base = rq
    out = requant.hardware(acc, q.sdp, base).astype(np.int64)
    # One more bit of MUL shift: every output is the old register value halved, rounded.
    half = requant.hardware(acc, q.sdp, _edit(base, mul_shift=base.mul_shift + 1))
    v = (acc + (base.bias << base.alu_shift)) * base.scale
    expected = np.clip(np.maximum(irshift(v, base.mul_shift + 1), 0), -128, 127)
    np.testing.assert_array_equal(half, expected)
    half = half.astype(np.int64)
    assert half.sum() / out.sum() == pytest.approx(0.5, abs=0.01)
    # x 2 then >> 1 in the output converter is exact: nothing changes.
    same = requant.hardware(acc, q.sdp, _edit(base, cvt_scale=2, cvt_shift=1))
    np.testing.assert_array_equal(same, out)
    # Truncating 4 bits in CACC while shifting 4 fewer in SDP leaves the bias 16x too big,
    # unless the ALU shift drops by 4 too; then outputs move by at most 1 LSB (double rounding).
    if base.alu_shift >= 4:
        regs = _edit(base, clip_truncate=4, mul_shift=base.mul_shift - 4,
                     alu_shift=base.alu_shift - 4)
        moved = requant.hardware(acc, q.sdp, regs).astype(np.int64)
        assert np.abs(moved - out).max() <= 1


def test_requant_cli_errors(capsys):
    small = ["--size", "4", "--channels", "8", "--kernels", "8"]
    assert requant.main(["--mul-shift", "99", *small]) == 2
    assert "BS_MUL_SHIFT_VALUE must be in 0..48" in capsys.readouterr().err
    assert requant.main(["--scale", "200=1", *small]) == 2
    assert "channel 200 must be in 0..7" in capsys.readouterr().err
    assert precisions.main(["--size", "1"]) == 2
    assert "--size = 1: must be an integer in 3..224" in capsys.readouterr().err
