"""Register-level model (hw/systolic/regmodel.py) against independent gold models.

Gold models follow the addition order the regmodel docstring documents: OS adds products in
k order; WS/IS add down each column per K-fold (R consecutive k values from 0, R, 2R, ...,
starting from zero) and then add each fold's sum to the accumulator (first fold stored).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.mapping import map_gemm
from hw.systolic.regmodel import run_gemm
from hw.systolic.timing import gemm_timing

DATAFLOWS = ["os", "ws", "is"]
PRECISIONS = ["int8", "int16", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int4", "binary"]
FLOATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
ARRAYS = [(1, 1), (2, 2), (3, 4), (4, 3), (5, 2), (8, 8)]
# (batch or None for 2-D operands, M, K, N): ones, partial folds, several folds, batches.
GEMMS = [(None, 1, 1, 1), (None, 1, 6, 1), (None, 6, 1, 5), (None, 5, 9, 1),
         (None, 9, 10, 11), (None, 3, 17, 4), (3, 4, 7, 5), (2, 1, 3, 2)]
U = 2.0**-24  # unit roundoff of binary32


def cdiv(x: int, y: int) -> int:
    return -(-x // y)


# ------------------------------------------------------------------------------ gold models
def wrap_arr(x: np.ndarray, bits: int) -> np.ndarray:
    o = np.asarray(x).astype(object)
    return ((o + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)).astype(np.int64)


def k_groups(k: int, dataflow: str, rows: int) -> list[range]:
    """How the accumulation of one output is grouped: one group in k order for OS, else the
    K-folds of R consecutive k values."""
    if dataflow == "os":
        return [range(k)]
    return [range(k0, min(k0 + rows, k)) for k0 in range(0, k, rows)]


def gold_saturate(a, b, bits, dataflow, rows):
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    batch, m_dim, k_dim = a.shape
    out = np.zeros((batch, m_dim, b.shape[2]), np.int64)
    for i, m, n in np.ndindex(out.shape):
        total = None
        for grp in k_groups(k_dim, dataflow, rows):
            s = 0
            for k in grp:
                s = min(max(s + int(a[i, m, k]) * int(b[i, k, n]), lo), hi)
            total = s if total is None else min(max(total + s, lo), hi)
        out[i, m, n] = total
    return out


def gold_fp16(a, b, dataflow, rows):
    """float32 gold in the documented order. a, b: float32 arrays holding fp16 values."""
    prods = a[:, :, :, None] * b[:, None, :, :]  # (B, M, K, N), exact in fp32
    if dataflow == "os":  # acc <= a*b on `first`, then acc + a*b
        acc = prods[:, :, 0, :].copy()
        for k in range(1, a.shape[2]):
            acc = acc + prods[:, :, k, :]
        return acc
    total = None
    for grp in k_groups(a.shape[2], dataflow, rows):
        s = np.zeros(prods[:, :, 0, :].shape, np.float32)  # row 0 adds to zero
        for k in grp:
            s = s + prods[:, :, k, :]
        total = s if total is None else total + s
    return total


def operands(rng, precision, batch, m, k, n):
    shape_a = (m, k) if batch is None else (batch, m, k)
    shape_b = (k, n) if batch is None else (batch, k, n)
    if precision in FLOATS:
        from hw.numerics import FLOAT_FORMATS
        fmt = FLOAT_FORMATS[precision]
        span = {"fp16": 12, "bf16": 12, "fp8_e4m3": 5, "fp8_e5m2": 8}[precision]

        def gen(shape):
            x = rng.standard_normal(shape) * 2.0 ** rng.integers(-span, span, shape)
            x[rng.random(shape) < 0.05] = -0.0
            return x.astype(np.float32).astype(fmt.dtype)
        return gen(shape_a), gen(shape_b)
    if precision == "binary":
        return rng.choice([-1, 1], shape_a), rng.choice([-1, 1], shape_b)
    lo, hi = {"int4": (-8, 7), "int8": (-128, 127), "int16": (-32768, 32767)}[precision]
    return rng.integers(lo, hi + 1, shape_a), rng.integers(lo, hi + 1, shape_b)


def as3(x):
    x = np.asarray(x)
    return x[None] if x.ndim == 2 else x


# ------------------------------------------------------------------------------ values
@pytest.mark.parametrize("rows, cols", ARRAYS, ids=lambda v: str(v))
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_random_gemms_match_gold(dataflow, precision, rows, cols):
    rng = np.random.default_rng(
        [rows, cols, PRECISIONS.index(precision), DATAFLOWS.index(dataflow)])
    modes = ["wrap"] if precision in FLOATS else ["wrap", "saturate"]
    for batch, m, k, n in GEMMS:
        a, b = operands(rng, precision, batch, m, k, n)
        for overflow in modes:
            cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision=precision,
                              overflow=overflow)
            out = run_gemm(cfg, a, b).output
            want_shape = (m, n) if batch is None else (batch, m, n)
            assert out.shape == want_shape
            a3, b3 = as3(a), as3(b)
            if precision in FLOATS:
                assert out.dtype == np.float32
                gold = gold_fp16(a3.astype(np.float32), b3.astype(np.float32), dataflow, rows)
                gold = gold.reshape(want_shape)
                assert np.array_equal(out, gold)
                np.testing.assert_array_equal(out.view(np.uint32), gold.view(np.uint32))
                exact = np.matmul(a3.astype(np.float64), b3.astype(np.float64))
                absum = np.matmul(np.abs(a3.astype(np.float64)), np.abs(b3.astype(np.float64)))
                # Recursive summation: at most k roundings on any path, each <= u * partial sum.
                bound = (k + 1) * U * absum + 1e-300
                assert (np.abs(out.astype(np.float64) - exact.reshape(want_shape))
                        <= bound.reshape(want_shape)).all()
            else:
                assert out.dtype == np.int64
                if overflow == "wrap":
                    gold = wrap_arr(np.matmul(a3.astype(np.int64), b3.astype(np.int64)),
                                    cfg.acc_bits)
                else:
                    gold = gold_saturate(a3, b3, cfg.acc_bits, dataflow, rows)
                np.testing.assert_array_equal(out, gold.reshape(want_shape))


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("precision, acc_bits, k, overflows", [
    ("int16", 32, 8, True), ("int16", 33, 16, True), ("int16", 40, 1200, True),
    ("int16", 64, 40, False), ("int8", 16, 12, True), ("int8", 20, 70, True),
    ("int8", 32, 9, False),
])
def test_wrap_overflow(dataflow, precision, acc_bits, k, overflows):
    rng = np.random.default_rng(acc_bits * 1000 + k)
    hi = 127 if precision == "int8" else 32767
    m, n = 5, 3
    a = rng.integers(hi // 2, hi + 1, (m, k)) * rng.choice([1, 1, 1, -1], (m, k))
    a[0] = np.abs(a[0])  # row 0 only adds: sure to leave the accumulator's range
    b = rng.integers(hi // 2, hi + 1, (k, n))
    exact = a.astype(np.int64) @ b.astype(np.int64)
    gold = wrap_arr(exact, acc_bits)
    assert (gold != exact).any() == overflows
    for rows, cols in [(2, 2), (3, 4), (4, 3)]:
        cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision=precision,
                          acc_bits=acc_bits)
        np.testing.assert_array_equal(run_gemm(cfg, a, b).output, gold)


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("precision, acc_bits, k", [
    ("int8", 16, 12), ("int8", 20, 120), ("int16", 32, 16), ("int16", 33, 16),
])
def test_saturation_follows_documented_order(dataflow, precision, acc_bits, k):
    rng = np.random.default_rng(acc_bits + k)
    hi = 127 if precision == "int8" else 32767
    batch, m, n = 2, 4, 3
    mag = rng.integers(hi * 3 // 4, hi + 1, (batch, m, k))
    # Climb into saturation, then alternate signs: sequential saturation then loses every
    # positive product while a K-fold's sum keeps it, so the two orders differ.
    ks = np.arange(k)
    sign = np.where((ks < k // 2) | ((ks - k // 2) % 2 == 0), 1, -1)
    a = mag * sign
    a[:, 1] = -a[:, 1]  # and one row the other way round
    a[:, 3] = rng.integers(-hi, hi + 1, (batch, k))  # and one random walk
    b = rng.integers(hi * 3 // 4, hi + 1, (batch, k, n))
    b[:, :, 2] = rng.integers(-hi, hi + 1, (batch, k))
    exact = np.matmul(a.astype(np.int64), b.astype(np.int64))
    for rows, cols in [(2, 2), (3, 4), (4, 3), (5, 2)]:
        gold = gold_saturate(a, b, acc_bits, dataflow, rows)
        assert (gold != exact).any(), "operands were meant to saturate"
        if dataflow != "os":  # the grouping really matters for these operands
            assert (gold != gold_saturate(a, b, acc_bits, "os", rows)).any()
        cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision=precision,
                          acc_bits=acc_bits, overflow="saturate")
        np.testing.assert_array_equal(run_gemm(cfg, a, b).output, gold)


@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_fp16_order_is_observable(dataflow):
    rng = np.random.default_rng(5)
    m, k, n, rows = 6, 20, 5, 3
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-11, 11, (m, k))).astype(np.float16)
    b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-11, 11, (k, n))).astype(np.float16)
    a32, b32 = a.astype(np.float32)[None], b.astype(np.float32)[None]
    gold = gold_fp16(a32, b32, dataflow, rows)[0]
    other = gold_fp16(a32, b32, "ws" if dataflow == "os" else "os", rows)[0]
    assert (gold != other).any(), "operands were meant to make the order visible"
    cfg = ArrayConfig(rows=rows, cols=4, dataflow=dataflow, precision="fp16")
    out = run_gemm(cfg, a, b).output
    np.testing.assert_array_equal(out.view(np.uint32), gold.view(np.uint32))
    # An integer overflow mode has no meaning for fp32 accumulation: rejected, not ignored.
    with pytest.raises(ConfigError, match="overflow = 'saturate': fp16 accumulates in IEEE fp32"):
        ArrayConfig(rows=rows, cols=4, dataflow=dataflow, precision="fp16", overflow="saturate")


# ------------------------------------------------------------------------------ counters
@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("rows, cols, batch, m, k, n", [
    (1, 1, 1, 2, 3, 4), (2, 2, 1, 5, 5, 5), (3, 4, 2, 7, 10, 9), (4, 3, 3, 1, 13, 2),
    (5, 2, 1, 11, 1, 6), (8, 8, 2, 8, 8, 8), (8, 8, 1, 17, 9, 3),
])
def test_counters_closed_forms(dataflow, rows, cols, batch, m, k, n):
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 6, (batch, m, k))
    b = rng.integers(-5, 6, (batch, k, n))
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow)
    c = run_gemm(cfg, a, b).counters
    assert c.pe_busy_cycles == m * n * k * batch
    sr, sc = {"os": (m, n), "ws": (k, n), "is": (k, m)}[dataflow]
    assert c.folds == cdiv(sr, rows) * cdiv(sc, cols) * batch == map_gemm(cfg, m, n, k, batch).folds
    # scalesim.md's table, per GEMM instance.
    ifmap, filt = {"os": (m * k * cdiv(n, cols), k * n * cdiv(m, rows)),
                   "ws": (m * k * cdiv(n, cols), k * n),
                   "is": (m * k, k * n * cdiv(m, cols))}[dataflow]
    assert (c.ifmap_reads, c.filter_reads) == (ifmap * batch, filt * batch)
    kf = 1 if dataflow == "os" else cdiv(k, rows)
    assert c.ofmap_writes == m * n * kf * batch
    assert c.ofmap_reads == m * n * (kf - 1) * batch


# Hand-derived from the regmodel docstring (S_f = start of fold f, cu = cols_used):
# OS: MAC k of PE (i, j) at S + k + i + j; `last` reaches PE (R-1, j) at S + K + R + j - 2; the
#     drain then writes for R cycles, so cycles = S_last + K + 2R + cu - 2; fold interval max(K, R).
# WS/IS: weight row 0 written at cycle 0, feeder starts at S_0 = 1; output m of column j written
#     at S + m + R + j, so cycles = S_last + T + R + cu - 1. Port starts fold f+1 when fold f's
#     `first` reaches PE (0, C-1) (cycle S_f + C - 1) and it finished fold f (W_f + R).
CYCLE_PINS = [
    # OS R=4 C=4, M=3 K=5 N=3, one fold: 0 + 5 + 2*4 + 3 - 2 = 14 (rows_used does not matter)
    ("os", 4, 4, 3, 5, 3, 14),
    # OS R=2 C=2, M=4 K=5 N=2: two row folds, S_1 = max(5, 2) = 5; 5 + 5 + 4 + 2 - 2 = 14
    ("os", 2, 2, 4, 5, 2, 14),
    # OS R=4 C=2, M=8 K=2 N=2 (K < R): S_1 = max(2, 4) = 4; 4 + 2 + 8 + 2 - 2 = 14
    #     (an interval of K would give 12)
    ("os", 4, 2, 8, 2, 2, 14),
    # WS R=4 C=4, M=5 K=3 N=3, one fold: 1 + 5 + 4 + 3 - 1 = 12
    ("ws", 4, 4, 5, 3, 3, 12),
    # IS R=4 C=4: T=N=5, K=3 rows, M=3 columns: 1 + 5 + 4 + 3 - 1 = 12
    ("is", 4, 4, 3, 3, 5, 12),
    # WS R=2 C=8, M=1 K=4 N=8 (M < C): W_1 = max(0 + 2, 1 + 8 - 1) = 8, S_1 = max(1 + 1, 9) = 9;
    #     end = 9 + 1 + 2 + 8 - 1 = 19 (without the `first`-at-(0, C-1) handshake: 13)
    ("ws", 2, 8, 1, 4, 8, 19),
    # WS R=2 C=2, M=6 K=4 N=2 (stream-bound): W_1 = max(2, 1 + 1) = 2, S_1 = max(1 + 6, 3) = 7;
    #     end = 7 + 6 + 2 + 2 - 1 = 16
    ("ws", 2, 2, 6, 4, 2, 16),
]


@pytest.mark.parametrize("dataflow, rows, cols, m, k, n, cycles", CYCLE_PINS)
def test_hand_derived_cycle_counts(dataflow, rows, cols, m, k, n, cycles):
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow)
    a = np.ones((m, k), np.int64)
    b = np.ones((k, n), np.int64)
    assert run_gemm(cfg, a, b).counters.cycles == cycles
    assert gemm_timing(cfg, m, n, k).cycles == cycles


# ------------------------------------------------------------------------------ trace
def test_trace_positions_single_fold():
    rng = np.random.default_rng(3)
    # OS R=3 C=4: output (r, j) written at K + 2R + j - 2 - r (bottom row first).
    for m, n in [(3, 4), (2, 3)]:
        k = 5
        a, b = rng.integers(-9, 10, (m, k)), rng.integers(-9, 10, (k, n))
        res = run_gemm(ArrayConfig(rows=3, cols=4, dataflow="os"), a, b, trace=True)
        assert res.trace_value.shape == (res.counters.cycles, 4)
        assert res.trace_valid.sum() == m * n
        for r, j in np.ndindex(m, n):
            t = k + 2 * 3 + j - 2 - r
            assert res.trace_valid[t, j]
            assert res.trace_value[t, j] == res.output[r, j] == (a @ b)[r, j]
    # WS R=4 C=3, K=4: output (m, j) at 1 + m + R + j. IS: output (m, n) at 1 + n + R + m.
    a, b = rng.integers(-9, 10, (5, 4)), rng.integers(-9, 10, (4, 3))
    ws = run_gemm(ArrayConfig(rows=4, cols=3, dataflow="ws"), a, b, trace=True)
    assert ws.trace_valid.sum() == 15
    for mm, j in np.ndindex(5, 3):
        t = 1 + mm + 4 + j
        assert ws.trace_valid[t, j] and ws.trace_value[t, j] == (a @ b)[mm, j]
    a, b = rng.integers(-9, 10, (3, 4)), rng.integers(-9, 10, (4, 5))
    is_ = run_gemm(ArrayConfig(rows=4, cols=3, dataflow="is"), a, b, trace=True)
    assert is_.trace_valid.sum() == 15
    for mm, nn in np.ndindex(3, 5):
        t = 1 + nn + 4 + mm
        assert is_.trace_valid[t, mm] and is_.trace_value[t, mm] == (a @ b)[mm, nn]


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_trace_multi_fold(dataflow, precision):
    rng = np.random.default_rng(11)
    for batch, m, k, n in [(1, 7, 3, 5), (2, 5, 9, 6), (1, 9, 2, 10)]:
        a, b = operands(rng, precision, batch, m, k, n)
        cfg = ArrayConfig(rows=3, cols=2, dataflow=dataflow, precision=precision)
        res = run_gemm(cfg, a, b, trace=True)
        plain = run_gemm(cfg, a, b)
        assert plain.trace_value is None and plain.trace_valid is None
        assert res.trace_value.shape == res.trace_valid.shape == (res.counters.cycles, 2)
        # Each written value appears once at a valid (cycle, column).
        assert res.trace_valid.sum() == res.counters.ofmap_writes
        vals = np.sort(res.trace_value[res.trace_valid].ravel())
        if dataflow == "os" or k <= 3:  # one write per output element: same multiset
            np.testing.assert_array_equal(vals, np.sort(res.output.ravel()))
        elif precision == "int8":  # K-fold partial sums add up to the outputs
            assert vals.sum() == res.output.sum()
        assert res.trace_valid[-1].any()  # the last cycle counted writes something


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("precision, a, b, pattern", [
    ("int8", [[128]], [[1]], r"operand a: value 128 .*int8.*-128\.\.127"),
    ("int8", [[1]], [[-129]], r"operand b: value -129 "),
    ("int16", [[1, 40000]], [[1], [2]], r"operand a: value 40000 "),
    ("int8", np.array([[1.0]]), [[1]], r"operand a: dtype float64"),
    ("int16", [[1]], np.array([[True]]), r"operand b: dtype bool"),
    ("fp16", np.array([[0.1]]), np.array([[1.0]]), r"operand a: value .*0\.1.* fp16"),
    ("fp16", np.array([[1.0]]), np.array([[1, 2]]), r"operand b: dtype int64"),
    ("int8", [[1, 2, 3]], [[1], [2]], r"\(1, 3\).*\(2, 1\).*do not chain"),
    ("int8", np.ones((2, 3, 4), int), np.ones((3, 4, 5), int), r"\(2, 3, 4\).*\(3, 4, 5\)"),
    ("int8", np.ones((0, 3), int), np.ones((3, 1), int), r"operand a: shape \(0, 3\)"),
    ("int8", [[1]], np.ones((1, 1, 1, 1), int), r"operand b: shape \(1, 1, 1, 1\)"),
])
def test_bad_inputs_raise_value_error(precision, a, b, pattern):
    cfg = ArrayConfig(rows=2, cols=2, dataflow="os", precision=precision)
    with pytest.raises(ValueError, match=pattern):
        run_gemm(cfg, a, b)


def test_bad_config_object():
    with pytest.raises(ConfigError, match="cfg"):
        run_gemm({"rows": 2}, [[1]], [[1]])


def test_fp16_out_of_range_value_raises_value_error_without_warning():
    cfg = ArrayConfig(rows=2, cols=2, dataflow="ws", precision="fp16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"operand a: value .*1000000"):
            run_gemm(cfg, np.array([[1e6]]), np.array([[1.0]]))


def test_fp16_accepts_float16_and_representable_floats():
    cfg = ArrayConfig(rows=2, cols=2, dataflow="is", precision="fp16")
    a = np.array([[0.5, -2.0], [65504.0, 2.0**-24]])
    b = np.array([[1.0], [0.25]], np.float32)
    # one rounding: 65504 + 2**-26 -> 65504 both in fp64-then-fp32 and in fp32
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(run_gemm(cfg, a, b).output, want)
    np.testing.assert_array_equal(run_gemm(cfg, a.astype(np.float16), b).output, want)
    assert math.isnan(run_gemm(cfg, np.array([[np.nan]]), np.array([[1.0]])).output[0, 0])


# -------------------------------------------------------------------------- snapshots
def _field(res, cfg, name):
    from hw.systolic.regmodel import snapshot_layout
    off, n = snapshot_layout(cfg)[name]
    return res.snapshots[:, off:off + n]


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_snapshots_do_not_change_results(dataflow):
    rng = np.random.default_rng(3)
    cfg = ArrayConfig(rows=3, cols=4, dataflow=dataflow, precision="int16")
    a = rng.integers(-32768, 32768, (2, 7, 9))
    b = rng.integers(-32768, 32768, (2, 9, 5))
    plain = run_gemm(cfg, a, b, trace=True)
    snap = run_gemm(cfg, a, b, trace=True, snapshots=True)
    assert np.array_equal(plain.output, snap.output) and plain.counters == snap.counters
    assert snap.snapshots.shape[0] == snap.counters.cycles
    # The recorded output port is the traced one wherever a value was written.
    out = _field(snap, cfg, "out")
    assert np.array_equal(out[snap.trace_valid], snap.trace_value[snap.trace_valid])
    assert _field(snap, cfg, "out_valid")[snap.trace_valid].all()


def test_os_snapshot_accumulators_follow_the_wavefront():
    """PE (i, j) performs MAC k during cycle k + i + j of the first fold (docstring)."""
    rng = np.random.default_rng(4)
    cfg = ArrayConfig(rows=3, cols=4, dataflow="os")
    a = rng.integers(-128, 128, (3, 6))
    b = rng.integers(-128, 128, (6, 4))
    res = run_gemm(cfg, a, b, snapshots=True)
    acc = _field(res, cfg, "acc")
    for i in range(3):
        for j in range(4):
            for k in range(6):
                assert acc[k + i + j, i * 4 + j] == a[i, :k + 1] @ b[:k + 1, j]
    # The feeder presents a[:, k] and b[k, :] at cycle k (before skew).
    assert np.array_equal(_field(res, cfg, "a_in")[:6], a.T)
    assert np.array_equal(_field(res, cfg, "b_in")[:6], b)
    assert list(_field(res, cfg, "a_flags_in")[:6, 0]) == [3, 1, 1, 1, 1, 5]  # first, last


def test_ws_snapshot_weight_port_and_partial_sums():
    """Weight rows are written on consecutive cycles; the column sum for input row m leaves
    PE (R-1, j) at S + m + R - 1 + j (docstring), S = the cycle the feeder starts."""
    rng = np.random.default_rng(5)
    cfg = ArrayConfig(rows=4, cols=3, dataflow="ws")
    a = rng.integers(-128, 128, (5, 4))
    b = rng.integers(-128, 128, (4, 3))
    res = run_gemm(cfg, a, b, snapshots=True)
    w_row = _field(res, cfg, "w_row")[:, 0]
    assert list(w_row[:4]) == [0, 1, 2, 3] and (w_row[4:] == -1).all()
    assert np.array_equal(_field(res, cfg, "w_in")[:4], b)
    start = int(np.flatnonzero(_field(res, cfg, "x_flags_in")[:, 0] & 2)[0])
    assert start == 1  # one cycle behind the weight port's row 0
    psum = _field(res, cfg, "psum")
    for m in range(5):
        for j in range(3):
            assert psum[start + m + 3 + j, 3 * 3 + j] == (a @ b)[m, j]


def test_snapshots_reject_fp16():
    with pytest.raises(ValueError, match="snapshots are for integer precisions"):
        run_gemm(ArrayConfig(rows=2, cols=2, precision="fp16"), np.ones((2, 2), np.float16),
                 np.ones((2, 2), np.float16), snapshots=True)


# ------------------------------------------------------------------------------ low-bit floats
@pytest.mark.parametrize("precision", ["fp8_e4m3", "fp8_e5m2"])
def test_every_fp8_product_is_exact_and_accumulates_in_fp32(precision):
    """Exhaustive: every pair of the 256 x 256 fp8 bit patterns (NaN included), as one K = 1
    GEMM of all values against all values: each product equals the float64 product (exact in
    fp32, hw.numerics). Then one more step: acc + a*b rounds once in fp32 (float_mac)."""
    import ml_dtypes
    from hw.numerics import FLOAT_FORMATS, float_mac
    dt = FLOAT_FORMATS[precision].dtype
    vals = np.arange(256, dtype=np.uint8).view(dt)
    a, b = vals.reshape(256, 1), vals.reshape(1, 256)
    cfg = ArrayConfig(rows=4, cols=4, dataflow="os", precision=precision)
    out = run_gemm(cfg, a, b).output
    with np.errstate(invalid="ignore", over="ignore"):
        exact = a.astype(np.float64) @ b.astype(np.float64)
    nan = np.isnan(exact)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(out[~nan].astype(np.float64), exact[~nan])   # no rounding at all
    assert ml_dtypes.finfo(dt).max == FLOAT_FORMATS[precision].max
    acc = np.float32(1.0)
    fin = vals[np.isfinite(vals.astype(np.float32))].astype(np.float32)
    got = np.array([float_mac(acc, x, y) for x in fin[::7] for y in fin[::5]], np.float32)
    want = np.array([np.float32(np.float64(acc) + np.float64(x) * np.float64(y))
                     for x in fin[::7] for y in fin[::5]], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("precision", ["bf16", "fp8_e4m3", "fp8_e5m2"])
def test_low_bit_floats_accept_their_dtype_and_exact_floats_only(precision):
    """Operands are the format's ml_dtypes arrays or floats it holds exactly; anything else is
    a one-line error naming the value and the format (no warning)."""
    from hw.numerics import FLOAT_FORMATS, float_representable, to_float_format
    fmt = FLOAT_FORMATS[precision]
    cfg = ArrayConfig(rows=2, cols=2, dataflow="ws", precision=precision)
    a = np.array([[0.5, -2.0], [fmt.max, 0.25]])
    b = np.array([[1.0], [0.5]], np.float32)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(run_gemm(cfg, a, b).output, want)
    np.testing.assert_array_equal(run_gemm(cfg, a.astype(fmt.dtype), b).output, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=rf"operand a: value 0\.1 is not exactly "
                                             rf"representable in {precision}"):
            run_gemm(cfg, np.array([[0.1]]), np.array([[1.0]]))
        with pytest.raises(ValueError, match="value 1e\\+30|not exactly representable"):
            run_gemm(cfg, np.array([[1e30 if precision != "bf16" else 1e39]]),
                     np.array([[1.0]]))
    with pytest.raises(ValueError, match=rf"dtype int64: {precision} precision takes"):
        run_gemm(cfg, np.array([[1]]), np.array([[1.0]]))
    # rounding follows ml_dtypes: nearest even, E4M3 overflows to NaN, the others to inf
    x = np.array([1 + 2.0 ** -(fmt.fraction_bits + 1), fmt.max * 2])
    r = to_float_format(x, precision)
    assert r[0] == 1.0 and (np.isnan(r[1]) if not fmt.has_inf else np.isinf(r[1]))
    assert float_representable(r[:1], precision).all()


def test_low_bit_float_configs_accumulate_in_fp32_only():
    for p in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        cfg = ArrayConfig(rows=2, cols=2, precision=p)
        assert cfg.acc_bits == 32 and cfg.precision.is_float
        with pytest.raises(ConfigError, match=rf"acc_bits = 16: {p} accumulates in fp32"):
            ArrayConfig(rows=2, cols=2, precision=p, acc_bits=16)
        with pytest.raises(ConfigError, match=rf"overflow = 'saturate': {p} accumulates"):
            ArrayConfig(rows=2, cols=2, precision=p, overflow="saturate")


def test_every_int4_mac_wraps_and_saturates_as_its_gold():
    """Exhaustive for int4: every operand pair (16 x 16) against every value of an 8-bit
    accumulator (the narrowest int4 allows), wrapping and saturating (hw.numerics.mac); and
    every pair's product through the array (a K = 1 GEMM of all values against all values)."""
    from hw.numerics import mac
    vals = np.arange(-8, 8)
    for saturating in (False, True):
        for acc in range(-128, 128):
            for x in vals:
                for y in vals:
                    s = acc + int(x) * int(y)
                    want = max(-128, min(127, s)) if saturating else (s + 128) % 256 - 128
                    assert mac(acc, int(x), int(y), 8, saturating) == want
    cfg = ArrayConfig(rows=4, cols=4, dataflow="ws", precision="int4", acc_bits=8)
    out = run_gemm(cfg, vals.reshape(16, 1), vals.reshape(1, 16)).output
    assert np.array_equal(out, np.outer(vals, vals))
    with pytest.raises(ValueError, match=r"operand a: value 8 is outside the int4 range -8\.\.7"):
        run_gemm(cfg, [[8]], [[1]])
    with pytest.raises(ConfigError, match=r"acc_bits = 4: must be an integer in 8\.\.64"):
        ArrayConfig(precision="int4", acc_bits=4)


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("rows, cols", [(1, 40), (40, 1), (2, 24)])
def test_one_row_or_column_arrays_with_many_short_folds_in_flight(dataflow, rows, cols):
    # K = 1 and hundreds of folds: many folds in flight at once, more folds than the kernels'
    # rings of fold geometry hold (OS) and column 0's records wrap (WS/IS); the result is
    # a @ b and the counters are the timing engine's; snapshots (which check the WS bottom
    # edge's valid history against the psum_valid bank) change nothing.
    rng = np.random.default_rng(rows * 100 + cols)
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, precision="int8")
    a = rng.integers(-128, 128, (300, 1), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 90), dtype=np.int8)
    res = run_gemm(cfg, a, b)
    assert np.array_equal(res.output, a.astype(np.int64) @ b.astype(np.int64))
    assert res.counters == gemm_timing(cfg, 300, 90, 1)
    snap = run_gemm(cfg, a, b, snapshots=True)
    assert np.array_equal(snap.output, res.output) and snap.counters == res.counters
