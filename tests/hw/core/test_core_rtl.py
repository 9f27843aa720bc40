"""The RTL core (hw.core) running compiled programs in Amaranth's simulator: outputs bit for bit
against the functional models, every command's start and end cycle against the executor, the
lowering's checks and dependencies, the timing rules against brute force, mutations caught."""

from pathlib import Path

import numpy as np
import pytest

from compiler.backends.systolic import compile_graph
from compiler.ir import Activation, Binary, Cast, Conv2d, Gemm, Graph, Pool
from compiler.options import CompileOptions
from compiler.backends.core import lower
from hw.core import cocotb_run
from hw.core import cosim as core_sim
from hw.core.isa import CoreError, Op, core_chip
from npulab import core_verify as cosim
from hw.core.timing import compute_cycles, durations, pool_beats, transfer_pieces
from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.timing import gemm_timing
from hw.vector import functional as F
from hw.executor import execute
from hw.program import Engine
from hw.vector.rtl.cosim import pool_beats as lane_pool_beats


def _pool_graph(kind: str, channels: int = 16) -> Graph:
    n, h, w = 2, 11, 10
    pool = Pool(name="p", kind=kind, batch=n, in_h=h, in_w=w, channels=channels, kernel_h=3,
                kernel_w=2, stride_h=2, stride_w=2, pad_top=1, pad_left=1, pad_bottom=1)
    size = n * pool.out_h * pool.out_w * channels
    return Graph("pool_relu_add", (
        pool, Activation(name="r", fn="relu", elements=size, inputs=("p",)),
        Binary(name="a", fn="add", elements=size, inputs=("r", "p"))))


def _values(graph: Graph, seed: int = 0) -> dict:
    p = graph.ops[0]
    rng = np.random.default_rng(seed)
    return {"<input>": rng.integers(-128, 128, size=(p.batch, p.in_h, p.in_w, p.channels),
                                    dtype=np.int8)}


@pytest.fixture(scope="module")
def chip():
    return core_chip()


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_a_program_runs_bit_exact_and_cycle_matched(chip, kind):
    graph = _pool_graph(kind)
    program = compile_graph(graph, chip)
    v = cosim.verify(program, graph, chip, _values(graph))
    assert v.ok, v.mismatches
    # it is a real pipeline: tiles overlap (a load runs while the previous tile computes)
    start, end = v.run.start, v.run.end
    loads = [i for i in v.core.index[Engine.LOAD]]
    vectors = [i for i in v.core.index[Engine.VECTOR]]
    assert len(vectors) > 4
    assert any(start[i] < end[j] and end[i] > start[j] for i in loads for j in vectors)
    assert v.run.cycles == end.max()


def test_unaligned_tiles_and_partial_beats(chip):
    # 1003 elements: tiles of a half's 512 bytes and a last one of 491, which ends mid-beat
    # and mid-row (a partial beat, a partial last piece)
    graph = Graph("odd", (Activation(name="r", fn="relu", elements=1003),))
    program = compile_graph(graph, chip)
    rng = np.random.default_rng(1)
    v = cosim.verify(program, graph, chip,
                     {"<input>": rng.integers(-128, 128, size=1003, dtype=np.int8)})
    assert v.ok, v.mismatches
    chunks = [w["chunk"] for w in v.core.queues[Engine.STORE]]
    assert len(chunks) > 1 and chunks[-1] % 8


@pytest.mark.parametrize("mutation", ["start-early", "avg-floor", "no-saturate"])
def test_mutations_are_caught(chip, mutation):
    graph = _pool_graph("avg")
    program = compile_graph(graph, chip)
    v = cosim.verify(program, graph, chip, _values(graph), mutation=mutation)
    assert not v.ok


def test_waits_count_each_engines_finished_commands(chip):
    graph = _pool_graph("max")
    core = lower(compile_graph(graph, chip), graph, chip)
    program = core.program
    position = {}
    for e, index in enumerate(core.index):
        for k, i in enumerate(index):
            position[i] = (e, k)
    for e, index in enumerate(core.index):
        for k, i in enumerate(index):
            want = [0] * 4
            for d in program.deps(i):
                de, dk = position[int(d)]
                want[de] = max(want[de], dk + 1)
            word = core.queues[e][k]
            assert [word[f"wait{j}"] for j in range(4)] == want


