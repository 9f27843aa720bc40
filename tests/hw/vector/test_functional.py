"""The vector unit's functional model (hw.vector.functional) against independent references:
float64 formulas, naive loops, hand-worked values, numpy/ml_dtypes casts; and the fusion proofs
(flash attention, tiled epilogue, add + layer norm, tiled pooling) as property tests."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hw.vector.functional as F
import hw.vector.fused as FU

PROPERTY = settings(max_examples=40, deadline=None, derandomize=True)


def _rng(seed):
    return np.random.default_rng(seed)


def _randn(rng, *shape, offset=0.0):
    return (rng.standard_normal(shape) + offset).astype(np.float32)


# --- datatypes ------------------------------------------------------------------------------------

def _all_kinds_of_floats():
    """Random bit patterns (every exponent, NaNs, infinities, subnormals), bf16 ties (low half
    0x8000) and edge values."""
    bits = _rng(1).integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    bits[:2000] = (bits[:2000] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    edges = np.array([0.0, -0.0, 1.0, 65504.0, 65520.0, 1e-8, 3.4e38, np.inf, -np.inf, np.nan],
                     np.float32)
    return np.concatenate([bits.view(np.float32), edges])


def test_to_dtype_bf16_matches_ml_dtypes_bit_for_bit():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _all_kinds_of_floats()
    with np.errstate(all="ignore"):
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(F.to_dtype(x, "bf16").view(np.uint32), want.view(np.uint32))


def test_to_dtype_fp16_matches_numpy_bit_for_bit():
    x = _all_kinds_of_floats()
    with np.errstate(all="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    got = F.to_dtype(x, "fp16")
    assert np.array_equal(got.view(np.uint32)[~np.isnan(x)], want.view(np.uint32)[~np.isnan(x)])
    assert np.isnan(got[np.isnan(x)]).all()
    # hand-worked: ties to even at 2048 (fp16 spacing 2), overflow past 65504 + 8
    assert F.to_dtype([2049, 2051, 65519, 65520], "fp16").tolist() == [2048, 2052, 65504, np.inf]


def test_to_dtype_integers_round_half_to_even_and_saturate():
    assert F.to_dtype([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], "int8").tolist() == [0, 2, 2, 0, -2, -2]
    assert F.to_dtype([200, -200, np.inf, -np.inf, np.nan], "int8").tolist() == [127, -128, 127, -128, 0]
    assert F.to_dtype([40000.4, -40000], "int16").tolist() == [32767, -32768]
    big = F.to_dtype([3e9, -3e9], "int32")
    assert big.astype(np.int32).tolist() == [2**31 - 128, -2**31]
    assert F.to_dtype([1.25], "fp32").tolist() == [1.25]
    assert F.to_dtype(1.5, "int8").shape == ()


def test_to_dtype_rejects_an_unknown_dtype_in_one_line():
    with pytest.raises(ValueError, match=r"^to_dtype: dtype = 'fp8': must be one of int8, .*fp32$"):
        F.to_dtype([1.0], "fp8")


# --- activations ----------------------------------------------------------------------------------

GRID = np.linspace(-12, 12, 4801, dtype=np.float32)
X64 = GRID.astype(np.float64)
_ERF64 = np.vectorize(math.erf)(X64)
_SIG64 = 1 / (1 + np.exp(-X64))


@pytest.mark.parametrize("name, ref", [
    ("relu", np.maximum(X64, 0)),
    ("relu6", np.clip(X64, 0, 6)),
    ("leaky_relu", np.where(X64 >= 0, X64, 0.01 * X64)),
    ("sigmoid", _SIG64),
    ("tanh", np.tanh(X64)),
    ("gelu", 0.5 * X64 * (1 + np.vectorize(math.erf)(X64 / math.sqrt(2)))),
    ("gelu_tanh", 0.5 * X64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (X64 + 0.044715 * X64**3)))),
    ("silu", X64 * _SIG64),
    ("erf", _ERF64),
    ("exp", np.exp(X64)),
])
def test_activations_match_float64_formulas(name, ref):
    got = F.ACTIVATIONS[name](GRID)
    assert got.dtype == np.float32 and got.shape == GRID.shape
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-7)


def test_cited_values_and_special_cases():
    assert F.gelu(1.0) == pytest.approx(0.8413447460685429, rel=1e-7)   # Phi(1), erf form
    assert F.gelu(1.0, approximate="tanh") == pytest.approx(0.8411919906082768, rel=1e-7)
    assert F.sigmoid(0.0) == 0.5
    assert F.sigmoid([-np.inf, np.inf]).tolist() == [0.0, 1.0]
    assert F.exp([100.0, -np.inf]).tolist() == [np.inf, 0.0]          # overflow, no warning
    assert F.reciprocal([0.0, 4.0]).tolist() == [np.inf, 0.25]
    assert np.isnan(F.rsqrt(-1.0)) and F.rsqrt(4.0) == 0.5 and F.sqrt(2.25) == 1.5
    positive = np.abs(GRID) + np.float32(0.01)
    np.testing.assert_allclose(F.rsqrt(positive), 1 / np.sqrt(positive.astype(np.float64)), rtol=1e-7)
    # sqrt and reciprocal are IEEE float32: the float64 result rounded once, bit for bit
    assert np.array_equal(F.sqrt(positive), np.sqrt(positive.astype(np.float64)).astype(np.float32))
    assert np.array_equal(F.reciprocal(positive), (1 / positive.astype(np.float64)).astype(np.float32))


# --- binary ops, reductions, softmax, norms -------------------------------------------------------

def test_binary_broadcasts_and_rounds_once():
    rng = _rng(2)
    a, b = _randn(rng, 3, 1), _randn(rng, 4) + np.float32(3)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # float64 holds every +, -, *, / of two float32 before one rounding (53 >= 2*24 + 2 bits)
    for fn, ref in (("add", a64 + b64), ("sub", a64 - b64), ("mul", a64 * b64), ("div", a64 / b64),
                    ("max", np.maximum(a64, b64)), ("min", np.minimum(a64, b64))):
        got = F.binary(fn, a, b)
        assert got.shape == (3, 4) and np.array_equal(got, ref.astype(np.float32)), fn
    np.testing.assert_allclose(F.binary("pow", np.abs(a), b), np.abs(a64) ** b64, rtol=1e-6)
    assert F.BINARY == ("add", "sub", "mul", "div", "max", "min", "pow")


def test_reduce_matches_float64():
    x = _randn(_rng(3), 5, 7)
    x64 = x.astype(np.float64)
    for fn, ref in (("sum", x64.sum(0)), ("mean", x64.mean(0)), ("max", x64.max(0)), ("min", x64.min(0))):
        np.testing.assert_allclose(F.reduce(fn, x, axis=0), ref, rtol=1e-6, atol=1e-6)
    assert F.reduce("sum", x, keepdims=True).shape == (5, 1)


def test_softmax_rows_sum_to_one_and_match_float64():
    x = _randn(_rng(4), 6, 33) * np.float32(4)
    e = np.exp(x.astype(np.float64))
    got = F.softmax(x)
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-9)
    np.testing.assert_allclose(got.sum(-1), 1, atol=1e-6)
    np.testing.assert_allclose(F.softmax(x + np.float32(1000)), got, rtol=1e-4, atol=1e-7)  # no overflow
    assert F.softmax([0.0, -np.inf]).tolist() == [1.0, 0.0]
    np.testing.assert_allclose(F.softmax(x.T, axis=0), got.T, rtol=1e-6)


def _layernorm64(x, gamma, beta, eps, axis=-1):
    x = x.astype(np.float64)
    mean = x.mean(axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_layernorm_normalises_and_matches_float64():
    rng = _rng(5)
    x = _randn(rng, 4, 64, offset=3.0) * np.float32(2)
    y = F.layernorm(x)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-4)
    gamma, beta = _randn(rng, 64), _randn(rng, 64)
    np.testing.assert_allclose(F.layernorm(x, gamma, beta), _layernorm64(x, gamma, beta, 1e-5),
                               rtol=1e-5, atol=1e-5)
    g4 = _randn(rng, 4)
    np.testing.assert_allclose(F.layernorm(x, g4, None, axis=0),
                               _layernorm64(x, g4[:, None], 0, 1e-5, axis=0), rtol=1e-5, atol=1e-5)


def test_rmsnorm_matches_float64():
    rng = _rng(6)
    x, gamma = _randn(rng, 3, 40), _randn(rng, 40)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(F.rmsnorm(x, gamma), want, rtol=1e-5, atol=1e-6)


# --- pooling --------------------------------------------------------------------------------------

def _pool_naive(x, kind, kh, kw, sh, sw, pads):
    pt, pl, pb, pr = pads
    n, h, w, c = x.shape
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    vals = [float(x[b, r, s, ch]) for r in range(i * sh - pt, i * sh - pt + kh)
                            for s in range(j * sw - pl, j * sw - pl + kw) if 0 <= r < h and 0 <= s < w]
                    out[b, i, j, ch] = max(vals) if kind == "max" else sum(vals) / len(vals)
    return out


POOL = st.fixed_dictionaries({
    "seed": st.integers(0, 2**16), "h": st.integers(1, 9), "w": st.integers(1, 7),
    "kh": st.integers(1, 4), "kw": st.integers(1, 3), "sh": st.integers(1, 3), "sw": st.integers(1, 3),
    "pads": st.tuples(*[st.integers(0, 3)] * 4), "kind": st.sampled_from(["max", "avg"]),
    "tile_rows": st.integers(1, 5)})


def _pool_case(p):
    pt, pl, pb, pr = p["pads"]
    pads = (min(pt, p["kh"] - 1), min(pl, p["kw"] - 1), min(pb, p["kh"] - 1), min(pr, p["kw"] - 1))
    h, w = max(p["h"], p["kh"] - pads[0] - pads[2]), max(p["w"], p["kw"] - pads[1] - pads[3])
    return _randn(_rng(p["seed"]), 2, h, w, 3), pads


@PROPERTY
@given(POOL)
def test_pool2d_matches_a_naive_loop(p):
    x, pads = _pool_case(p)
    got = F.pool2d(x, p["kind"], (p["kh"], p["kw"]), (p["sh"], p["sw"]), pads)
    want = _pool_naive(x, p["kind"], p["kh"], p["kw"], p["sh"], p["sw"], pads)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@PROPERTY
@given(POOL)
def test_conv_pool_tiled_equals_pool2d_bit_for_bit(p):
    x, pads = _pool_case(p)
    kernel, stride = (p["kh"], p["kw"]), (p["sh"], p["sw"])
    assert np.array_equal(FU.conv_pool_tiled(x, p["kind"], kernel, stride, pads, p["tile_rows"]),
                          F.pool2d(x, p["kind"], kernel, stride, pads))


def test_average_pool_excludes_padding_and_global_pool():
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    # ONNX count_include_pad=0: every 3x3 window holds the 4 real values: 10/4, not 10/9
    assert F.pool2d(x, "avg", 3, 1, (1, 1, 1, 1)).ravel().tolist() == [2.5] * 4
    assert F.pool2d(x, "max", 3, 1, (1, 1, 1, 1)).ravel().tolist() == [4.0] * 4
    y = _randn(_rng(7), 2, 5, 6, 4)
    np.testing.assert_allclose(F.global_pool(y, "avg"), y.mean((1, 2), keepdims=True), rtol=1e-6)
    assert np.array_equal(F.global_pool(y, "max"), y.max((1, 2), keepdims=True))


def test_pool_input_rows_gives_the_halo():
    # 3-row kernel, stride 2, pad 1 over 10 rows: outputs 2..3 read rows 3..7 (one shared halo row)
    assert F.pool_input_rows(2, 4, 3, 2, 1, 10) == (3, 8, 0, 0)
    assert F.pool_input_rows(0, 2, 3, 2, 1, 10) == (0, 4, 1, 0)
    assert F.pool_input_rows(4, 5, 3, 2, 1, 9) == (7, 9, 0, 1)


# --- requantisation -------------------------------------------------------------------------------

def test_requantize_hand_worked_cases():
    # ties to even after the float32 multiply: 0.5, 1.5, 2.5, -0.5, -1.5
    assert F.requantize([1, 3, 5, -1, -3], 0.5).tolist() == [0, 2, 2, 0, -2]
    assert F.requantize(np.array([1000, -1000], np.int32), 1.0).tolist() == [127, -128]
    assert F.requantize([1000, -1000], 1.0, dtype="int16").tolist() == [1000, -1000]
    assert F.requantize([100000], 1.0, dtype="int16").dtype == np.int16
    # per-channel scale on the last axis: 10 * 0.1f = 1.0000000149 -> 1; 2.5 -> 2; 20
    assert F.requantize([[10, 10, 10]], [0.1, 0.25, 2.0]).tolist() == [[1, 2, 20]]
    # zero point added after rounding; ReLU clamps at the zero point (the quantised 0.0)
    assert F.requantize([-10, 10], 1.0, zero_point=5).tolist() == [-5, 15]
    assert F.requantize([-10, 10], 1.0, zero_point=5, relu=True).tolist() == [5, 15]
    assert F.requantize([300], 1.0, zero_point=-5).tolist() == [127]


@PROPERTY
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=20),
       st.floats(1e-6, 4.0, allow_subnormal=False), st.sampled_from(["int8", "int16"]))
def test_requantize_follows_gemminis_c_macro(accs, scale, dtype):
    """Gemmini's c_str: float y = ROUND_NEAR_EVEN(x * scale), then clamp (scalar float32 code)."""
    lo, hi = (-128, 127) if dtype == "int8" else (-32768, 32767)
    want = []
    for a in accs:
        y = float(np.float32(a) * np.float32(scale))
        want.append(min(max(round(y), lo), hi))   # Python's round() ties to even
    assert F.requantize(np.array(accs, np.int64), scale, dtype=dtype).tolist() == want


