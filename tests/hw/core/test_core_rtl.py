"""The RTL core (hw.core) running compiled programs in Amaranth's simulator: outputs bit for bit
against the functional models, every command's start and end cycle against the executor, the
lowering's checks and dependencies, the timing rules against brute force, mutations caught."""

import numpy as np
import pytest

from compiler.backends.systolic import compile_graph
from compiler.ir import Activation, Binary, Gemm, Graph, Pool
from hw.core import cosim
from hw.core.lower import CoreError, Op, core_chip, lower
from hw.core.timing import durations, pool_beats, transfer_pieces
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
    graph = Graph("g", (Gemm(name="mm", m=8, n=8, k=8),))
    with pytest.raises(CoreError, match="command 2 .*COMPUTE of 'mm'.*runs LOAD, STORE and VECTOR"):
        lower(compile_graph(graph, chip), graph, chip)
    ddr = core_chip(overrides=["dram.preset=ddr4-3200"])
    pool = _pool_graph("max")
    with pytest.raises(CoreError, match="dram.ideal = False: the RTL core needs true"):
        lower(compile_graph(pool, ddr), pool, ddr)
    narrow = _pool_graph("max", channels=4)
    with pytest.raises(CoreError, match="4 channels per tile: the RTL core pools whole beats"):
        lower(compile_graph(narrow, chip), narrow, chip)
