"""The vector engine's config and its tile timing (hw.vector.config, hw.vector.timing)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.systolic.config import ConfigError
from hw.vector.config import (
    ALU_OPS, DEFAULT_COST, OPS, SFU_OPS, VectorConfig, vector_config_from_dict,
    vector_config_to_dict,
)
from hw.vector.timing import tile_cycles, tiles_cycles
from hw.vector.work import VectorWork

SOFTMAX = VectorWork("softmax", per_element={"max": 1, "add": 2, "exp": 1, "mul": 1},
                     per_row={"rcp": 1}, reductions=2, passes=3)


def test_defaults_follow_the_cited_rates():
    cfg = VectorConfig()
    # A100 SM: 64 FP32 results vs 16 special-function results per clock (1:4).
    assert cfg.ops_per_cycle("add") == cfg.lanes
    assert cfg.ops_per_cycle("exp") == cfg.lanes / 4
    assert cfg.read_bytes_per_cycle == cfg.write_bytes_per_cycle == 4 * cfg.lanes
    # packed SIMD: a 32-bit lane holds two 16-bit elements
    assert VectorConfig(dtype="bf16").ops_per_cycle("fma") == 2 * cfg.lanes
    assert VectorConfig(dtype="int8").ops_per_cycle("exp") == cfg.lanes / 4
    assert cfg.tree_levels == 5


def test_config_round_trips_through_a_table():
    cfg = vector_config_from_dict({"lanes": 128, "cost": {"exp": 2, "erf": 10}}, "t.toml")
    assert cfg.cost_of("exp") == 2 and cfg.cost_of("erf") == 10 and cfg.cost_of("add") == 1
    assert vector_config_from_dict(vector_config_to_dict(cfg), "again") == cfg
    hash(cfg)   # chips are cache keys


@pytest.mark.parametrize("table, message", [
    ({"lanes": 0}, "t.toml: vector.lanes = 0: must be an integer in 1..65536"),
    ({"dtype": "fp64"}, "t.toml: vector.dtype = 'fp64': must be one of int8, int16, int32"),
    ({"cost": {"exp": 0}}, "t.toml: vector.cost.exp = 0: must be a number in (0, 1024]"),
    ({"cost": {"sin": 4}}, "t.toml: vector.cost.sin: unknown key; allowed keys in "
                           "[vector.cost]: add, mul"),
    ({"cost": 3}, "t.toml: vector.cost = 3: must be a [vector.cost] table"),
    ({"packing": {"int8": 0}}, "t.toml: vector.packing.int8 = 0: must be an integer in 1..32"),
    ({"read_bytes_per_cycle": -1}, "vector.read_bytes_per_cycle = -1: must be an integer in"),
    ({"ideal": "yes"}, "t.toml: vector.ideal = 'yes': must be true or false"),
    ({"width": 3}, "t.toml: vector.width: unknown key; allowed keys in [vector]: lanes,"),
])
def test_bad_values_are_one_line_errors(table, message):
    with pytest.raises(ConfigError) as err:
        vector_config_from_dict(table, "t.toml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_softmax_tile_by_hand():
    """64 rows x 128 fp32 columns on 32 lanes, the module docstring's formula worked out."""
    cfg = VectorConfig()
    t = tile_cycles(cfg, SOFTMAX, 64, 128, 64 * 128 * 4, 64 * 128 * 4)
    elements = 64 * 128
    tree = 2 * math.ceil(64 * 32 / 32)                       # two trees per row
    assert t["tree"] == tree
    assert t["alu"] == 4 * elements // 32 + tree              # max, 2 adds, mul
    assert t["sfu"] == math.ceil((elements + 64) * 4 / 32)    # exp per element, rcp per row
    assert t["read"] == 3 * elements * 4 // 128
    assert t["write"] == elements * 4 // 128
    assert t["latency"] == 4 + 2 * 5 * 1                      # pipeline + two 5-level trees
    assert t["cycles"] == t["latency"] + max(t["alu"], t["sfu"], t["read"], t["write"])


def test_port_bound_tile():
    cfg = VectorConfig(lanes=64, read_bytes_per_cycle=16)
    relu = VectorWork("relu", per_element={"max": 1})
    t = tile_cycles(cfg, relu, 1, 4096, 4096, 4096)
    assert t["read"] == 256 and t["alu"] == 64
    assert t["cycles"] == 4 + 256


def test_bad_tile_arguments():
    with pytest.raises(ValueError, match="rows = -1: must be an integer >= 0"):
        tile_cycles(VectorConfig(), SOFTMAX, -1, 4, 0, 0)


works = st.builds(
    lambda e, r, red, passes: VectorWork("w", per_element=e, per_row=r, reductions=red,
                                         passes=passes),
    st.dictionaries(st.sampled_from(OPS), st.integers(0, 8)),
    st.dictionaries(st.sampled_from(OPS), st.integers(0, 3)),
    st.integers(0, 3), st.integers(1, 3))
configs = st.builds(
    lambda lanes, dtype, cost, depth: VectorConfig(lanes=lanes, dtype=dtype, cost=cost,
                                                   pipeline_depth=depth),
    st.sampled_from([1, 3, 8, 32, 128, 256]),
    st.sampled_from(["int8", "fp16", "fp32"]),
    st.dictionaries(st.sampled_from(OPS), st.sampled_from([0.5, 1.0, 2.0, 4.0, 16.0])),
    st.integers(0, 8))


@settings(max_examples=150, deadline=None)
@given(configs, works, st.integers(0, 300), st.integers(1, 5000), st.integers(0, 1 << 20))
def test_never_faster_than_the_peak_rate(cfg, work, rows, cols, nbytes):
    """A tile's cycles are never below count / (lanes x rate) for any op, nor below the sum of
    each path's ops, nor below its bytes over the ports."""
    t = tiles_cycles(cfg, [work], [0], [rows], [cols], [nbytes], [nbytes])[0]
    cycles = int(t[0])
    counts = work.op_counts(rows, cols)
    path = {"alu": 0.0, "sfu": 0.0}
    for op, count in counts.items():
        need = count / cfg.ops_per_cycle(op)
        path["alu" if op in ALU_OPS else "sfu"] += need
        assert cycles >= need - 1e-6
    assert cycles >= max(path.values()) - 1e-6
    assert cycles >= work.passes * nbytes / cfg.read_bytes_per_cycle - 1e-6
    assert cycles >= cfg.pipeline_depth
    assert set(ALU_OPS) | set(SFU_OPS) == set(OPS) and set(DEFAULT_COST) == set(OPS)
