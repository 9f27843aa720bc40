"""The runner: per-layer numbers against hand-derived cycle counts and published MAC totals."""

import pytest

from compiler.frontends import zoo
from compiler.ir import Conv2d, Eltwise, Gemm, Graph, Pool, conv2d
from hw.chip import ChipConfig
from hw.configfile import load_chip_config
from hw.vector.config import VectorConfig
from npulab.simulate import simulate


def chip(**array) -> ChipConfig:
    return load_chip_config(None, [f"array.{k}={v}" for k, v in array.items()])


def test_native_ws_cycles_match_the_hand_derivation():
    # WS on 32x32, Gemm M=100 N=40 K=70: spatial K x N = 70 x 40 -> 3 row folds x 2 col folds,
    # T = M = 100. Recurrence of hw/systolic/timing.py's docstring:
    #   f0: W=0   S=1    (cols_used 32)   f3: W=232 S=301 (cols_used 8)
    #   f1: W=32  S=101                   f4: W=332 S=401
    #   f2: W=132 S=201                   f5: W=432 S=501
    # end_f = S + T + R + cols_used - 1 -> f5: 501 + 100 + 32 + 8 - 1 = 640 (f2: 364).
    result = simulate(Graph("g", (Gemm(name="g", m=100, n=40, k=70),)), chip(dataflow="ws"),
                      "compute")
    layer = result.layers[0]
    assert layer.cycles == 640
    assert layer.macs == layer.pe_busy_cycles == 100 * 40 * 70
    assert layer.utilization_pct == pytest.approx(100 * 280000 / (1024 * 640))
    assert layer.ofmap_sram_reads == 100 * 40 * 2  # two K-folds after the first, per output
    assert result.totals["latency_s"] == pytest.approx(640e-9)


def test_native_os_cycles_match_the_hand_derivation():
    # OS on 32x32, Gemm M=40 N=40 K=10: 2 x 2 folds, interval max(K, R) = 32, so the last
    # fold (row fold 1, col fold 1, cols_used 8) starts at 96 and ends at
    # 96 + K + 2R + cols_used - 2 = 96 + 10 + 64 + 8 - 2 = 176; fold 2 (cols_used 8) ends at
    # 64 + 80 = 144, fold 1 (cols_used 32) at 32 + 10 + 64 + 30 = 136.
    result = simulate(Graph("g", (Gemm(name="g", m=40, n=40, k=10),)), chip(dataflow="os"),
                      "compute")
    assert result.layers[0].cycles == 176


def test_scalesim_mode_uses_scalesim_formula():
    # SCALE-Sim WS: folds * (2R + C + T - 2) - 1 = 6 * (64 + 32 + 100 - 2) - 1
    g = Graph("g", (Gemm(name="g", m=100, n=40, k=70),))
    assert simulate(g, chip(dataflow="ws"), "scalesim").layers[0].cycles == 6 * 194 - 1


def test_groups_run_as_separate_gemms():
    dw = conv2d("dw", 16, 8, 8, 3, padding=1, groups=8)
    one = conv2d("one", 16, 1, 1, 3, padding=1)
    for timing in ("compute", "scalesim"):
        many = simulate(Graph("a", (dw,)), chip(dataflow="os"), timing).layers[0]
        single = simulate(Graph("b", (one,)), chip(dataflow="os"), timing).layers[0]
        assert many.macs == 8 * single.macs
        assert many.ifmap_sram_reads == 8 * single.ifmap_sram_reads
        if timing == "scalesim":
            assert many.cycles == 8 * single.cycles
        else:  # back-to-back GEMMs overlap fill and drain: cheaper than 8 separate runs
            assert single.cycles < many.cycles < 8 * single.cycles


