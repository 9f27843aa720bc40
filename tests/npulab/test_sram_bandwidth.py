"""Scratchpad port bandwidth: no scratchpad ever moves more than its peak.

A scratchpad moves at most ``banks x bank_width_bytes x ports`` bytes per cycle in each
direction (hw.executor's module docstring); native timing stalls on it, so the utilization
npulab.metrics reports (busier direction over that peak) is <= 1 for every level of every
layer and of the network. The compute-only timings assume unlimited SRAM bandwidth and take
the array edge's bandwidth as the peak where it is larger (npulab.metrics._sram_peak).
Issue 21 item 2: a 256x256 array on GEMM 512^3 showed sram.ofmap 6.4 (compute timing) and a
1x512 array on GEMM 64x1024x64 sram.ofmap 1.73 (native).
"""

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from compiler.ir import Gemm, Graph
from hw.configfile import load_chip_config
from npulab.simulate import simulate


def _chip(*overrides):
    return load_chip_config(None, list(overrides))


def _sram_utilizations(run):
    m = run.metrics("16nm")
    views = [m.network] + list(m.layers)
    return [(v.get("name", "network"), name, lv["utilization"]) for v in views
            for name, lv in v["memory"].items()
            if name.startswith("sram.") and lv["utilization"] is not None]


def _assert_at_most_one(run):
    over = [u for u in _sram_utilizations(run) if u[2] > 1 + 1e-9]
    assert not over, over


def test_issue_example_native_result_scratchpad_stalls():
    g = Graph("g", (Gemm(name="g", m=64, n=1024, k=64),))
    run = simulate(g, _chip("array.rows=1", "array.cols=512"))
    _assert_at_most_one(run)
    # the array writes 512 accumulators (4 B) per cycle into a 128 B/cycle scratchpad: it
    # waits for the port, and the wait is an sram stall
    assert run.totals["stall_sram_cycles"] >= 64 * 1024 * 4 // 128 - 64 * 1024 // 512


def test_issue_example_compute_timing():
    g = Graph("g", (Gemm(name="g", m=512, n=512, k=512),))
    run = simulate(g, _chip("array.rows=256", "array.cols=256"), "compute")
    _assert_at_most_one(run)


_SIDES = (1, 2, 4, 8, 16, 32, 64, 128)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.sampled_from(_SIDES), cols=st.sampled_from(_SIDES),
       dataflow=st.sampled_from(("os", "ws", "is")),
       m=st.integers(1, 200), n=st.integers(1, 300), k=st.integers(1, 300),
       batch=st.integers(1, 3), timing=st.sampled_from(("native", "compute", "scalesim")),
       banks=st.sampled_from((1, 2, 8)), width=st.sampled_from((1, 4, 16)),
       ports=st.sampled_from((1, 2)), dram=st.sampled_from(("ddr4-3200", "ideal")))
def test_scratchpad_utilization_never_above_one(rows, cols, dataflow, m, n, k, batch, timing,
                                                banks, width, ports, dram):
    # SCALE-Sim's closed form on a 1x1 array is issue 21 item 13's (it can give 0 cycles)
    assume(not (timing == "scalesim" and rows == cols == 1))
    chip = _chip(f"array.rows={rows}", f"array.cols={cols}", f"array.dataflow={dataflow}",
                 f"sram.banks={banks}", f"sram.bank_width_bytes={width}", f"sram.ports={ports}",
                 f"dram.preset={dram}")
    run = simulate(Graph("g", (Gemm(name="g", m=m, n=n, k=k, batch=batch),)), chip, timing)
    _assert_at_most_one(run)
