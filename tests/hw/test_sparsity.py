"""Sparse storage formats (hw/sparsity.py): the closed-form byte counts equal the bytes of real
encodings of random matrices, for every format, density, shape and value width."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hw.sparsity as sp
from hw.sparsity import (FORMATS, compress_nm, encode, encoded_bytes, index_bits, nm_density,
                         pointer_bits, prune_n_m, storage_bytes)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), density=st.floats(0, 1),
       value_bits=st.sampled_from([4, 8, 16]), block=st.sampled_from([2, 4, 8]),
       seed=st.integers(0, 2**31))
def test_closed_forms_equal_real_encodings(rows, cols, density, value_bits, block, seed):
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 7, (rows, cols)) * (rng.random((rows, cols)) < density)
    nnz = int(np.count_nonzero(w))
    for fmt in ("dense", "bitmask", "csr", "csc", "ellpack"):
        arrays = encode(w, fmt, value_bits, block=block)
        extra = {"tiles_per_block_row": int(arrays["tiles_per_block_row"][0])} \
            if fmt == "ellpack" else {}
        assert encoded_bytes(arrays) == storage_bytes(fmt, rows, cols, nnz, value_bits,
                                                      block=block, **extra), fmt


@pytest.mark.parametrize("n, m", [(1, 4), (2, 4), (4, 8), (1, 2)])
def test_n_m_storage_is_kept_values_plus_log2_m_bits_of_position(n, m):
    rng = np.random.default_rng(n * 10 + m)
    w, _ = prune_n_m(rng.integers(-100, 100, (16, 4 * m)), n, m, axis=1)
    arrays = encode(w, "nm", 8, n=n, m=m)
    kept = 16 * 4 * m // m * n
    assert encoded_bytes(arrays) == storage_bytes("nm", 16, 4 * m, kept, 8, n=n, m=m)
    assert arrays["metadata"].nbytes == math.ceil(kept * max(1, math.ceil(math.log2(m))) / 8)
    # 2:4 at int8: half the values plus 2 bits each, 62.5 % of dense
    if (n, m) == (2, 4):
        assert storage_bytes("nm", 16, 16, 128, 8) / storage_bytes("dense", 16, 16, 256, 8) \
            == 0.625
    if n < m:       # a group with more than n nonzeros cannot be stored n:m
        with pytest.raises(ValueError, match=f"not {n}:{m} sparse"):
            encode(np.ones((2, m)), "nm", n=n, m=m)


def test_the_widths_and_the_break_even_densities():
    """Index and pointer widths are the smallest standard ones; for a 64 x 64 int8 matrix CSR
    beats dense below (64*64 - 65*2) / (64*64 * 2) ~ 48 % density, bitmask below 87.5 %."""
    assert (index_bits(256), index_bits(257), index_bits(1 << 16), index_bits(70000)) == \
        (8, 16, 16, 32)
    assert (pointer_bits(65535), pointer_bits(65536)) == (16, 32)
    dense = storage_bytes("dense", 64, 64, 0, 8)
    csr = [d for d in range(0, 4097) if storage_bytes("csr", 64, 64, d, 8) < dense]
    mask = [d for d in range(0, 4097) if storage_bytes("bitmask", 64, 64, d, 8) < dense]
    assert max(csr) == (4096 - 65 * 2 - 1) // 2 and max(mask) == 4096 - 512 - 1
    for bad in ("coo", "CSR"):
        with pytest.raises(ValueError, match="must be one of dense, bitmask"):
            storage_bytes(bad, 4, 4, 1)
    with pytest.raises(ValueError, match=r"nnz = 17: must be an integer in 0\.\.16"):
        storage_bytes("csr", 4, 4, 17)
    assert set(FORMATS) == {"dense", "bitmask", "csr", "csc", "ellpack", "nm"}


@settings(deadline=None, max_examples=60)
@given(n=st.integers(1, 8), extra=st.integers(0, 8), groups=st.integers(1, 5),
       cols=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_compress_nm_round_trips_and_keeps_n_per_group(n, extra, groups, cols, seed):
    """compress_nm keeps N slots per group of M with each value's position; scattering them
    back rebuilds the matrix, and nm_density is the fewest slots that hold every group."""
    m = n + extra
    rng = np.random.default_rng(seed)
    w, _ = prune_n_m(rng.integers(-9, 10, (groups * m, cols)), n, m, axis=0)
    values, index = compress_nm(w, n, m, axis=0)
    assert values.shape == index.shape == (groups * n, cols) and index.dtype == np.uint8
    assert int(index.max(initial=0)) < m
    rebuilt = np.zeros_like(w)
    rows = (np.arange(groups * n) // n * m)[:, None] + index
    np.put_along_axis(rebuilt, rows.astype(np.int64), values, axis=0)
    np.testing.assert_array_equal(rebuilt, w)
    assert nm_density(w, m, axis=0) <= n
    # positions within a group are distinct, nonzeros first in position order
    for g in range(groups):
        pos = index[g * n:(g + 1) * n]
        assert all(len(set(pos[:, c])) == n for c in range(cols))


def test_compress_nm_errors_name_the_group():
    with pytest.raises(ValueError, match="6 elements: must be a multiple of M = 4"):
        compress_nm(np.ones((6, 2)), 2, 4, axis=0)
    w = np.zeros((8, 3))
    w[5:8, 2] = 1
    with pytest.raises(ValueError, match=r"elements 4..7 .*\(2,\)\) has 3 nonzeros: at most 2"):
        compress_nm(w, 2, 4, axis=0)
    assert nm_density(w, 4, axis=0) == 3 and nm_density(np.zeros((4, 1)), 4, axis=0) == 0


# ---- row-wise N:M: each output channel its own N ----------------------------------------------

def test_channel_n_and_the_mix_count_each_output_channels_own_n():
    w = np.array([[1, 0, 0, 0, 1, 1, 0, 0],      # groups of 4 hold 1 and 2 nonzeros: N = 2
                  [1, 0, 0, 0, 0, 0, 0, 1],      # 1
                  [0, 0, 0, 0, 0, 0, 0, 0],      # all zero: N = 1 (a group keeps a slot)
                  [1, 1, 1, 1, 1, 1, 1, 1]])     # dense: 4
    ns = sp.channel_n(w, 4, axis=1, channel_axis=0)
    assert ns.tolist() == [2, 1, 1, 4]
    assert sp.channel_n(w.T, 4, axis=0, channel_axis=1).tolist() == [2, 1, 1, 4]
    assert sp.nm_mix(ns) == ((4, 1), (2, 1), (1, 2))
    with pytest.raises(ValueError, match="must differ"):
        sp.channel_n(w, 4, axis=1, channel_axis=1)


def test_a_mix_is_dealt_over_any_channel_count_in_proportion():
    mix = ((2, 468), (1, 300))
    assert sp.scale_mix(mix, 768) == mix
    for channels in (1, 7, 96, 384, 1000):
        dealt = sp.scale_mix(mix, channels)
        assert sum(c for _, c in dealt) == channels
        # each N within one channel of its exact share (cumulative rounding)
        for n, c in dealt:
            assert abs(c - channels * dict(mix)[n] / 768) < 1
    assert sp.scale_mix(((2, 1), (1, 1)), 7) == ((2, 4), (1, 3))


def test_a_mix_runs_on_the_arrays_groups():
    # 4:8 runs dense on 4-groups (4:4), 2:8 as 2:4; merged, largest N first
    assert sp.array_mix(((4, 3), (2, 5)), 8, 4) == ((4, 3), (2, 5))
    assert sp.array_mix(((1, 3), (2, 5)), 4, 8) == ((4, 5), (2, 3))   # 1:4 as 2:8
    assert sp.array_mix(((8, 2), (4, 6)), 8, 4) == ((4, 8),)
    assert sp.mix_label(((2, 3), (1, 4)), 4) == "1-2:4" and sp.mix_label(((2, 3),), 4) == "2:4"


def test_row_wise_sparsity_text_and_mixes_are_checked():
    assert sp.parse_sparsity("1-2:4") == ((2, 4), ((2, 1), (1, 1)))
    assert sp.parse_sparsity("1-3:8") == ((3, 8), ((3, 1), (2, 1), (1, 1)))
    assert sp.parse_sparsity("2:4") == ((2, 4), None) and sp.parse_sparsity("dense") == (None, None)
    for bad, message in (("2-1:4", "LO < HI"), ("1-5:4", "HI <= M"), ("a-2:4", "LO-HI:M"),
                         ("1-2-3:4", "LO-HI:M"), ("half", "row-wise 'LO-HI:M'")):
        with pytest.raises(ValueError, match=message):
            sp.parse_sparsity(bad, "--sparsity")
    assert sp.check_mix({1: 3, 2: 4}, 4) == ((2, 4), (1, 3))
    for bad in ([(1, True)], [(5, 2)], [(1, 0)], [(1, 2), (1, 3)], [], "x", [(1, 2, 3)]):
        with pytest.raises(ValueError, match="weight_nm_rows"):
            sp.check_mix(bad, 4)


def test_row_tiles_sort_channels_and_cut_where_n_changes():
    order, tiles = sp.row_tiles([1, 4, 2, 2, 1, 3], 4, 1)       # exact cuts (IS)
    assert order.tolist() == [1, 5, 2, 3, 0, 4]
    assert tiles == [(0, 1, None), (1, 1, (3, 4)), (2, 2, (2, 4)), (4, 2, (1, 4))]
    # on 4-column folds: the fold holding N = 4, 3, 2, 2 runs dense, the rest at 1:4
    assert sp.row_tiles([1, 4, 2, 2, 1, 3], 4, 4)[1] == [(0, 4, None), (4, 2, (1, 4))]
    # cuts inside a tile start from the tile's first channel
    assert sp.row_cuts(((2, 50), (1, 78)), 32, 96, 32) == [(32, 64), (64, 128)]
