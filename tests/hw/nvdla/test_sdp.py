"""NVDLA SDP pipeline (hw/nvdla/sdp.py): against a plain-Python reference built from the
scalar numerics, and hand-computed vectors for every operand source (REG, PER_KERNEL,
PER_ELEMENT), the unit order and the output converter.

Rules (shared/reference/nvdla.md, C model cmod/hls/sdp/sdp_x.cpp, sdp_y_core.cpp, sdp_y_cvt.cpp):
order X1 -> X2 -> Y (MUL then ALU) -> output converter; Y's register operands are int32 and skip
the operand converter, Y's memory operands go through it unless *_CVT_BYPASS.
"""

from __future__ import annotations

import numpy as np
import pytest

from hw.nvdla.numerics import cvt_operand, cvt_out, sdp_x, sdp_y
from hw.nvdla.sdp import SdpCvtParams, SdpParams, SdpXParams, SdpYParams, sdp_apply
from hw.systolic.config import ConfigError

ALGO = {"MAX": 0, "MIN": 1, "SUM": 2, "EQL": 3}


# ------------------------------------------------------------------ plain-Python reference
def _x_operand(p: SdpXParams, op, idx):
    """idx = (n, h, w, k). Operand of one element, looked up by hand."""
    if getattr(p, f"{op}_src") == "REG":
        return getattr(p, f"{op}_operand")
    data = getattr(p, f"{op}_data")
    if p.data_mode == "PER_KERNEL":
        return int(data[idx[3]])
    return int(data[idx] if data.ndim == 4 else data[idx[1:]])


def _y_operand(p: SdpYParams, op, idx, mem):
    if getattr(p, f"{op}_src") == "REG" or mem is None:
        return getattr(p, f"{op}_operand")
    raw = int(mem[idx[3]] if p.data_mode == "PER_KERNEL" else
              (mem[idx] if mem.ndim == 4 else mem[idx[1:]]))
    if getattr(p, f"{op}_cvt_bypass"):
        return raw
    return int(cvt_operand(raw, getattr(p, f"{op}_cvt_offset"), getattr(p, f"{op}_cvt_scale"),
                           getattr(p, f"{op}_cvt_truncate")))


def reference(x, params: SdpParams, alu_mem=None, mul_mem=None):
    out = np.zeros(x.shape, np.int64)
    bits = 8 if params.out_precision == "INT8" else 16
    for idx in np.ndindex(x.shape):
        v = int(x[idx])
        for p in (params.bs, params.bn):
            v = int(sdp_x(v, p.bypass, p.alu_bypass, ALGO[p.alu_algo], _x_operand(p, "alu", idx),
                          p.alu_shift_value, p.mul_bypass, _x_operand(p, "mul", idx),
                          p.mul_shift_value, p.mul_prelu, p.relu_bypass))
        y = params.ew
        if not y.bypass:
            v = int(sdp_y(v, y.mul_bypass, _y_operand(y, "mul", idx, mul_mem), y.truncate,
                          y.mul_prelu, y.alu_bypass, ALGO[y.alu_algo],
                          _y_operand(y, "alu", idx, alu_mem)))
        c = params.cvt
        out[idx] = int(cvt_out(v, c.cvt_offset, c.cvt_scale, c.cvt_shift, bits))
    return out


SHAPE = (2, 3, 4, 5)


