"""The tiler's cost is independent of M (issue 21 item 7: ``npulab map --gemm`` near the size
limits ran for minutes, enumerating one M tile after another): M tiles are costed per distinct
shape (:meth:`TileProblem.m_tile_shapes`), which must equal the enumeration (the gold model)."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.backends.systolic import tile_problem
from compiler.backends.systolic_tiling import TileProblem, choose_tiling
from compiler.ir import Gemm, conv2d
from compiler.options import CompileOptions
from hw.configfile import load_chip_config

CHIP = load_chip_config(None)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 5000), mu=st.integers(1, 600))
def test_gemm_shapes_equal_the_enumeration(m, mu):
    p = tile_problem(Gemm(name="g", m=m, n=16, k=16), CHIP, CompileOptions())
    assert p.m_tile_shapes(mu) == Counter((u, r) for _, u, r in p.m_tiles(mu))


@settings(max_examples=30, deadline=None)
@given(hw=st.integers(3, 40), batch=st.integers(1, 5), stride=st.integers(1, 3),
       mu=st.integers(1, 90), lowering=st.sampled_from(["direct", "im2col"]))
def test_conv_shapes_equal_the_enumeration(hw, batch, stride, mu, lowering):
    op = conv2d("c", hw, 8, 8, 3, stride=stride, padding=1, batch=batch)
    p = tile_problem(op, CHIP, CompileOptions(conv_lowering=lowering))
    assert p.m_tile_shapes(mu) == Counter((u, r) for _, u, r in p.m_tiles(mu))


def test_choose_tiling_does_not_enumerate_m_tiles(monkeypatch):
    """M = 2**24 rows (the IR's limit): costing walks shapes, not 16M tiles; the choice equals
    the enumeration-based one on a smaller M with the same tile structure."""
    def boom(self, unit_tile):
        raise AssertionError("choose_tiling enumerated the M tiles")
    small = choose_tiling(tile_problem(Gemm(name="g", m=4096, n=512, k=256), CHIP,
                                   CompileOptions()), CHIP)
    monkeypatch.setattr(TileProblem, "m_tiles", boom)
    big = choose_tiling(tile_problem(Gemm(name="g", m=1 << 24, n=512, k=256), CHIP,
                                 CompileOptions()), CHIP)
    assert big.tiles > 0 and big.compute_cycles >= (1 << 24) * 512 * 256 // (32 * 32)
    assert (big.m_units, big.n_tile, big.k_units) == (small.m_units, small.n_tile, small.k_units)