def test_halves_alternate_and_hazards_become_dependencies(chip):
    graph = _pool_graph("max")
    program = compile_graph(graph, chip)
    core = lower(program, graph, chip)
    loads = [w for w in core.queues[Engine.LOAD] if w["op"] == Op.LOAD]
    assert [w["half"] for w in loads[:4]] == [0, 1, 0, 1]
    # each added dependency orders a write of a half after its earlier user
    assert core.added
    for i, d in core.added:
        assert d < i and d in core.program.deps(i) and d not in program.deps(i)
    # the executor schedules the same program: never earlier than without them
    before = execute(program, chip, durations=durations(core)).trace.finish.max()
    after = execute(core.program, chip, durations=durations(core)).trace.finish.max()
    assert after >= before


def test_timing_rules_against_brute_force():
    for n2, n1, chunk, row in [(1, 1, 100, 8), (3, 5, 12, 8), (2, 7, 8, 32), (1, 9, 40, 16)]:
        ptr, pieces = 0, 0
        for _ in range(n2 * n1):
            left = chunk
            while left:
                step = min(left, row - ptr % row)
                ptr, left, pieces = ptr + step, left - step, pieces + 1
        assert transfer_pieces(n2, n1, chunk, row) == pieces
    x = np.zeros((1, 9, 7, 16))
    beats, _ = lane_pool_beats(x, (3, 2), (2, 3), (1, 1, 0, 0), lanes=8)
    word = dict(r0=0, rows=4, out_w=3, sh=2, sw=3, pad_t=1, pad_l=1, kh=3, kw=2, in_h=9, in_w=7,
                blocks=2)
    assert pool_beats(word) == len(beats)


def test_what_the_core_cannot_run_is_a_one_line_error(chip):
    ddr = core_chip(overrides=["dram.preset=ddr4-3200"])
    pool = _pool_graph("max")
    with pytest.raises(CoreError, match="dram.ideal = False: the RTL core needs true"):
        lower(compile_graph(pool, ddr), pool, ddr)
    narrow = _pool_graph("max", channels=4)
    with pytest.raises(CoreError, match="4 channels in this tile: the RTL core pools whole beats"):
        lower(compile_graph(narrow, chip), narrow, chip)


# --- whole layers through the array: the two programs ------------------------------

_CORE = CompileOptions(fusion=("epilogue",), keep_on_chip=False, conv_lowering="im2col")


@pytest.fixture(scope="module")
def big_chip():
    return core_chip(kib=4)


_SIMS = ["amaranth", "amaranth-axi", pytest.param("verilator", marks=pytest.mark.skipif(
    cocotb_run.available() is not None,
    reason=f"the cocotb + Verilator run needs {cocotb_run.available()} (optional)"))]


def _verify(program, graph, chip, values, quant, sim: str):
    """``verify`` in ``sim``; ``amaranth-axi``: the core with its AXI4 port (hw.core.rtl.axi)
    on a 16-byte bus, a slave with 3 cycles of latency: cycle-matched too."""
    if sim == "amaranth-axi":
        return cosim.verify(program, graph, chip, values, quant=quant,
                            memory={"port": "axi", "latency": 3, "data_bytes": 16})
    return cosim.verify(program, graph, chip, values, quant=quant, sim=sim)