def _cases(rng):
    n, h, w, k = SHAPE
    i16 = lambda *s: rng.integers(-32768, 32768, s)
    i8 = lambda *s: rng.integers(-128, 128, s)
    yield "bias_bn_ew_int16", SdpParams(
        bs=SdpXParams(bypass=False, alu_bypass=False, alu_algo="SUM", alu_src="MEM",
                      alu_shift_value=7, mul_bypass=False, mul_src="MEM", mul_shift_value=13,
                      relu_bypass=False, alu_data=i16(k), mul_data=i16(k)),
        bn=SdpXParams(bypass=False, alu_bypass=False, alu_algo="MAX", alu_src="REG",
                      alu_operand=-300, mul_bypass=False, mul_src="MEM", mul_shift_value=5,
                      data_mode="PER_ELEMENT", data_size="ONE_BYTE", mul_data=i8(h, w, k)),
        ew=SdpYParams(bypass=False, alu_bypass=False, alu_algo="SUM", alu_src="MEM",
                      alu_cvt_bypass=False, alu_cvt_offset=-7, alu_cvt_scale=-3,
                      alu_cvt_truncate=2, mul_bypass=False, mul_src="REG",
                      mul_operand=-123457, truncate=9),
        cvt=SdpCvtParams(cvt_offset=-1000, cvt_scale=-777, cvt_shift=11),
        out_precision="INT16"), ("alu", i16(n, h, w, k))
    yield "prelu_min_int8", SdpParams(
        bs=SdpXParams(bypass=False, alu_bypass=True, mul_bypass=False, mul_src="MEM",
                      mul_prelu=True, mul_shift_value=3, alu_data=None, mul_data=i16(k)),
        bn=SdpXParams(bypass=False, alu_bypass=False, alu_algo="MIN", alu_src="MEM",
                      alu_shift_value=12, mul_bypass=True, mul_shift_value=2,
                      data_mode="PER_ELEMENT", alu_data=i16(n, h, w, k)),
        ew=SdpYParams(bypass=False, alu_bypass=False, alu_algo="MIN", alu_src="MEM",
                      alu_cvt_bypass=True, mul_bypass=False, mul_src="MEM", mul_prelu=True,
                      mul_cvt_bypass=False, mul_cvt_offset=5, mul_cvt_scale=301,
                      mul_cvt_truncate=1, truncate=4, data_mode="PER_KERNEL",
                      data_size="ONE_BYTE"),
        cvt=SdpCvtParams(cvt_offset=3, cvt_scale=3, cvt_shift=2)), \
        ("both", (i8(k), i8(k)))
    yield "ew_max_reg_mul_mem", SdpParams(
        ew=SdpYParams(bypass=False, alu_bypass=False, alu_algo="MAX", alu_src="REG",
                      alu_operand=-2**31, mul_bypass=False, mul_src="MEM",
                      mul_cvt_bypass=False, mul_cvt_offset=-2**31, mul_cvt_scale=32767,
                      mul_cvt_truncate=40, truncate=30),
        cvt=SdpCvtParams(cvt_scale=1, cvt_shift=1), out_precision="INT16"), ("mul", i16(h, w, k))


@pytest.mark.parametrize("seed", [1, 2])
def test_pipeline_equals_scalar_reference_on_random_tensors(seed):
    rng = np.random.default_rng(seed)
    for name, params, (use, mem) in _cases(rng):
        x = rng.integers(-2**31, 2**31, SHAPE)
        x.flat[::5] = rng.integers(-3000, 3000, x.flat[::5].shape)  # small values too
        x.flat[0], x.flat[1] = 2**31 - 1, -2**31
        if use == "both":
            got = sdp_apply(x, params, ew_operand=mem)
            want = reference(x, params, alu_mem=np.asarray(mem[0]), mul_mem=np.asarray(mem[1]))
        else:
            got = sdp_apply(x, params, ew_operand=mem)
            want = reference(x, params, **{f"{use}_mem": np.asarray(mem)})
        assert got.dtype == (np.int16 if params.out_precision == "INT16" else np.int8), name
        assert np.array_equal(got.astype(np.int64), want), name


# ------------------------------------------------------------------------- hand vectors
def test_default_is_bypass_and_int8_saturation():
    x = np.array([5, -5, 127, 128, -128, -129, 2**31 - 1, -2**31]).reshape(1, 1, 8, 1)
    assert sdp_apply(x, SdpParams()).ravel().tolist() == [5, -5, 127, 127, -128, -128, 127, -128]
    out16 = sdp_apply(x, SdpParams(out_precision="INT16"))
    assert out16.dtype == np.int16
    assert out16.ravel().tolist() == [5, -5, 127, 128, -128, -129, 32767, -32768]


def test_register_operand_x1():
    # ALU SUM with 3 << 2 = 12: 100 + 12 = 112; then truncate 1: 56 (no multiplier).
    p = SdpParams(bs=SdpXParams(bypass=False, alu_bypass=False, alu_operand=3,
                                alu_shift_value=2, mul_shift_value=1), out_precision="INT16")
    assert sdp_apply(np.full((1, 1, 1, 3), 100), p).ravel().tolist() == [56, 56, 56]


def test_per_kernel_operands_follow_the_channel():
    # K = 2, bias [1, -1] << 4 = [16, -16]; MUL [3, 5], truncate 2: (16*3)/4 = 12,
    # (-16*5)/4 = -20; second pixel d = 10: (26*3)/4 = 19.5 -> 20, (-6*5)/4 = -7.5 -> -8.
    p = SdpParams(bs=SdpXParams(bypass=False, alu_bypass=False, alu_src="MEM",
                                alu_shift_value=4, mul_bypass=False, mul_src="MEM",
                                mul_shift_value=2, alu_data=[1, -1], mul_data=[3, 5]),
                  out_precision="INT16")
    x = np.array([0, 0, 10, 10]).reshape(1, 1, 2, 2)
    assert sdp_apply(x, p).ravel().tolist() == [12, -20, 20, -8]