# --- attention ------------------------------------------------------------------------------------

def _attention64(q, k, v, causal):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        nq, nkv = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(nkv)[None, :] <= np.arange(nq)[:, None] + nkv - nq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_attention_reference_matches_float64_and_the_decode_convention():
    rng = _rng(8)
    q, k, v = _randn(rng, 2, 5, 8), _randn(rng, 2, 7, 8), _randn(rng, 2, 7, 3)
    for causal in (False, True):
        np.testing.assert_allclose(FU.attention(q, k, v, causal=causal), _attention64(q, k, v, causal),
                                   rtol=1e-5, atol=1e-6)
    # one decoding query sees every key; with Nq == Nkv the first query sees only key 0
    assert np.array_equal(FU.attention(q[:, :1], k, v, causal=True), FU.attention(q[:, :1], k, v))
    np.testing.assert_allclose(FU.attention(k, k, v, causal=True)[:, 0], v[:, 0], rtol=1e-6)


ATTN = st.fixed_dictionaries({
    "seed": st.integers(0, 2**16), "lead": st.lists(st.integers(1, 3), max_size=2),
    "nq": st.integers(1, 9), "extra": st.integers(0, 6), "d": st.integers(1, 8), "dv": st.integers(1, 5),
    "block_q": st.integers(1, 10), "block_kv": st.integers(1, 13), "causal": st.booleans()})


