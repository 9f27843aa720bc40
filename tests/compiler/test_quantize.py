"""Quantization and N:M pruning (compiler/quantize.py) against their closed forms, and the
quantized GEMM on the register-level array against the fp64 GEMM of the dequantized operands."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.quantize import (INT_RANGES, QuantSpec, dequantize, prune_n_m, ptq_report,
                               quantize, quantized_gemm, sqnr_db)
from hw.numerics import FLOAT_FORMATS
from hw.systolic.config import ArrayConfig


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_symmetric_integer_scales_and_error_are_their_closed_forms(dtype):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 12))
    qmax = INT_RANGES[dtype][1]
    t = quantize(w, QuantSpec(dtype, "tensor"))
    assert t.scale == pytest.approx(np.abs(w).max() / qmax) and not t.zero_point.any()
    assert t.values.min() >= -qmax and t.values.max() <= qmax
    assert np.abs(dequantize(t) - w).max() <= t.scale / 2 + 1e-15     # round to nearest
    c = quantize(w, QuantSpec(dtype, "channel"), axis=-1)
    np.testing.assert_allclose(c.scale.ravel(), np.abs(w).max(axis=0) / qmax)
    assert (np.abs(dequantize(c) - w) <= c.scale / 2 + 1e-15).all()


def test_asymmetric_int8_covers_min_to_max_with_an_exact_zero():
    x = np.append(np.linspace(-0.5, 3.0, 1001), 0.0)
    q = quantize(x, QuantSpec("int8", "tensor", symmetric=False))
    assert q.scale == pytest.approx(3.5 / 255)
    assert q.values.min() == -128 and q.values.max() == 127
    assert q.values[-1] == q.zero_point and dequantize(q)[-1] == 0.0   # 0 stays exactly 0
    assert np.abs(dequantize(q) - x).max() <= q.scale / 2 + 1e-12


def test_uniform_full_scale_sqnr_is_6_02_bits_plus_the_textbook_constant():
    """A uniform signal over the full symmetric int8 range: noise step^2 / 12, so SQNR =
    10 log10((A^2 / 3) / (step^2 / 12)) with step = 2A / 254 (the range -127..127): 48.06 dB."""
    x = np.random.default_rng(1).uniform(-1, 1, 200_000)
    x[0] = 1.0
    got = sqnr_db(x, dequantize(quantize(x, QuantSpec("int8"))))
    want = 10 * math.log10((1 / 3) / ((2 / 254) ** 2 / 12))
    assert got == pytest.approx(want, abs=0.1)
    assert sqnr_db(x, x) == float("inf")


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_scales_put_the_largest_magnitude_on_the_formats_largest_value(dtype):
    w = np.random.default_rng(2).standard_normal((32, 8))
    q = quantize(w, QuantSpec(dtype, "channel"))
    fmt = FLOAT_FORMATS[dtype]
    np.testing.assert_allclose(np.abs(q.values).max(axis=0), fmt.max)
    # every value is one of the format's (it survives a round trip through its dtype)
    assert np.array_equal(q.values.astype(fmt.dtype).astype(np.float32), q.values)
    rel = np.abs(dequantize(q) - w) / np.maximum(np.abs(w), 1e-30)
    normal = np.abs(q.values) >= 2.0 ** (2 - 2 ** (fmt.exponent_bits - 1))
    assert (rel[normal] <= 2.0 ** -(fmt.fraction_bits + 1) + 1e-12).all()   # half an ulp


def test_n_m_pruning_keeps_the_largest_n_of_every_group_of_m():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 5))
    for n, m in ((2, 4), (1, 4), (4, 8)):
        pruned, mask = prune_n_m(w, n, m, axis=0)
        groups = np.abs(w).reshape(16 // m, m, 5)
        kept = mask.reshape(16 // m, m, 5)
        assert (kept.sum(axis=1) == n).all() and mask.mean() == n / m
        # every kept magnitude is >= every dropped one in its group
        lo_kept = np.where(kept, groups, np.inf).min(axis=1)
        hi_drop = np.where(~kept, groups, -np.inf).max(axis=1)
        assert (lo_kept >= hi_drop).all()
        assert np.array_equal(pruned, np.where(mask, w, 0))
    with pytest.raises(ValueError, match="multiple of M = 4"):
        prune_n_m(np.ones((6, 2)), 2, 4)


@pytest.mark.parametrize("dtype", ["int8", "int4", "fp8_e4m3", "fp8_e5m2", "bf16"])
def test_quantized_gemm_on_the_array_equals_the_dequantized_gemm(dtype):
    """The array multiplies the quantized values (integers exactly, floats into fp32) and the
    result is rescaled once: equal to the fp64 GEMM of the dequantized operands (to fp32's
    accumulation for the float formats)."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((9, 24)), rng.standard_normal((24, 7))
    qa = quantize(x, QuantSpec(dtype, "tensor"))
    qw = quantize(w, QuantSpec(dtype, "channel"), axis=-1)
    got = quantized_gemm(qa, qw, ArrayConfig(rows=4, cols=4, dataflow="ws", precision=dtype))
    want = dequantize(qa) @ dequantize(qw)
    tol = 1e-12 if dtype in INT_RANGES else 24 * 2.0 ** -24
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    with pytest.raises(ValueError, match="asymmetric"):
        quantized_gemm(quantize(x, QuantSpec("int8", symmetric=False)),
                       quantize(w, QuantSpec("int8")), ArrayConfig(precision="int8"))


def test_ptq_report_orders_the_formats_by_their_bits():
    """On the same seeded layers: bf16 > int8 > fp8 E4M3 > fp8 E5M2 > int4 in output SQNR
    (fraction bits 7 > 7-ish > 3 > 2; int4 has 3 magnitude bits over a Gaussian's range), and
    2:4 pruning halves the density and costs more than int8 quantization alone."""
    rng = np.random.default_rng(5)
    layers = [("fc1", rng.standard_normal((64, 32)) * 0.02),
              ("fc2", rng.standard_normal((32, 16)) * 0.02)]
    mean = {dt: np.mean([r["sqnr_db"] for r in ptq_report(layers, QuantSpec(dt, "channel"))])
            for dt in ("bf16", "int8", "fp8_e4m3", "fp8_e5m2", "int4")}
    assert mean["bf16"] > mean["int8"] > mean["fp8_e4m3"] > mean["fp8_e5m2"] > mean["int4"]
    pr = ptq_report(layers, QuantSpec("int8", "channel"), prune=(2, 4))
    assert all(r["density"] == 0.5 for r in pr)
    assert max(r["sqnr_db"] for r in pr) < mean["int8"]
    with pytest.raises(ValueError, match="dtype = 'int3'"):
        QuantSpec("int3")
    with pytest.raises(ValueError, match="only the integer types have a zero point"):
        QuantSpec("fp8_e4m3", symmetric=False)