def test_per_element_operands_broadcast_over_the_batch():
    # X2 MUL per element, (H, W, K) = (1, 2, 1) operands [2, -3]; N = 2 images.
    p = SdpParams(bn=SdpXParams(bypass=False, mul_bypass=False, mul_src="MEM",
                                data_mode="PER_ELEMENT", mul_data=[[[2], [-3]]]))
    x = np.array([10, 10, 7, -7]).reshape(2, 1, 2, 1)
    assert sdp_apply(x, p).ravel().tolist() == [20, -30, 14, 21]
    with pytest.raises(ValueError, match=r"shape \(1, 2, 1\): PER_ELEMENT needs the feature "
                                         r"shape \(2, 2, 1\) or \(1, 2, 2, 1\)"):
        sdp_apply(np.zeros((1, 2, 2, 1), np.int32), p)


def test_x1_runs_before_x2():
    # X1 adds 1, X2 multiplies by 2: d = 1 -> 4 (X2 first would give 3).
    p = SdpParams(bs=SdpXParams(bypass=False, alu_bypass=False, alu_operand=1),
                  bn=SdpXParams(bypass=False, mul_bypass=False, mul_operand=2))
    assert sdp_apply(np.ones((1, 1, 1, 1), int), p).item() == 4


def test_y_multiplies_before_adding():
    # d = 10, MUL 3 with truncate 1: 15, ALU + 1: 16 (ALU first: 11*3/2 = 16.5 -> 17).
    p = SdpParams(ew=SdpYParams(bypass=False, mul_bypass=False, mul_operand=3, truncate=1,
                                alu_bypass=False, alu_operand=1))
    assert sdp_apply(np.full((1, 1, 1, 1), 10), p).item() == 16


def test_y_register_operand_is_int32_without_converter():
    # ALU operand 100000 (beyond int16), converter fields set but unused for REG:
    # 5 + 100000 = 100005; output converter shift 4: 6250.3125 -> 6250.
    p = SdpParams(ew=SdpYParams(bypass=False, alu_bypass=False, alu_operand=100000,
                                alu_cvt_bypass=False, alu_cvt_offset=99, alu_cvt_scale=7),
                  cvt=SdpCvtParams(cvt_shift=4), out_precision="INT16")
    assert sdp_apply(np.full((1, 1, 1, 1), 5), p).item() == 6250


def test_y_memory_operand_goes_through_the_converter():
    # operand 10 (int8), offset 2, scale 3, truncate 1: (10 - 2) * 3 / 2 = 12; d + 12.
    p = SdpParams(ew=SdpYParams(bypass=False, alu_bypass=False, alu_src="MEM",
                                alu_cvt_bypass=False, alu_cvt_offset=2, alu_cvt_scale=3,
                                alu_cvt_truncate=1, data_size="ONE_BYTE"))
    x = np.array([0, 100]).reshape(1, 1, 2, 1)
    assert sdp_apply(x, p, ew_operand=np.full((1, 2, 1), 10)).ravel().tolist() == [12, 112]
    # With the converter bypassed the raw operand is used: -5.
    pb = SdpParams(ew=SdpYParams(bypass=False, alu_bypass=False, alu_src="MEM"))
    assert sdp_apply(x, pb, ew_operand=np.full((1, 2, 1), -5)).ravel().tolist() == [-5, 95]


def test_y_eql_and_per_kernel_pair():
    # ALU EQL against per-kernel [7, 8]: d = [7, 7] -> [0, 1]; MUL per-kernel [1, 1].
    p = SdpParams(ew=SdpYParams(bypass=False, alu_bypass=False, alu_algo="EQL", alu_src="MEM",
                                mul_bypass=False, mul_src="MEM", data_mode="PER_KERNEL"))
    x = np.array([7, 7]).reshape(1, 1, 1, 2)
    assert sdp_apply(x, p, ew_operand=([7, 8], [1, 1])).ravel().tolist() == [0, 1]