def test_vector_ops_run_on_the_vector_engine_unless_it_is_ideal():
    g = Graph("g", (
        conv2d("c", 8, 4, 4, 3, padding=1),
        Pool(name="p", kind="max", in_h=8, in_w=8, channels=4, kernel_h=2, kernel_w=2, stride_h=2,
             stride_w=2, inputs=("c",)),
        Eltwise(name="e", op="relu", elements=64, inputs=("p",)),
    ))
    # native timing fuses the pool into the conv (its output rows pooled on chip)
    for timing, engines in (("compute", ["array", "vector", "vector"]),
                            ("native", ["array", "fused", "vector"])):
        result = simulate(g, ChipConfig(), timing)
        assert [layer.engine for layer in result.layers] == engines
        assert result.totals["layers_not_simulated"] == 0
        assert result.totals["cycles"] == sum(x.cycles or 0 for x in result.layers)
    # SCALE-Sim has no vector unit; an ideal engine makes vector work free
    assert [x.engine for x in simulate(g, ChipConfig(), "scalesim").layers] == [
        "array", "none", "none"]
    ideal = ChipConfig(vector=VectorConfig(ideal=True))
    result = simulate(g, ideal, "compute")
    assert "vector engine ideal" in result.scope
    assert [layer.engine for layer in result.layers] == ["array", "none", "none"]
    assert result.layers[1].cycles is None
    assert result.totals["layers_simulated"] == 1
    assert result.totals["layers_not_simulated"] == 2
    assert result.totals["cycles"] == result.layers[0].cycles


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_resnet18_totals(dataflow):
    result = simulate(zoo.get("resnet18"), chip(dataflow=dataflow), "compute")
    # torchvision ResNet18_Weights.IMAGENET1K_V1: 1.814 GFLOPS (multiply-accumulates)
    assert result.totals["macs"] == pytest.approx(1.814e9, rel=5e-4)
    assert result.totals["cycles"] == sum(l.cycles for l in result.layers if l.cycles)
    assert result.totals["pe_busy_cycles"] == result.totals["macs"]
    assert 0 < result.totals["utilization_pct"] <= 100
    # The array cannot beat its peak: cycles >= MACs / PEs for every layer.
    for layer in result.layers:
        if layer.cycles:
            assert layer.cycles * 1024 >= layer.macs


def test_unknown_timing_mode():
    with pytest.raises(ValueError, match="timing = 'fast': must be one of native, compute, scalesim"):
        simulate(zoo.get("resnet18"), ChipConfig(), "fast")


def test_native_is_the_default_and_reports_memory_timing():
    g = Graph("g", (Gemm(name="fc", m=1, n=1000, k=2048),))
    full = simulate(g, ChipConfig())
    compute = simulate(g, ChipConfig(), "compute")
    layer = full.layers[0]
    assert full.timing == "native" and "DRAM" in full.scope
    # A batch-1 FC layer reads 2 MB of weights at 25.6 GB/s: memory-bound, far slower than compute.
    assert layer.bound == "dram"
    assert layer.dram_read_bytes >= 1000 * 2048 + 2048
    assert layer.cycles > 1000 * 2048 / 25.6 > compute.layers[0].cycles
    assert layer.cycles == (layer.compute_cycles + layer.stall_dram_cycles
                            + layer.stall_link_cycles + layer.stall_sram_cycles
                            + layer.stall_vector_cycles)
    # MACs per byte on the DRAM bus (whole bursts: at least the bytes read and written)
    assert layer.actions.dram_bits // 8 >= layer.dram_read_bytes + layer.dram_write_bytes
    assert full.metrics().layers[0]["macs_per_dram_byte"] == pytest.approx(
        layer.macs / (layer.actions.dram_bits / 8))
    assert compute.layers[0].stall_dram_cycles is None


def test_large_conv_is_compute_bound():
    g = Graph("g", (conv2d("c", 56, 128, 128, 3, padding=1),))
    in_dram = load_chip_config(None, ["chip.model_input=dram", "chip.model_output=dram"])
    layer = simulate(g, in_dram).layers[0]
    assert layer.bound == "compute"
    assert layer.stall_dram_cycles < 0.1 * layer.cycles
