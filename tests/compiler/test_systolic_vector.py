"""Vector ops on the systolic chip's vector engine: lowering (compiler.backends.systolic_vector),
execution (hw.executor's VECTOR commands) and the run's numbers (npulab.simulate)."""

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.options import CompileOptions
from compiler.backends.systolic import compile_graph
from compiler.backends.systolic_vector import tile_list, vector_plan
from compiler.frontends import zoo
from compiler.ir import (
    Activation, Binary, Gemm, Graph, Norm, Pool, Reduce, Softmax, conv2d,
)
from hw.chip import ChipConfig
from hw.executor import execute
from hw.memory.dram import dram_preset
from hw.memory.sram import SramConfig
from hw.program import Kind
from hw.vector.config import ALU_OPS, VectorConfig
from hw.vector.timing import T_CYCLES, TileTiming
from npulab.simulate import simulate

CHIP = ChipConfig()
IDEAL_DRAM = replace(CHIP, dram=dram_preset("ideal"))


def _run(ops, chip=CHIP, **graph):
    g = Graph("t", tuple(ops), **graph)
    program = compile_graph(g, chip)
    return program, execute(program, chip)


# --- numbers recorded before the vector engine existed (commit eb566ae, `npulab run --model M`)
@pytest.mark.parametrize("model, cycles", [
    ("resnet18", 2_197_064), ("mobilenetv2", 5_176_624), ("bert_base_layer", 1_032_833)])
def test_an_ideal_vector_engine_gives_the_matrix_only_numbers(model, cycles):
    """With the vector engine infinitely fast (ideal), a run is npulab's matrix-only run of
    before the vector engine, cycle for cycle; with a real one it takes longer."""
    chip = replace(CHIP, vector=VectorConfig(ideal=True))
    ideal = simulate(zoo.get(model), chip)
    assert ideal.totals["cycles"] == cycles
    assert all(x.engine != "vector" and x.fused is None for x in ideal.layers)
    assert ideal.totals["vector_busy_cycles"] == 0
    # fused (the default) and, on the transformer, unfused too (the CNNs' unfused runs are
    # sampled elsewhere: test_executor's compute-only equality)
    for fusion in (True, False) if model == "bert_base_layer" else (True,):
        real = simulate(zoo.get(model), CHIP, options=CompileOptions(fusion=fusion))
        assert real.totals["cycles"] > cycles
        assert real.totals["vector_busy_cycles"] > 0
        assert any(x.fused for x in real.layers) == fusion


@pytest.mark.parametrize("fusion", [False, True])
def test_every_layer_window_adds_up_with_vector_work(fusion):
    run = simulate(zoo.get("bert_base_layer", seq_len=64), CHIP,
                   options=CompileOptions(fusion=fusion))
    for x in run.layers:
        if x.engine == "fused":     # its work is in its anchor's window
            assert x.cycles is None and fusion
            continue
        assert x.cycles == (x.compute_cycles + x.stall_dram_cycles + x.stall_link_cycles
                            + x.stall_sram_cycles + x.stall_vector_cycles), x.name
    assert sum(x.cycles or 0 for x in run.layers) == run.totals["cycles"]
    if fusion:
        return
    softmax = next(x for x in run.layers if x.op == "Softmax")
    assert softmax.engine == "vector" and softmax.stall_vector_cycles > 0
    assert softmax.actions.vector_by_op["exp"] == 12 * 64 * 64


@pytest.mark.parametrize("op, read, written", [
    # input once, output once
    (Softmax(name="s", rows=96, cols=200), 96 * 200, 96 * 200),
    (Activation(name="g", fn="gelu", elements=50_000), 50_000, 50_000),
    # both operands
    (Binary(name="a", fn="add", elements=40_000), 80_000, 40_000),
    # a bias row broadcast over 100 rows: loaded once
    (Binary(name="b", fn="add", elements=100 * 256, other_elements=256), 100 * 256 + 256,
     100 * 256),
    # layer norm: input and its scale and shift
    (Norm(name="n", kind="layernorm", rows=128, cols=768), 128 * 768 + 2 * 768, 128 * 768),
    (Reduce(name="r", fn="mean", rows=300, cols=64), 300 * 64, 300),
    # 2x2 stride-2 pooling reads each input row once
    (Pool(name="p", kind="max", in_h=56, in_w=56, channels=64, kernel_h=2, kernel_w=2,
          stride_h=2, stride_w=2), 56 * 56 * 64, 28 * 28 * 64),
])
def test_a_vector_op_moves_its_tensors_once(op, read, written):
    chip = replace(CHIP, model_input="dram", model_output="dram")
    _, run = _run([op], chip)
    layer = run.layers[0]
    assert layer["dram_ifmap_read_bytes"] + layer["dram_filter_read_bytes"] == read
    assert layer["dram_ofmap_write_bytes"] == written
    assert layer["vectors"] >= 1