def _attn_case(p):
    rng, lead = _rng(p["seed"]), tuple(p["lead"])
    nkv = p["nq"] + p["extra"]
    return (_randn(rng, *lead, p["nq"], p["d"]), _randn(rng, *lead, nkv, p["d"]),
            _randn(rng, *lead, nkv, p["dv"]), math.prod(lead))


@PROPERTY
@given(ATTN)
def test_flash_attention_equals_attention(p):
    q, k, v, _ = _attn_case(p)
    got = FU.flash_attention(q, k, v, p["block_q"], p["block_kv"], causal=p["causal"])
    np.testing.assert_allclose(got, FU.attention(q, k, v, causal=p["causal"]), rtol=1e-4, atol=1e-5)


@PROPERTY
@given(ATTN)
def test_flash_stats_match_closed_forms(p):
    q, k, v, batch = _attn_case(p)
    nq, nkv, dv, bq, bkv = q.shape[-2], k.shape[-2], p["dv"], p["block_q"], p["block_kv"]
    _, stats = FU.flash_attention(q, k, v, bq, bkv, causal=p["causal"], return_stats=True)
    tq, tkv = -(-nq // bq), -(-nkv // bkv)
    if not p["causal"]:
        assert len(stats.steps) == tq * tkv and stats.skipped_blocks == 0
        assert stats.score_elements == batch * nq * nkv
        assert stats.exp_calls == batch * (nq * nkv + nq * (tkv - 1))
        assert stats.rescale_multiplies == batch * nq * (dv + 1) * (tkv - 1)
        return
    # query block i computes the key blocks up to the one holding its last visible key
    kv_blocks = [min(tkv, -(-(min(nq, (i + 1) * bq) + nkv - nq) // bkv)) for i in range(tq)]
    rows = [min(nq, (i + 1) * bq) - i * bq for i in range(tq)]
    assert len(stats.steps) == sum(kv_blocks) and stats.skipped_blocks == tq * tkv - sum(kv_blocks)
    assert stats.score_elements == batch * sum(r * min(nkv, n * bkv) for r, n in zip(rows, kv_blocks))
    assert stats.rescale_multiplies == batch * sum(r * (dv + 1) * (n - 1) for r, n in zip(rows, kv_blocks))
    assert stats.exp_calls == stats.score_elements + batch * sum(r * (n - 1) for r, n in zip(rows, kv_blocks))


def test_flash_with_unit_blocks_computes_exactly_the_causal_triangle():
    q, k, v = _randn(_rng(9), 4, 2), _randn(_rng(10), 6, 2), _randn(_rng(11), 6, 2)
    out, stats = FU.flash_attention(q, k, v, 1, 1, causal=True, return_stats=True)
    off = 6 - 4   # query i sees keys 0..i + 2
    assert stats.score_elements == 4 * off + 4 * 5 // 2 and stats.skipped_blocks == 24 - 18
    np.testing.assert_allclose(out, _attention64(q, k, v, True), rtol=1e-5, atol=1e-6)


# --- epilogue and add + layer norm ----------------------------------------------------------------

EPI = st.fixed_dictionaries({
    "seed": st.integers(0, 2**16), "m": st.integers(1, 12), "n": st.integers(1, 12),
    "tile_m": st.integers(1, 8), "tile_n": st.integers(1, 8),
    "bias": st.sampled_from([None, "scalar", "vector"]), "residual": st.booleans(),
    "activation": st.sampled_from([None, *F.ACTIVATIONS]),
    "requant": st.sampled_from([None, "tensor", "channel"]),
})


@PROPERTY
@given(EPI)
def test_tiled_epilogue_equals_the_whole_tensor_form_bit_for_bit(p):
    rng, m, n = _rng(p["seed"]), p["m"], p["n"]
    if p["requant"] is None:
        acc = _randn(rng, 2, m, n) * np.float32(3)
        bias = {None: None, "scalar": np.float32(0.5), "vector": _randn(rng, n)}[p["bias"]]
        residual = _randn(rng, 2, m, n) if p["residual"] else None
        activation, requant = p["activation"], None
    else:
        acc = rng.integers(-2**20, 2**20, (2, m, n), dtype=np.int32)
        bias = {None: None, "scalar": 7, "vector": rng.integers(-999, 999, n)}[p["bias"]]
        residual = rng.integers(-999, 999, (2, m, n)) if p["residual"] else None
        activation = "relu" if p["activation"] == "relu" else None
        scale = 2.0**-12 if p["requant"] == "tensor" else rng.uniform(1e-4, 1e-2, n)
        requant = F.Requant(scale, zero_point=3)
    whole = FU.gemm_epilogue(acc, bias, activation, residual, requant)
    tiled = FU.tiled_epilogue(acc, p["tile_m"], p["tile_n"], bias, activation, residual, requant)
    assert tiled.dtype == whole.dtype and np.array_equal(tiled, whole, equal_nan=True)


def test_epilogue_order_and_integer_accumulator():
    acc, bias, res = np.array([[1.0, -2.0]], np.float32), np.array([0.5, 0.5], np.float32), np.ones((1, 2))
    assert FU.gemm_epilogue(acc, bias, "relu", res).tolist() == [[2.5, 0.0]]   # relu((acc + bias) + res)
    # int32 accumulator wraps: (2**31 - 1) + 1 -> -2**31, then saturates low
    assert FU.gemm_epilogue(np.array([[2**31 - 1]]), 1, requant=F.Requant(1.0)).tolist() == [[-128]]
    assert FU.gemm_epilogue([[100, -100]], [20, 20], "relu", requant=F.Requant(0.5)).tolist() == [[60, 0]]


@PROPERTY
@given(st.integers(0, 2**16), st.integers(1, 4), st.integers(1, 100), st.integers(1, 40),
       st.floats(-10, 10), st.booleans())
def test_add_layernorm_equals_layernorm_of_the_sum(seed, rows, n, chunk, offset, affine):
    rng = _rng(seed)
    x, r = _randn(rng, rows, n, offset=offset), _randn(rng, rows, n)
    gamma, beta = (_randn(rng, n), _randn(rng, n)) if affine else (None, None)
    y, s = FU.add_layernorm(x, r, gamma, beta, chunk=chunk, return_sum=True)
    assert np.array_equal(s, x + r)
    np.testing.assert_allclose(y, F.layernorm(x + r, gamma, beta), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, _layernorm64(s, 1 if gamma is None else gamma,
                                               0 if beta is None else beta, 1e-5), rtol=1e-5, atol=1e-5)


# --- argument checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, words", [
    (lambda: F.relu("abc"), ("relu", "x", "real numeric array")),
    (lambda: F.gelu(1.0, approximate="fast"), ("gelu", "approximate", "'tanh'")),
    (lambda: F.leaky_relu(1.0, alpha=math.inf), ("leaky_relu", "alpha", "finite")),
    (lambda: F.binary("mod", 1, 2), ("binary", "fn", "pow")),
    (lambda: F.binary("add", np.ones(3), np.ones(4)), ("binary", "b", "broadcast")),
    (lambda: F.reduce("sum", np.ones((2, 3)), axis=2), ("reduce", "axis", "[-2, 2)")),
    (lambda: F.softmax(np.ones((2, 0))), ("softmax", "axis", "empty")),
    (lambda: F.layernorm(np.ones((2, 3)), gamma=np.ones(2)), ("layernorm", "gamma", "(3,)")),
    (lambda: F.layernorm(np.ones(3), eps=0), ("layernorm", "eps", "> 0")),
    (lambda: F.pool2d(np.ones((1, 4, 4)), "max", 2), ("pool2d", "x", "NHWC")),
    (lambda: F.pool2d(np.ones((1, 4, 4, 1)), "sum", 2), ("pool2d", "kind", "'avg'")),
    (lambda: F.pool2d(np.ones((1, 4, 4, 1)), "max", 2, pads=(2, 0, 0, 0)), ("pool2d", "pads", "smaller")),
    (lambda: F.pool2d(np.ones((1, 2, 2, 1)), "max", 3), ("pool2d", "kernel", "fit")),
    (lambda: F.pool2d(np.ones((1, 4, 4, 1)), "max", 0), ("pool2d", "kernel", "positive")),
    (lambda: F.requantize([1.5], 1.0), ("requantize", "acc", "integer")),
    (lambda: F.requantize([[1, 2]], [1.0, 2.0, 3.0]), ("requantize", "scale", "(2,)")),
    (lambda: F.requantize([1], -1.0), ("requantize", "scale", "> 0")),
    (lambda: F.requantize([1], 1.0, dtype="int4"), ("requantize", "dtype", "'int16'")),
    (lambda: F.requantize([1], 1.0, zero_point=200), ("requantize", "zero_point", "127")),
    (lambda: FU.attention(np.ones((3, 2)), np.ones((4, 3)), np.ones((4, 2))),
     ("attention", "k", "(..., Nkv, 2)")),
    (lambda: FU.attention(np.ones((5, 2)), np.ones((4, 2)), np.ones((4, 2)), causal=True),
     ("attention", "causal", "Nq <= Nkv")),
    (lambda: FU.flash_attention(np.ones((3, 2)), np.ones((4, 2)), np.ones((4, 2)), 0, 2),
     ("flash_attention", "block_q", "positive")),
    (lambda: FU.gemm_epilogue(np.ones((2, 2)), activation="swish"), ("gemm_epilogue", "activation", "gelu")),
    (lambda: FU.gemm_epilogue(np.ones((2, 2), int), activation="gelu", requant=F.Requant(1.0)),
     ("gemm_epilogue", "activation", "'relu'")),
    (lambda: FU.gemm_epilogue(np.ones((2, 3)), bias=np.ones(2)), ("gemm_epilogue", "bias", "(3,)")),
    (lambda: FU.tiled_epilogue(np.ones((2, 2), int), 1, 1, requant=F.Requant([1.0])),
     ("requantize", "scale", "(2,)")),
    (lambda: FU.add_layernorm(np.ones((2, 3)), np.ones((3, 2))), ("add_layernorm", "residual", "(2, 3)")),
    (lambda: FU.conv_pool_tiled(np.ones((1, 4, 4, 1)), "max", 2, 2, (0, 0, 0, 0), 0),
     ("conv_pool_tiled", "tile_rows", "positive")),
    (lambda: F.pool_input_rows(2, 2, 3, 1, 0, 8), ("pool_input_rows", "out_row1", "greater")),
])
def test_bad_arguments_fail_in_one_line_naming_function_argument_and_rule(call, words):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    func, name, rule = words
    assert message.startswith(f"{func}: {name} = "), message
    assert rule in message, message


# ---- fixed-point requantization (gemmlowp / TFLite: multiply, shift, round, saturate) -------

def _round_half_away(q):
    from fractions import Fraction
    n = abs(q)
    r = int(n + Fraction(1, 2))
    return r if q >= 0 else -r


def _round_half_up(q):
    import math as _m
    from fractions import Fraction
    return _m.floor(q + Fraction(1, 2))


def _fixed_gold(x: int, m: int, shift: int, zp: int, lo: int, hi: int, relu: bool) -> int:
    """The rule in exact rational arithmetic: x * m / 2**31 rounded to nearest, ties up
    (saturating the one overflow), then that / 2**-shift rounded to nearest, ties away from
    zero; plus the zero point, clamped."""
    from fractions import Fraction
    left, right = max(shift, 0), max(-shift, 0)
    x = min(max(x << left, -2 ** 31), 2 ** 31 - 1)
    high = 2 ** 31 - 1 if x == m == -2 ** 31 else _round_half_up(Fraction(x * m, 2 ** 31))
    y = _round_half_away(Fraction(high, 2 ** right)) + zp
    if relu:
        y = max(y, zp)
    return min(max(y, lo), hi)


@pytest.mark.parametrize("scale, zp, dtype, relu", [
    (0.0123, 3, "int8", False), (0.75, -5, "int8", True), (1 / 3, 0, "int16", False),
    (2.5, 0, "int8", False), (1e-6, 0, "int16", True), (0.5, 0, "int8", False)])
def test_fixed_point_requantize_equals_exact_rounding(scale, zp, dtype, relu):
    """Every accumulator of a seeded sample (and the int32 edges, and the ties a power-of-two
    scale makes) against the rule in exact rational arithmetic."""
    m, shift = F.quantize_multiplier(scale)
    assert 2 ** 30 <= m < 2 ** 31
    assert abs(m * 2.0 ** (shift - 31) - scale) <= scale * 2.0 ** -30
    rng = np.random.default_rng(11)
    acc = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, 3000), rng.integers(-3000, 3000, 3000),
                          [0, 1, -1, 2 ** 31 - 1, -2 ** 31, 3, -3, 5, -5]]).astype(np.int64)
    lo, hi = (-128, 127) if dtype == "int8" else (-32768, 32767)
    got = F.requantize_fixed(acc, m, shift, zp, dtype, relu)
    gold = [_fixed_gold(int(x), m, shift, zp, lo, hi, relu) for x in acc]
    np.testing.assert_array_equal(got.astype(np.int64), gold)
    # near the float rule (Gemmini's): they differ only where rounding ties or the Q0.31
    # multiplier's last bit fall differently, by at most one step
    small = acc[3000:6000]
    ref = F.requantize(small, scale, zp, dtype, relu).astype(np.int64)
    assert np.abs(F.requantize_fixed(small, m, shift, zp, dtype, relu) - ref).max() <= 1


def test_fixed_point_requantize_ties_and_errors_in_one_line():
    # x / 2 in the multiply (multiplier 2**30, shift 0): ties go up, as gemmlowp's nudge does
    m, shift = F.quantize_multiplier(0.5)
    assert (m, shift) == (2 ** 30, 0)
    got = F.requantize_fixed(np.array([1, 3, -1, -3, 255, -257]), m, shift, dtype="int16")
    assert got.tolist() == [1, 2, 0, -1, 128, -128]
    # / 2 in the shift (multiplier 2**31 - 1 ~ 1.0, shift -1): ties go away from zero
    got = F.requantize_fixed(np.array([1, 3, -1, -3]), 2 ** 31 - 1, -1, dtype="int16")
    assert got.tolist() == [1, 2, -1, -2]
    for kwargs, message in ((dict(multiplier=-1), "multiplier = -1"),
                            (dict(shift=31), "shift = 31"),
                            (dict(dtype="int32"), "dtype"),
                            (dict(zero_point=200), "zero_point = 200")):
        args = dict(acc=[1], multiplier=m, shift=shift) | kwargs
        with pytest.raises(ValueError, match=message) as err:
            F.requantize_fixed(**args)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="scale"):
        F.quantize_multiplier(0.0)
