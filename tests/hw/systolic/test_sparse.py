"""N:M structured sparsity on the array (issue 27): the register model's sparse PEs against
dense numpy on the pruned weights, the timing engine against the register model, and the
closed forms of what skipping saves.

The RTL's sparse PEs are co-simulated against the same model in test_rtl.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.sparsity import prune_n_m
from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.regmodel import run_gemm
from hw.systolic.timing import gemm_timing

DATAFLOWS = ["os", "ws", "is"]


def pruned(rng, shape, n, m, lo=-128, hi=127):
    b, _ = prune_n_m(rng.integers(lo, hi + 1, shape), n, m, axis=-2)
    return b


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("nm", [(1, 4), (2, 4), (4, 8), (3, 8), (1, 2), (4, 4)])
def test_sparse_gemm_equals_dense_numpy_on_the_pruned_weights(dataflow, nm):
    n, m = nm
    rng = np.random.default_rng(n * 10 + m)
    cfg = ArrayConfig(rows=4, cols=3, dataflow=dataflow, sparse_m=m)
    a = rng.integers(-128, 128, (2, 9, 4 * m))
    b = pruned(rng, (2, 4 * m, 7), n, m)
    res = run_gemm(cfg, a, b, nm=nm)
    np.testing.assert_array_equal(res.output, a @ b)
    # the same weights on dense PEs: same answer, K / K' times the rows of weights to stream
    dense = run_gemm(ArrayConfig(rows=4, cols=3, dataflow=dataflow), a, b)
    np.testing.assert_array_equal(dense.output, res.output)
    assert res.counters.pe_busy_cycles * m == dense.counters.pe_busy_cycles * n
    assert res.counters.cycles <= dense.counters.cycles


@pytest.mark.parametrize("precision,acc_bits", [("int4", 8), ("int16", 32)])
@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_sparse_integer_precisions_wrap_like_numpy(dataflow, precision, acc_bits):
    """Narrowest accumulators: sums wrap, which commutes with the reordering, so the result is
    numpy's exact sum wrapped to acc_bits."""
    cfg = ArrayConfig(rows=3, cols=3, dataflow=dataflow, precision=precision,
                      acc_bits=acc_bits, sparse_m=4)
    lo, hi = cfg.precision.operand_range
    rng = np.random.default_rng(3)
    a = rng.integers(lo, hi + 1, (5, 16))
    b = pruned(rng, (16, 4), 2, 4, lo, hi)
    out = run_gemm(cfg, a, b, nm=(2, 4)).output
    wrap = 1 << cfg.acc_bits
    want = (a @ b + wrap // 2) % wrap - wrap // 2
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_sparse_float_gemm_adds_the_same_products_in_the_same_order(dataflow, precision):
    """Float sums depend on their order. With K' and K both within one fold (rows >= K), each
    output adds the nonzero products in k order on sparse and dense PEs alike (the pruned zeros
    add exact zeros), so the results are bit-identical; and within fp32 rounding of fp64."""
    from hw.numerics import round_to_format
    rng = np.random.default_rng(5)
    a, _ = round_to_format(rng.normal(size=(6, 16)), precision)
    w, _ = round_to_format(rng.normal(size=(16, 5)), precision)
    b, _ = prune_n_m(w, 2, 4, axis=0)
    cfg = ArrayConfig(rows=16, cols=4, dataflow=dataflow, precision=precision, sparse_m=4)
    out = run_gemm(cfg, a, b, nm=(2, 4)).output
    dense = run_gemm(ArrayConfig(rows=16, cols=4, dataflow=dataflow, precision=precision), a, b)
    np.testing.assert_array_equal(out, dense.output)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_two_four_halves_ws_folds_and_keeps_ifmap_reads():
    """2:4 on a WS array: K' = K/2 rows of weights, so half the row folds and half the filter
    reads (values; each with a 2-bit index); the activation edge carries groups of 4 shared by
    2 rows, so every activation is still read once per output row, as in the dense run."""
    cfg = ArrayConfig(rows=8, cols=8, dataflow="ws", sparse_m=4)
    m, k, n = 20, 64, 16
    sp = gemm_timing(cfg, m, n, k, nm=(2, 4))
    dn = gemm_timing(ArrayConfig(rows=8, cols=8, dataflow="ws"), m, n, k)
    assert sp.folds * 2 == dn.folds == (64 // 8) * (16 // 8)
    assert sp.filter_reads * 2 == dn.filter_reads == k * n
    assert sp.ifmap_reads == dn.ifmap_reads == m * k * (n // 8)
    assert sp.pe_busy_cycles * 2 == dn.pe_busy_cycles


@settings(deadline=None, max_examples=120)
@given(dataflow=st.sampled_from(DATAFLOWS), m_grp=st.integers(2, 8), data=st.data(),
       rows=st.integers(1, 6), cols=st.integers(1, 6), batch=st.integers(1, 2),
       m=st.integers(1, 11), n=st.integers(1, 11), groups=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_timing_engine_equals_register_model_sparse(dataflow, m_grp, data, rows, cols, batch,
                                                    m, n, groups, seed):
    n_keep = data.draw(st.integers(1, m_grp))
    k = groups * m_grp
    cfg = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow, sparse_m=m_grp)
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 8, (batch, m, k))
    b = pruned(rng, (batch, k, n), n_keep, m_grp, -8, 7)
    res = run_gemm(cfg, a, b, nm=(n_keep, m_grp))
    assert res.counters == gemm_timing(cfg, m, n, k, batch, nm=(n_keep, m_grp))
    np.testing.assert_array_equal(res.output, a @ b)


def test_bad_sparsity_requests_are_one_line_errors():
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 5, (3, 8))
    b = pruned(rng, (8, 3), 2, 4)
    dense_pes = ArrayConfig(rows=2, cols=2)
    with pytest.raises(ValueError, match="dense PEs .*sparse_m = 4"):
        run_gemm(dense_pes, a, b, nm=(2, 4))
    cfg = ArrayConfig(rows=2, cols=2, sparse_m=4)
    with pytest.raises(ValueError, match="nm = 2:8: .*N:4"):
        run_gemm(cfg, a, b, nm=(2, 8))
    with pytest.raises(ValueError, match=r"must be \(N, M\)"):
        run_gemm(cfg, a, b, nm="2:4")
    with pytest.raises(ValueError, match="K = 6 .*multiple of M = 4"):
        gemm_timing(cfg, 3, 3, 6, nm=(2, 4))
    with pytest.raises(ValueError, match=r"elements 4..7 .*\(0, 0\)\) has 4 nonzeros: at most 2"):
        run_gemm(cfg, a, np.vstack([b[:4], np.ones((4, 3), int)]), nm=(2, 4))
    with pytest.raises(ValueError, match="snapshots .*need nm"):
        run_gemm(cfg, a, b, snapshots=True)
    for bad in (1, 17, "4", True):
        with pytest.raises(ConfigError, match="sparse_m = .*0 \\(dense PEs\\) or an integer"):
            ArrayConfig(sparse_m=bad)
    with pytest.raises(ValueError, match="5:4: .*1 <= N <= 4") as exc:
        run_gemm(cfg, a, b, nm=(5, 4))
    assert "\n" not in str(exc.value)


def _row_pruned(rng, k, n, m, ns, lo=-128, hi=127):
    """``k x n`` weights whose column j is ns[j]:m pruned along K (row-wise N:M)."""
    b = rng.integers(lo, hi + 1, (k, n))
    for j, keep in enumerate(ns):
        b[:, j:j + 1] = prune_n_m(b[:, j:j + 1], int(keep), m, axis=0)[0]
    return b


@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_row_wise_gemm_equals_numpy_and_the_timing_engine_run_by_run(dataflow):
    """Row-wise N:M (each output channel its own N, some dense): the register model runs the
    channels sorted by N, one run per N cut at column folds (WS, OS) or exactly (IS); the
    output equals a @ b in the original channel order, and the counters equal the timing
    engine's over the same runs. The compiler emits the same runs (test_sparsity_pipeline)."""
    from hw.sparsity import channel_n, row_tiles
    from hw.systolic.mapping import ArrayCounters
    from hw.systolic.regmodel import run_gemm_rows
    rng = np.random.default_rng(7)
    cfg = ArrayConfig(rows=4, cols=3, dataflow=dataflow, sparse_m=4)
    ns = rng.integers(1, 5, 11)             # N = 4: dense channels
    a = rng.integers(-128, 128, (6, 16))
    b = _row_pruned(rng, 16, 11, 4, ns)
    res = run_gemm_rows(cfg, a, b)
    np.testing.assert_array_equal(res.output, a @ b)
    fold = 1 if dataflow == "is" else cfg.cols
    order, tiles = row_tiles(channel_n(b, 4, axis=0, channel_axis=1), 4, fold)
    assert (np.diff(ns[order]) <= 0).all()          # sorted, largest N first
    # one run per N, each starting where N changes (rounded up to a fold)
    assert len(tiles) <= len(set(ns.tolist()))
    assert all(first % fold == 0 for first, _, _ in tiles)
    total = np.sum([list(gemm_timing(cfg, 6, size, 16, nm=nm).to_dict().values())
                    for _, size, nm in tiles], axis=0)
    assert res.counters == ArrayCounters(*(int(v) for v in total))
    # fewer MACs performed than running every channel at the largest N (here dense)
    dense = run_gemm(cfg, a, b)
    assert res.counters.pe_busy_cycles < dense.counters.pe_busy_cycles
    with pytest.raises(ConfigError, match="dense PEs"):
        run_gemm_rows(ArrayConfig(rows=4, cols=3), a, b)