@pytest.mark.parametrize("sim", _SIMS)
def test_conv_requant_relu_pool_through_the_whole_core(big_chip, sim):
    conv = Conv2d(name="c", in_h=6, in_w=6, in_channels=8, out_channels=8, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
    graph = Graph("cnn", (
        conv, Activation(name="r", fn="relu", elements=288, inputs=("c",)),
        Cast(name="q", elements=288, dst="int8", src="int32", inputs=("r",)),
        Pool(name="p", kind="max", in_h=6, in_w=6, channels=8, kernel_h=2, kernel_w=2,
             stride_h=2, stride_w=2, inputs=("q",))))
    program = compile_graph(graph, big_chip, _CORE)
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, size=(1, 6, 6, 8), dtype=np.int8)
    w = rng.integers(-128, 128, size=(72, 8), dtype=np.int8)
    quant = {"c": F.quantize_multiplier(1 / 700) + (0,)}
    v = _verify(program, graph, big_chip, {"<input>": x, "c.weights": w}, quant, sim)
    assert v.ok, v.mismatches
    # K = 72 runs as three K tiles accumulating in one half of the ofmap scratchpad
    computes = v.core.queues[Engine.ARRAY]
    assert len(computes) == 3 and [c["acc"] for c in computes] == [0, 1, 1]
    # an independent gold: the convolution as nested sums over the padded NHWC input
    xp = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    wk = w.astype(np.int64).reshape(3, 3, 8, 8)
    acc = sum(np.einsum("nhwc,cd->nhwd", xp[:, ky:ky + 6, kx:kx + 6], wk[ky, kx])
              for ky in range(3) for kx in range(3))
    q = F.requantize_fixed(np.maximum(acc, 0), *quant["c"])
    gold = F.to_dtype(F.pool2d(q, "max", 2, 2), "int8").astype(np.int8)
    assert np.array_equal(cosim.tensor_of(v.run.memory, v.core.program, "p", gold.shape), gold)
    assert len(np.unique(gold)) > 20


@pytest.mark.parametrize("sim", _SIMS)
def test_a_gemm_chain_through_the_whole_core(big_chip, sim):
    graph = Graph("chain", (
        Gemm(name="g1", m=16, n=16, k=16),
        Cast(name="q1", elements=256, dst="int8", src="int32", inputs=("g1",)),
        Gemm(name="g2", m=16, n=8, k=16, inputs=("q1",)),
        Activation(name="r2", fn="relu", elements=128, inputs=("g2",)),
        Cast(name="q2", elements=128, dst="int8", src="int32", inputs=("r2",))))
    program = compile_graph(graph, big_chip, _CORE)
    rng = np.random.default_rng(4)
    values = {"<input>": rng.integers(-128, 128, size=(16, 16), dtype=np.int8),
              "g1.weights": rng.integers(-128, 128, size=(16, 16), dtype=np.int8),
              "g2.weights": rng.integers(-128, 128, size=(16, 8), dtype=np.int8)}
    quant = {"g1": (1518500250, -7, 3), "g2": (1 << 30, -6, -2)}
    v = _verify(program, graph, big_chip, values, quant, sim)
    assert v.ok, v.mismatches
    a = values["<input>"].astype(np.int64)
    h = F.requantize_fixed(a @ values["g1.weights"], *quant["g1"])
    out = F.requantize_fixed(np.maximum(h.astype(np.int64) @ values["g2.weights"], 0),
                             *quant["g2"])
    assert np.array_equal(cosim.tensor_of(v.run.memory, v.core.program, "q2", out.shape), out)


@pytest.mark.parametrize("m,n,k", [(16, 8, 8), (36, 16, 72), (5, 24, 40), (3, 8, 24)])
def test_compute_cycles_are_the_timing_engines_plus_two(m, n, k):
    """With whole column folds the de-skew adds nothing: the core's COMPUTE is the timing
    engine's (= the register model's) cycles plus the read cycle and the write."""
    cfg = ArrayConfig(rows=8, cols=8, dataflow=Dataflow.WS)
    assert compute_cycles(m, n, k, 8, 8) == gemm_timing(cfg, m, n, k).cycles + 2


def test_what_the_array_engine_cannot_run_is_a_one_line_error(big_chip):
    odd = Graph("odd", (Gemm(name="g", m=8, n=8, k=12),
                        Cast(name="q", elements=64, dst="int8", src="int32", inputs=("g",))))
    with pytest.raises(CoreError, match="k = 12: the RTL core reads whole rows"):
        lower(compile_graph(odd, big_chip, _CORE), odd, big_chip)
    bare = Graph("bare", (Gemm(name="g", m=8, n=8, k=8),))
    with pytest.raises(CoreError, match="exactly one VECTOR of its op.*requantizing epilogue"):
        lower(compile_graph(bare, big_chip, _CORE), bare, big_chip)