def test_output_converter():
    # (20 - 10) * 3 / 2 = 15; (-20 - 10) * 3 / 2 = -45; (1000 - 10) * 3 / 2 = 1485 -> 127.
    p = SdpParams(cvt=SdpCvtParams(cvt_offset=10, cvt_scale=3, cvt_shift=1))
    x = np.array([20, -20, 1000]).reshape(1, 1, 3, 1)
    assert sdp_apply(x, p).ravel().tolist() == [15, -45, 127]
    # sat17 before int16: (2**31 - 1) * 1 -> 65535 -> 32767.
    p16 = SdpParams(out_precision="INT16")
    assert sdp_apply(np.array([[[[2**31 - 1]]]]), p16).item() == 32767


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("make, match", [
    (lambda: SdpYParams(bypass=False, lut_bypass=False),
     "lut_bypass = False needs the table"),
    (lambda: SdpParams(out_precision="FP16"), "out_precision = 'FP16'"),
    (lambda: SdpParams(proc_precision="INT4"), "proc_precision = 'INT4'.*INT8, INT16"),
    (lambda: SdpXParams(alu_algo="EQL"), "alu_algo = 'EQL'.*MAX, MIN, SUM"),
    (lambda: SdpXParams(alu_shift_value=64), r"alu_shift_value = 64.*0\.\.63"),
    (lambda: SdpXParams(mul_operand=40000), r"mul_operand = 40000.*-32768\.\.32767"),
    (lambda: SdpXParams(bypass=1), "bypass = 1: must be True or False"),
    (lambda: SdpXParams(bypass=False, mul_bypass=False, mul_src="MEM"), "mul_data = None"),
    (lambda: SdpXParams(bypass=False, alu_bypass=False, alu_src="MEM", data_size="ONE_BYTE",
                        alu_data=[200]), r"value 200 is outside -128\.\.127"),
    (lambda: SdpXParams(alu_data=np.zeros((2, 2), int)), r"PER_KERNEL operands must be \(K,\)"),
    (lambda: SdpYParams(truncate=1024), r"truncate = 1024.*0\.\.1023"),
    (lambda: SdpYParams(alu_operand=2**31), "alu_operand = 2147483648"),
    (lambda: SdpCvtParams(cvt_scale=-40000), "cvt_scale = -40000"),
    (lambda: SdpParams(bs=SdpYParams()), "SdpParams.bs = .*must be a SdpXParams"),
])
def test_bad_parameters_are_config_errors(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_bad_inputs_are_value_errors():
    ok = np.zeros((1, 1, 1, 2), np.int64)
    with pytest.raises(ValueError, match="shape .*must be non-empty"):
        sdp_apply(np.zeros((2, 2)), SdpParams())
    with pytest.raises(ValueError, match="value 2147483648 is outside the int32 range"):
        sdp_apply(ok + 2**31, SdpParams())
    with pytest.raises(ValueError, match="dtype float64"):
        sdp_apply(ok.astype(float), SdpParams())
    kern = SdpParams(bs=SdpXParams(bypass=False, alu_bypass=False, alu_src="MEM",
                                   alu_data=[1, 2, 3]))
    with pytest.raises(ValueError, match=r"PER_KERNEL needs one operand per output channel, "
                                         r"shape \(2,\)"):
        sdp_apply(ok, kern)
    ew = SdpParams(ew=SdpYParams(bypass=False, alu_bypass=False, alu_src="MEM"))
    with pytest.raises(ValueError, match="ew_operand = None"):
        sdp_apply(ok, ew)
    with pytest.raises(ValueError, match="ew_operand is given but SDP Y reads no memory"):
        sdp_apply(ok, SdpParams(), ew_operand=ok)
    both = SdpParams(ew=SdpYParams(bypass=False, alu_bypass=False, alu_src="MEM",
                                   mul_bypass=False, mul_src="MEM"))
    with pytest.raises(ValueError, match="pass a pair"):
        sdp_apply(ok, both, ew_operand=ok)
    with pytest.raises(ConfigError, match=r"value 40000 is outside -32768\.\.32767"):
        sdp_apply(ok, ew, ew_operand=np.full((1, 1, 2), 40000))


def test_y_lut_runs_between_the_alu_and_the_output_converter():
    """Sigmoid through the Y LUT (the table of docs/nvdla.md: Q4 in, Q12 out), then the output
    converter with shift 5: sigmoid(x/16) * 4096 / 32, rounded half away, saturated to int8.
    LUT outputs (hw/nvdla/lut.py, hand-checked there): -2000 -> 0, -16 -> 1102, 0 -> 2048,
    16 -> 2994, 2000 -> 4096; /32 -> 0, 34.44 -> 34, 64, 93.56 -> 94, 128 -> 127 (sat8)."""
    from hw.nvdla.lut import lut_tables_for, sdp_y_lut
    sig = lut_tables_for(lambda v: 1 / (1 + np.exp(-v / 16)), out_scale=4096, le_start=-1024,
                         le_index_select=5, lo_start=-1024, lo_index_select=3,
                         hybrid_priority="lo", unit="sdp")
    x = np.array([-2000, -16, 0, 16, 2000], np.int64).reshape(1, 1, 5, 1)
    params = SdpParams(ew=SdpYParams(bypass=False, lut_bypass=False, lut=sig),
                       cvt=SdpCvtParams(cvt_shift=5))
    assert sdp_apply(x, params).ravel().tolist() == [0, 34, 64, 94, 127]
    # the same as the LUT stage alone followed by the converter, on random values
    rng = np.random.default_rng(3)
    r = rng.integers(-3000, 3000, (2, 3, 4, 5))
    looked, _ = sdp_y_lut(r, sig)
    expected = [int(cvt_out(v, 0, 1, 5, 8)) for v in np.asarray(looked).ravel()]
    assert sdp_apply(r, params).ravel().tolist() == expected
