"""The dataflow geometry table: its rules, its Numba codes, and the checks on a row."""

import pytest

from hw.systolic.config import Dataflow
from hw.systolic.geometry import (
    DATAFLOW_CODES, G_COLS_DIM, G_LEFT, G_OUTPUT_STATIONARY, G_ROWS_DIM, G_TIME_DIM, G_TOP,
    GEOMETRY_CODES, DataflowGeometry, GemmDim, GemmOperand, geometry,
)

M, N, K = GemmDim.M, GemmDim.N, GemmDim.K
IFMAP, FILTER, OFMAP = GemmOperand.IFMAP, GemmOperand.FILTER, GemmOperand.OFMAP


@pytest.mark.parametrize("df, split, ifmap_left", [
    (Dataflow.OS, (2, 3, 5), True),    # rows M, cols N, time K
    (Dataflow.WS, (5, 3, 2), True),    # rows K, cols N, time M
    (Dataflow.IS, (5, 2, 3), False),   # rows K, cols M, time N; b enters at the left
])
def test_table(df, split, ifmap_left):
    g = geometry(df)
    assert g is geometry(df.value)
    assert g.split(2, 3, 5) == split
    assert g.by_operand("left", "top") == (("left", "top") if ifmap_left else ("top", "left"))
    assert g.output_stationary is (df is Dataflow.OS)
    assert g.passed_operands == (2 if df is Dataflow.OS else 1)


@pytest.mark.parametrize("df, strides", [
    # m x k ifmap and k x n filter tiles, row-major; m, n, k = 2, 3, 5
    (Dataflow.OS, (5, 1)),   # left: a column of the ifmap tile; top: a row of the filter tile
    (Dataflow.WS, (1, 1)),   # left: a row of the ifmap tile; top (weight port): a filter row
    (Dataflow.IS, (3, 5)),   # left: a filter column; top (weight port): an ifmap column
])
def test_row_major_edge_strides(df, strides):
    assert geometry(df).row_major_edge_strides(2, 3, 5) == strides


def test_granules_per_dim():
    assert geometry(Dataflow.OS).per_dim("R", "C", "T") == ("R", "C", "T")
    assert geometry(Dataflow.WS).per_dim("R", "C", "T") == ("T", "C", "R")
    assert geometry(Dataflow.IS).per_dim("R", "C", "T") == ("C", "T", "R")


def test_codes_follow_the_table():
    assert list(DATAFLOW_CODES) == list(Dataflow)
    for df, code in DATAFLOW_CODES.items():
        g, row = geometry(df), GEOMETRY_CODES[code]
        assert (row[G_ROWS_DIM], row[G_COLS_DIM], row[G_TIME_DIM]) == (
            g.rows_dim, g.cols_dim, g.time_dim)
        assert (row[G_LEFT], row[G_TOP]) == (g.left_operand, g.top_operand)
        assert row[G_OUTPUT_STATIONARY] == g.output_stationary
    assert not GEOMETRY_CODES.flags.writeable


def test_operands_name_their_scratchpads():
    assert [o.sram for o in GemmOperand] == ["ifmap", "filter", "ofmap"]
    assert (IFMAP.dims, FILTER.dims, OFMAP.dims) == ((M, K), (K, N), (M, N))


@pytest.mark.parametrize("fields, message", [
    ((M, M, K, IFMAP, FILTER, OFMAP), "M, N, K in some order"),
    ((M, N, K, IFMAP, IFMAP, OFMAP), "IFMAP and FILTER"),
    ((M, N, K, FILTER, IFMAP, OFMAP), "left operand must span rows_dim"),
])
def test_bad_row(fields, message):
    with pytest.raises(ValueError, match=message):
        DataflowGeometry(Dataflow.OS, *fields)