@pytest.mark.parametrize("mutation", ["round-down", "relu-at-zero"])
def test_epilogue_mutations_are_caught(big_chip, mutation):
    graph = Graph("one", (Gemm(name="g", m=8, n=8, k=16),
                          Activation(name="r", fn="relu", elements=64, inputs=("g",)),
                          Cast(name="q", elements=64, dst="int8", src="int32", inputs=("r",))))
    program = compile_graph(graph, big_chip, _CORE)
    rng = np.random.default_rng(6)
    values = {"<input>": rng.integers(-128, 128, size=(8, 16), dtype=np.int8),
              "g.weights": rng.integers(-128, 128, size=(16, 8), dtype=np.int8)}
    quant = {"g": (1 << 30, -8, -5)}
    assert cosim.verify(program, graph, big_chip, values, quant=quant).ok
    assert not cosim.verify(program, graph, big_chip, values, quant=quant,
                            mutation=mutation).ok


def test_a_program_loaded_through_the_csrs_runs_the_same(chip):
    graph = Graph("odd", (Activation(name="r", fn="relu", elements=100),))
    program = compile_graph(graph, chip)
    core = lower(program, graph, chip)
    rng = np.random.default_rng(8)
    image = cosim.dram_image(program, graph,
                             {"<input>": rng.integers(-128, 128, size=100, dtype=np.int8)})
    built_in = core_sim.run(core, image)
    loaded = core_sim.run(core, image, load="csr")
    assert np.array_equal(built_in.memory, loaded.memory)
    assert np.array_equal(built_in.start, loaded.start) and built_in.cycles == loaded.cycles


def test_missing_values_are_one_line_errors(big_chip):
    graph = Graph("g", (Gemm(name="g", m=8, n=8, k=8),
                        Cast(name="q", elements=64, dst="int8", src="int32", inputs=("g",))))
    program = compile_graph(graph, big_chip, _CORE)
    x = np.zeros((8, 8), np.int8)
    with pytest.raises(ValueError, match="no 'g'.weights"):
        cosim.verify(program, graph, big_chip, {"<input>": x})
    with pytest.raises(ValueError, match="no '<input>'"):
        cosim.verify(program, graph, big_chip, {"g.weights": x})


def test_a_narrower_last_channel_tile_and_too_large_windows(big_chip):
    """80 channels in tiles of 64 leave a last tile of 16: its beats and places use its own
    channel count. A window larger than the lanes' table is refused."""
    from hw.core.isa import MAX_POOL_WINDOW
    from hw.vector.rtl.lane import MAX_WINDOW

    assert MAX_POOL_WINDOW == MAX_WINDOW
    chip = core_chip()
    graph = Graph("wide", (Pool(name="p", kind="max", in_h=4, in_w=4, channels=80,
                                kernel_h=2, kernel_w=2, stride_h=2, stride_w=2),))
    program = compile_graph(graph, chip)
    v = cosim.verify(program, graph, chip, _values(graph, 9))
    assert v.ok, v.mismatches
    assert sorted({w["blocks"] for w in v.core.queues[Engine.VECTOR]}) == [2, 8]
    big = Graph("big", (Pool(name="p", kind="avg", in_h=17, in_w=17, channels=8,
                             kernel_h=17, kernel_w=17),))
    with pytest.raises(CoreError, match="17x17 window: .* at most 256 elements"):
        lower(compile_graph(big, big_chip), big, big_chip)


def test_a_cached_cocotb_build_is_only_reused_from_the_same_cocotb_installation():
    # The Verilator build links cocotb's verilator.cpp and libraries by absolute path: a build
    # made from another environment (since removed) failed with "No rule to make target".
    key = cocotb_run.build_key("module m; endmodule", Path("/a/.venv/cocotb"), "1.8.1")
    assert key == cocotb_run.build_key("module m; endmodule", Path("/a/.venv/cocotb"), "1.8.1")
    assert key != cocotb_run.build_key("module m; endmodule", Path("/b/.venv/cocotb"), "1.8.1")
    assert key != cocotb_run.build_key("module m; endmodule", Path("/a/.venv/cocotb"), "1.8.2")
    assert key != cocotb_run.build_key("module n; endmodule", Path("/a/.venv/cocotb"), "1.8.1")
    assert key != cocotb_run.build_key("module m; endmodule", Path("/a/.venv/cocotb"), "1.8.1",
                                       "/usr/bin/verilator Verilator 5.006")
