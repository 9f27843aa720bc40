"""int8 per-channel quantization pass (hw/nvdla/quant.py): the register parameters reproduce
the float multipliers within the bounds proved in the module docstring, the bit-exact int8
output matches round(float result / out_scale) within the documented rounding budget, exactly
on a layer built from powers of two, saturates correctly, and per-channel beats per-tensor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hw.nvdla.quant import (
    FloatConv, calibrate_scale, error_stages, quantization_report, quantize_activations,
    quantize_conv, run_int8_conv,
)


def _round(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def bn_layer(seed, k=8, c=6, gamma_spread=(0.02, 2.0), relu=True, bias_sigma=0.5):
    """A 3x3 conv with batch-norm whose gammas spread the channel ranges (log-uniform)."""
    rng = np.random.default_rng(seed)
    gamma = np.exp(rng.uniform(np.log(gamma_spread[0]), np.log(gamma_spread[1]), k))
    return FloatConv(rng.normal(0, 1, (k, 3, 3, c)), rng.normal(0, bias_sigma, k),
                     bn_gamma=gamma, bn_beta=rng.normal(0, 0.2, k),
                     bn_mean=rng.normal(0, 0.3, k), bn_var=rng.uniform(0.5, 2, k), relu=relu,
                     padding=(1, 1, 1, 1)), rng.normal(0, 1, (2, 7, 7, c))


def test_batch_norm_folding_matches_the_unfolded_layer():
    layer, x = bn_layer(3, relu=False)
    plain = FloatConv(layer.weight, layer.bias, padding=(1, 1, 1, 1)).forward(x)
    g = layer.bn_gamma / np.sqrt(layer.bn_var + layer.bn_eps)
    assert np.allclose(layer.forward(x), (plain - layer.bn_mean) * g + layer.bn_beta,
                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_registers_reproduce_the_float_multipliers_within_the_bound(seed, per_channel):
    layer, x = bn_layer(seed, bias_sigma=[0.5, 50.0, 5000.0][seed])  # seeds 1, 2: alu_shift > 0
    q = quantize_conv(layer, calibrate_scale(x), calibrate_scale(layer.forward(x)),
                      per_channel=per_channel)
    sh, ls = q.mul_shift_value, q.alu_shift_value
    # Multiplier: |s/2^sh - M| <= 2^-(sh+1); the shift is maximal (one more overflows int16).
    assert np.all(q.multiplier_error <= 2.0 ** -(sh + 1))
    assert 16384 <= q.scale_operand.max() <= 32767 and q.scale_operand.min() >= 1
    assert sh == 48 or _round(q.multiplier.max() * 2.0 ** (sh + 1)) > 32767
    # relative error <= max(M) / (32767.5 M[k]) (module docstring: <= 2^-15 max(M)/M[k])
    assert np.all(q.multiplier_error / q.multiplier
                  <= q.multiplier.max() / (32767.5 * q.multiplier))
    # Bias: |B 2^ls - b_acc| <= 2^(ls-1); the shift is minimal; B fits int16.
    assert np.all(q.bias_error <= 2.0 ** (ls - 1))
    assert np.abs(q.bias_operand).max() <= 32767
    assert ls == 0 or np.abs(_round(q.bias_acc / 2.0 ** (ls - 1))).max() > 32767
    if seed:
        assert ls > 0
    # The SDP registers carry exactly these operands.
    bs = q.sdp.bs
    assert (bs.alu_shift_value, bs.mul_shift_value) == (ls, sh)
    assert np.array_equal(bs.alu_data, q.bias_operand)
    assert np.array_equal(bs.mul_data, q.scale_operand)
    assert bs.relu_bypass is False and q.sdp.bn.bypass and q.sdp.ew.bypass


def test_hardware_output_is_the_closed_form_of_the_proof():
    """Bound 4 of the module docstring: int8 = clamp(relu(round((A + B 2^ls) s / 2^sh)))."""
    layer, x = bn_layer(5, bias_sigma=300.0)
    q = quantize_conv(layer, calibrate_scale(x), calibrate_scale(layer.forward(x)) / 3)
    st = error_stages(layer, q, x)
    want = np.clip(_round(q.register_value(st["acc"])), -128, 127)
    got = run_int8_conv(st["x_q"], q)
    assert got.dtype == np.int8 and np.array_equal(got, want)
    assert np.mean(got == 127) > 0.01  # the scale / 3 makes some outputs saturate
    assert np.array_equal(st["hardware"], got * q.output_scale)


@pytest.mark.parametrize("seed", [0, 4])
def test_int8_equals_rounded_float_result_except_within_the_budget(seed):
    layer, x = bn_layer(seed, k=16, relu=seed == 0)
    q = quantize_conv(layer, calibrate_scale(x), calibrate_scale(layer.forward(x)))
    st = error_stages(layer, q, x)
    v = st["weight"] / q.output_scale  # the float result with quantized input and weights
    got = run_int8_conv(st["x_q"], q).astype(np.float64)
    ideal = np.clip(_round(v), -128, 127)
    bound = q.requant_bound(st["acc"]) + 1e-9  # + float64 slack of v itself
    assert np.all(np.abs(st["register"] / q.output_scale - v) <= bound)
    # Away from a rounding boundary (distance > bound) the result is exact; near one, off by 1.
    near = np.abs(np.abs(v - np.floor(v)) - 0.5) <= bound
    assert np.array_equal(got[~near], ideal[~near])
    assert np.all(np.abs(got - ideal) <= 1)
    assert np.mean(got != ideal) < 0.01


def exact_layer(relu):
    """Every value is a power-of-two multiple, so the pass and float64 are exact:
    s_x = 2^-4, s_w[k] = 2^-(3+k) (each kernel holds one +-127), s_y = 2^-2, biases
    integer multiples of s_x s_w[k]. M[k] = 2^-(5+k) -> s = 2^14 >> k at shift 19."""
    rng = np.random.default_rng(7)
    k, c = 4, 5
    w_int = rng.integers(-127, 128, (k, 3, 3, c))
    w_int[:, 0, 0, 0] = [127, -127, 127, -127]
    s_w = 2.0 ** -(3 + np.arange(k))
    b = rng.integers(-3000, 3000, k) * (2.0 ** -4 * s_w)
    layer = FloatConv(w_int * s_w[:, None, None, None], b, relu=relu)
    x = rng.integers(-127, 128, (1, 6, 6, c)) * 2.0 ** -4
    return layer, x, 2.0 ** -4, 2.0 ** -2


@pytest.mark.parametrize("relu", [False, True])
def test_exact_layer_gives_round_of_float_result_and_saturates_at_the_int8_limits(relu):
    layer, x, s_x, s_y = exact_layer(relu)
    q = quantize_conv(layer, s_x, s_y)
    assert q.mul_shift_value == 19 and q.scale_operand.tolist() == [16384, 8192, 4096, 2048]
    assert q.alu_shift_value == 0 and np.all(q.bias_error == 0)
    ref = layer.forward(x) / s_y
    got = run_int8_conv(quantize_activations(x, s_x), q)
    want = np.clip(_round(ref), -128, 127)
    assert np.array_equal(got, want)
    # Saturation: everything above 127.5 is 127, below -128.5 is -128 (0 with ReLU).
    assert np.sum(ref > 127.5) > 0 and np.all(got[ref > 127.5] == 127)
    if relu:
        assert got.min() == 0
    else:
        assert np.sum(ref < -128.5) > 0 and np.all(got[ref < -128.5] == -128)
    r = quantization_report(layer, q, x)
    sat = np.mean((_round(ref) > 127) | (_round(ref) < -128))
    assert r.saturated_fraction == pytest.approx(sat) and sat > 0
    assert r.budget["input_rounding"]["max_abs"] == 0
    assert r.budget["weight_rounding"]["max_abs"] == 0
    assert r.budget["requant_rounding"]["max_abs"] == 0
    err = got * s_y - layer.forward(x)
    assert r.max_abs_error == pytest.approx(np.abs(err).max())
    assert r.rms_error == pytest.approx(np.sqrt(np.mean(err ** 2)))


def test_report_budget_telescopes_and_sqnr_is_the_definition():
    layer, x = bn_layer(11)
    q = quantize_conv(layer, calibrate_scale(x), calibrate_scale(layer.forward(x)))
    r = quantization_report(layer, q, x)
    st = error_stages(layer, q, x)
    err = st["hardware"] - st["reference"]
    assert r.sqnr_db == pytest.approx(10 * math.log10(np.sum(st["reference"] ** 2)
                                                      / np.sum(err ** 2)))
    parts = sum(st[b] - st[a] for a, b in (("reference", "input"), ("input", "weight"),
                                            ("weight", "register"), ("register", "hardware")))
    assert np.allclose(parts, err, atol=1e-12)
    # Output rounding is at most half a step where the int8 range does not saturate; max-abs
    # calibration on the float output still lets a few register values round to 128.
    reg = st["register"] / q.output_scale
    inside = (reg < 127.5) & (reg > -128.5)
    assert np.all(np.abs(st["hardware"] - st["register"])[inside] <= 0.5 * q.output_scale + 1e-12)
    assert r.saturated_fraction == pytest.approx(np.mean(~inside)) and r.saturated_fraction < 0.01
    assert "per-channel: SQNR" in r.as_text()


def test_per_channel_beats_per_tensor_on_spread_channel_ranges():
    """Gammas spread 100x: one per-tensor weight scale gives the small channels few weight
    levels. Measured (seed 21, K = 16, no ReLU): SQNR 35.12 vs 33.10 dB, worst channel 7.85 vs
    6.37 dB, weight-rounding RMS 2.41x smaller per channel. The common int8 output scale's
    rounding (RMS 0.082, the largest term for both) caps the gain; asserted with margin."""
    layer, x = bn_layer(21, k=16, gamma_spread=(0.02, 2.0), relu=False)
    s_x, s_y = calibrate_scale(x), calibrate_scale(layer.forward(x))
    pc = quantization_report(layer, quantize_conv(layer, s_x, s_y), x)
    pt = quantization_report(layer, quantize_conv(layer, s_x, s_y, per_channel=False), x)
    assert pc.sqnr_db - pt.sqnr_db > 1.5
    assert pc.min_channel_sqnr_db - pt.min_channel_sqnr_db > 1.0
    assert pt.budget["weight_rounding"]["rms"] > 2.0 * pc.budget["weight_rounding"]["rms"]
    # Same input, output scale and requantization structure: only the weights differ.
    assert pc.budget["input_rounding"] == pt.budget["input_rounding"]


def test_calibration():
    v = np.arange(1, 101, dtype=float) * np.where(np.arange(100) % 2, -1, 1)
    assert calibrate_scale(v) == 100 / 127  # max |v|
    assert calibrate_scale(v, "percentile", 50) == pytest.approx(50.5 / 127)  # numpy linear
    assert quantize_activations([0.5, -0.5, 1.49, 300.0, -300.0], 1.0).tolist() == \
        [1, -1, 1, 127, -127]


@pytest.mark.parametrize("call, match", [
    (lambda L: quantize_conv(L, 0.0, 1.0), "input_scale = 0.0: must be a finite number > 0"),
    (lambda L: quantize_conv(L, 1.0, float("nan")), "output_scale = nan"),
    (lambda L: quantize_conv(L, 1.0, -2), "output_scale = -2"),
    (lambda L: quantize_conv(L, True, 1.0), "input_scale = True"),
    (lambda L: quantize_conv(L, 1.0, 1e-9), "exceeds the int16 MUL operand"),
    (lambda L: quantize_conv("conv", 1.0, 1.0), "layer = 'conv': must be a FloatConv"),
    (lambda L: FloatConv(np.ones((3, 3, 3))), r"FloatConv.weight: shape \(3, 3, 3\)"),
    (lambda L: FloatConv(np.ones((2, 1, 1, 1)), [1.0]), r"FloatConv.bias: shape \(1,\): must "
                                                         r"be \(2,\)"),
    (lambda L: FloatConv(np.ones((2, 1, 1, 1)), bn_gamma=[1, 1]), "batch-norm needs all of"),
    (lambda L: FloatConv(np.ones((1, 1, 1, 1)), bn_gamma=[1], bn_beta=[0], bn_mean=[0],
                         bn_var=[-1]), "bn_var: value -1.0 < 0"),
    (lambda L: FloatConv(np.zeros((2, 1, 1, 1))).forward(np.ones((1, 2, 2, 3))),
     "x: 3 channels; the layer's weights have 1"),
    (lambda L: quantize_conv(FloatConv(np.zeros((2, 1, 1, 1))), 1.0, 1.0), "all weights are zero"),
    (lambda L: calibrate_scale(np.zeros(4)), "all zero"),
    (lambda L: calibrate_scale([1.0], "mse"), "method = 'mse'"),
    (lambda L: calibrate_scale([1.0], "percentile", 0), "percentile = 0"),
    (lambda L: run_int8_conv(np.zeros((1, 4, 4, 2), np.int8), quantize_conv(L, 1.0, 1.0)),
     r"x_q: shape \(1, 4, 4, 2\): must be \(N, H, W, 3\)"),
])
def test_bad_input_is_a_clear_error(call, match):
    layer = FloatConv(np.random.default_rng(0).normal(size=(2, 3, 3, 3)), [0.1, -0.1])
    with pytest.raises(ValueError, match=match):
        call(layer)


def test_register_limits_are_errors():
    # Channel ranges 1e6 apart: the small channel's multiplier rounds to 0 at the common shift.
    w = np.ones((2, 1, 1, 1)) * np.array([1.0, 1e-6])[:, None, None, None]
    with pytest.raises(ValueError, match=r"channel 1: multiplier .* rounds to 0"):
        quantize_conv(FloatConv(w), 1.0, 1.0, per_channel=True)
    # Bias of 1e12 accumulator units cannot be int16 << 16.
    with pytest.raises(ValueError, match="channel 0: bias .* beyond int16 << 16"):
        quantize_conv(FloatConv(np.ones((1, 1, 1, 1)), [1e12]), 1.0, 1.0)
    # 140000 taps of 127 * 128 overflow the int32 the SDP receives.
    with pytest.raises(ValueError, match=r"R\*S\*C = 140000: the CACC sum can reach"):
        quantize_conv(FloatConv(np.ones((1, 1, 1, 140000))), 1.0, 1.0)


def test_all_zero_kernel_takes_the_tensor_scale_and_outputs_its_bias():
    # Kernel 1 is all zero: s_w[1] = s_w[0] = 2/127; its output is the bias alone,
    # 0.3 / s_y = 0.3 / 0.1 = 3 (the register rounding error is far below the 0.5 margin).
    w = np.zeros((2, 1, 1, 2))
    w[0, 0, 0] = [2.0, -1.0]
    layer = FloatConv(w, [0.0, 0.3])
    q = quantize_conv(layer, 1 / 64, 0.1)
    assert q.weight_scale.tolist() == [2 / 127, 2 / 127] and not q.weight_q[1].any()
    x = np.random.default_rng(1).integers(-127, 128, (1, 3, 3, 2)).astype(np.int8)
    out = run_int8_conv(x, q)
    assert np.all(out[..., 1] == 3)