def test_a_row_too_long_for_a_buffer_is_read_once_per_pass():
    """Softmax's three passes each re-read a row that does not fit the ifmap buffer."""
    small = SramConfig(capacity_kib=4)
    chip = replace(CHIP, model_input="dram", model_output="dram", ifmap_sram=small,
                   ofmap_sram=small)
    op = Softmax(name="s", rows=2, cols=10_000)
    plan = vector_plan(op, chip)
    assert plan.chunk < op.cols
    _, run = _run([op], chip)
    assert run.layers[0]["dram_ifmap_read_bytes"] == 3 * 2 * 10_000
    assert run.layers[0]["dram_ofmap_write_bytes"] == 2 * 10_000
    # the operations are the whole op's, split over the passes
    assert run.layers[0]["vector_exp_ops"] == 2 * 10_000


def test_pooling_tiles_read_their_halo_rows():
    """3x3 stride-2 pooling cut into tiles of output rows: each tile reads the input rows its
    windows need, so rows on a tile boundary are read twice."""
    small = SramConfig(capacity_kib=16)
    chip = replace(CHIP, model_input="dram", model_output="dram", ifmap_sram=small)
    op = Pool(name="p", kind="max", in_h=56, in_w=56, channels=32, kernel_h=3, kernel_w=3,
              stride_h=2, stride_w=2, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    plan = vector_plan(op, chip)
    assert plan.tile_rows < op.out_h
    expected = 0
    for r0 in range(0, op.out_h, plan.tile_rows):
        r = min(plan.tile_rows, op.out_h - r0)
        top, bottom = max(0, 2 * r0 - 1), min(56, 2 * (r0 + r - 1) - 1 + 3)
        expected += (bottom - top) * 56 * 32
    _, run = _run([op], chip)
    assert run.layers[0]["dram_ifmap_read_bytes"] == expected > 56 * 56 * 32


vector_ops = st.one_of(
    st.builds(lambda r, c: Softmax(name="v", rows=r, cols=c), st.integers(1, 64),
              st.integers(1, 3000)),
    st.builds(lambda r, c, k: Norm(name="v", kind=k, rows=r, cols=c), st.integers(1, 64),
              st.integers(1, 3000), st.sampled_from(["layernorm", "rmsnorm"])),
    st.builds(lambda e, f: Activation(name="v", fn=f, elements=e), st.integers(1, 100_000),
              st.sampled_from(["gelu", "gelu_tanh", "silu", "relu", "sigmoid"])),
    st.builds(lambda e: Binary(name="v", fn="mul", elements=e), st.integers(1, 100_000)),
)
engines = st.builds(
    lambda lanes, dtype, exp, depth: VectorConfig(lanes=lanes, dtype=dtype, cost={"exp": exp},
                                                  pipeline_depth=depth),
    st.sampled_from([4, 16, 32, 128]), st.sampled_from(["fp16", "fp32", "int8"]),
    st.sampled_from([1.0, 4.0, 8.0]), st.integers(0, 16))


@settings(max_examples=40, deadline=None)
@given(vector_ops, engines)
def test_a_vector_op_is_never_faster_than_the_engines_peak(op, engine):
    """The issue's invariant: a vector op's cycles are never below elements x ops per element /
    (lanes x rate), for each operation and for each path's sum."""
    chip = replace(IDEAL_DRAM, vector=engine, model_input="dram", model_output="dram")
    _, run = _run([op], chip)
    layer = run.layers[0]
    busy, cycles = layer["vector_busy_cycles"], layer["cycles"]
    counts = op.work().op_counts(op.rows, op.cols)
    alu = sfu = 0.0
    for kind, count in counts.items():
        need = count / engine.ops_per_cycle(kind)
        assert busy >= need - 1e-6 and cycles >= need - 1e-6
        if kind in ALU_OPS:
            alu += need
        else:
            sfu += need
    assert busy >= max(alu, sfu) - 1e-6
    for kind, count in counts.items():   # every operation is counted once
        assert layer[f"vector_{kind}_ops"] == round(count)


def test_compute_mode_times_the_same_tiles_on_the_engine_alone():
    op = Softmax(name="s", rows=512, cols=512)
    run = simulate(Graph("t", (op,)), CHIP, timing="compute")
    tiles = tile_list(op, vector_plan(op, CHIP))
    t = TileTiming(CHIP.vector, [op.work()]).cycles(
        [0] * len(tiles), [x.rows for x in tiles], [x.cols for x in tiles],
        [x.a_bytes for x in tiles], [x.out_bytes for x in tiles])
    assert run.layers[0].cycles == int(t[:, T_CYCLES].sum()) == run.totals["cycles"]
    assert run.layers[0].engine == "vector"
    scalesim = simulate(Graph("t", (op,)), CHIP, timing="scalesim")
    assert scalesim.layers[0].engine == "none"   # SCALE-Sim has no vector unit


def test_the_vector_engine_runs_beside_the_array():
    """A softmax and a GEMM that do not depend on each other overlap: together they take less
    than one after the other."""
    soft = Softmax(name="s", rows=256, cols=1024)
    gemm = Gemm(name="g", m=256, n=256, k=1024)
    chip = replace(IDEAL_DRAM, model_input="dram", model_output="dram")
    together = _run([soft, gemm], chip)[1].cycles
    alone = _run([soft], chip)[1].cycles + _run([gemm], chip)[1].cycles
    assert together < alone
    program = compile_graph(Graph("t", (soft, gemm)), chip)
    run = execute(program, chip)
    vec = program.columns["kind"] == Kind.VECTOR
    comp = program.columns["kind"] == Kind.COMPUTE
    # some array compute starts before the last vector command finishes
    assert run.trace.start[comp].min() < run.trace.finish[vec].max()


def test_a_conv_network_block_runs_every_op():
    """Conv, pool, add: every op has cycles on some engine."""
    ops = (conv2d("c1", 16, 8, 8, 3, padding=1),
           Pool(name="p", kind="max", in_h=16, in_w=16, channels=8, kernel_h=2, kernel_w=2,
                stride_h=2, stride_w=2, inputs=("c1",)),
           conv2d("c2", 8, 8, 8, 3, padding=1, inputs=("p",)),
           Binary(name="add", fn="add", elements=8 * 8 * 8, inputs=("c2", "p")))
    run = simulate(Graph("blk", ops), CHIP, options=CompileOptions(fusion=False))
    assert [x.engine for x in run.layers] == ["array", "vector", "array", "vector"]
    assert run.totals["layers_not_simulated"] == 0
    assert math.isclose(sum(x.cycles for x in run.layers), run.totals["cycles"])
    # fused: the pool runs on c1's output tiles, the residual add on c2's
    fused = simulate(Graph("blk", ops), CHIP)
    assert [x.engine for x in fused.layers] == ["array", "fused", "array", "fused"]
    assert [x.fused for x in fused.layers] == ["conv_pool:c1"] * 2 + ["epilogue:c2"] * 2
    assert fused.totals["layers_not_simulated"] == 0 and fused.totals["kernels"] == 2
    assert fused.totals["vector_busy_cycles"] > 0
    # c1's output never reaches DRAM: only the pooled tensor is written
    assert fused.layers[0].dram_write_bytes == 8 * 8 * 8 * 1


def test_pooling_splits_channels_when_a_row_of_all_of_them_does_not_fit():
    small = SramConfig(capacity_kib=4)
    chip = replace(CHIP, model_input="dram", model_output="dram", ifmap_sram=small,
                   ofmap_sram=small)
    op = Pool(name="p", kind="avg", in_h=7, in_w=7, channels=512, kernel_h=7, kernel_w=7,
              stride_h=7, stride_w=7)
    plan = vector_plan(op, chip)
    assert plan.pool_channels < 512
    _, run = _run([op], chip)
    layer = run.layers[0]
    assert layer["dram_ifmap_read_bytes"] == 7 * 7 * 512     # each input byte once
    assert layer["dram_ofmap_write_bytes"] == 512
    assert layer["vector_add_ops"] == 512 * 48 and layer["vector_mul_ops"] == 512


def test_vector_energy_is_each_operation_at_the_tables_rate():
    """Energy of a vector layer: every operation at the technology table's cost for the
    engine's datatype (hw.energy.Technology.vector_op_pj: an exp is 3 fp32 multiplies, an add
    the table's fp32 add, ...)."""
    from hw.energy import load_technology
    op = Softmax(name="s", rows=64, cols=256)
    run = simulate(Graph("t", (op,)), CHIP)
    tech = load_technology("16nm")
    layer = run.layers[0]
    metrics = run.metrics("16nm")
    by_op = layer.actions.vector_by_op
    assert by_op == {k: round(v) for k, v in op.work().op_counts(64, 256).items()}
    expected = sum(n * tech.vector_op_pj(k, "fp32") for k, n in by_op.items()) * 1e-12
    assert metrics.layers[0]["energy_breakdown_j"]["vector"] == pytest.approx(expected, rel=1e-12)
    assert tech.vector_op_pj("exp", "fp32") == pytest.approx(3 * tech.mult_pj("fp", 32))
    assert tech.vector_op_pj("fma", "int8") == pytest.approx(tech.add_pj("int", 8)
                                                             + tech.mult_pj("int", 8))


def test_the_vector_engine_is_an_engine_of_the_core():
    from hw.spec import chip_spec
    spec = chip_spec(CHIP)
    assert spec.kind == "systolic"                       # the chip's kind: its matrix engine
    assert [e.kind for e in spec.cores[0].engines] == ["systolic", "vector"]
    vector = spec.cores[0].engines[1]
    assert vector.config is CHIP.vector and vector.peak_macs_per_cycle == 0
    assert spec.peak_macs_per_cycle == CHIP.array.pes
    ideal = chip_spec(replace(CHIP, vector=VectorConfig(ideal=True)))
    assert [e.kind for e in ideal.engines] == ["systolic"]
