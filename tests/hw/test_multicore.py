"""Many cores: the config, the network's formulas, the split, the L2's placement and the
executor's shared resources (compiler.backends.multicore, hw.memory.l2/noc, hw.executor)."""

from __future__ import annotations

import itertools
import math
import tomllib

import pytest
from hypothesis import given, settings, strategies as st

from compiler.backends.multicore import Placement, Split, choose_split, share_graph
from compiler.backends.systolic import compile_graph
from compiler.frontends import zoo
from compiler.ir import Gemm, Graph
from hw.chip import ChipConfig
from hw.configfile import chip_config_from_dict, chip_config_to_dict, chip_config_to_toml, load_chip_config
from hw.errors import ConfigError
from hw.executor import execute
from hw.memory.dma import DmaConfig
from hw.memory.dram import dram_preset
from hw.memory.link import HostLinkConfig
from hw.memory.noc import NocConfig
from hw.memory.sram import SramConfig
from hw.program import Kind, Location, Operand
from hw.systolic.config import ArrayConfig
from hw.systolic.mapping import K_CYCLES
from hw.systolic.timing import tile_counters
from npulab.simulate import simulate


def _chip(cores=1, l2_kib=0, **kw) -> ChipConfig:
    return load_chip_config(overrides=[f"chip.cores={cores}", f"l2.capacity_kib={l2_kib}",
                                       *(f"{k}={v}" for k, v in kw.items())])


# ---- config ---------------------------------------------------------------------------------

def test_one_core_without_l2_dumps_as_before_and_a_multicore_chip_round_trips():
    one = chip_config_to_dict(ChipConfig())
    assert "cores" not in one["chip"] and "l2" not in one and "noc" not in one
    chip = _chip(4, 2048, **{"noc.topology": "mesh", "noc.link_bytes_per_cycle": 32})
    data = chip_config_to_dict(chip)
    assert data["chip"]["cores"] == 4 and data["l2"]["capacity_kib"] == 2048
    assert chip_config_from_dict(tomllib.loads(chip_config_to_toml(chip))) == chip
    assert chip.peak_macs_per_cycle == 4 * chip.array.pes and chip.multicore
    assert not ChipConfig().multicore


@pytest.mark.parametrize("override, message", [
    ("chip.cores=0", "chip.cores = 0: must be an integer in 1..4096"),
    ("chip.cores=2.5", "chip.cores = 2.5: must be an integer"),
    ("l2.capacity_kib=-1", "l2.capacity_kib = -1: must be a number in [0, "),
    ("l2.banks=0", "l2.banks = 0: must be an integer in 1..4096"),
    ("l2.latency_cycles=1e9", "l2.latency_cycles = 1000000000.0: must be an integer"),
    ("l2.keep_outputs=2", "l2.keep_outputs = 2: must be true or false"),
    ("l2.bank_hash=1", "l2.bank_hash = 1: must be true or false"),
    ("l2.interleave_bytes=0", "l2.interleave_bytes = 0: must be an integer in 1..1048576"),
    ("noc.topology=ring", "noc.topology = 'ring': must be one of 'crossbar', 'mesh'"),
    ("noc.link_bytes_per_cycle=0", "noc.link_bytes_per_cycle = 0: must be a number in (0, "),
    ("l2.size=4", "l2.size: unknown key; allowed keys in [l2]: capacity_kib"),
    ("chip.launch_overhead_by_op.softmax=-1",
     "chip.launch_overhead_by_op.softmax = -1: must be a number in [0, 1e+06]"),
])
def test_bad_multicore_values_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as info:
        load_chip_config(overrides=[override])
    assert message in str(info.value) and "\n" not in str(info.value)


# ---- the network's formulas ------------------------------------------------------------------

def _mesh_gold(cores: int) -> tuple[float, float]:
    """Mean XY hops between every pair of nodes of the mesh (every node is a slice too), and
    the largest load on one link when every node sends one byte to every node (uniform traffic,
    XY routing): the bisection bound in a form counted link by link."""
    noc = NocConfig(topology="mesh")
    rows, cols = noc.dims(cores)
    nodes = [(r, c) for r in range(rows) for c in range(cols)]
    load: dict = {}
    hops = 0
    for (r0, c0), (r1, c1) in itertools.product(nodes, nodes):
        hops += abs(r0 - r1) + abs(c0 - c1)
        c = c0
        while c != c1:                       # X first
            step = 1 if c1 > c else -1
            load[(r0, c, c + step)] = load.get((r0, c, c + step), 0) + 1
            c += step
        r = r0
        while r != r1:
            step = 1 if r1 > r else -1
            load[(r, r + step, c1, "y")] = load.get((r, r + step, c1, "y"), 0) + 1
            r += step
    n = len(nodes)
    return hops / (n * n), max(load.values()) / n     # bytes on the busiest link per node's byte


@pytest.mark.parametrize("cores", [4, 9, 16, 64])
def test_mesh_hops_and_throughput_match_an_enumeration_of_xy_routes(cores):
    noc = NocConfig(topology="mesh", link_bytes_per_cycle=1.0)
    mean_hops, busiest = _mesh_gold(cores)
    assert noc.mean_hops(cores) == pytest.approx(mean_hops)
    # every node injecting r bytes a cycle loads the busiest link with r * n * busiest / n...:
    # the network saturates at n / (n * busiest) bytes a cycle per node, in aggregate n / busiest
    # (k x k mesh: 4k bytes a cycle, Dally and Towles' 4b/k per node)
    assert noc.aggregate_bytes_per_cycle(cores) == pytest.approx(min(cores, cores / (cores * busiest) * cores))


def test_crossbar_is_one_hop_and_its_ports():
    noc = NocConfig(link_bytes_per_cycle=48, hop_latency_cycles=3)
    assert noc.mean_hops(108) == 1 and noc.latency_cycles(108) == 3
    assert noc.aggregate_bytes_per_cycle(108) == 108 * 48


# ---- split ----------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.integers(1, 16), st.integers(1, 700), st.integers(1, 700), st.integers(1, 5000),
       st.integers(1, 6))
def test_a_split_covers_the_op_with_at_most_the_cores(cores, m, n, k, batch):
    chip = _chip(cores)
    op = Gemm(name="g", m=m, n=n, k=k, batch=batch)
    split = choose_split(op, chip)
    assert 1 <= split.cores <= cores
    share = share_graph(Graph("x", (op,)), chip)[0].ops[0]
    assert share.m * split.m >= m and share.n * split.n >= n and share.batch * split.g >= batch
    assert share.k * split.k >= k and (share.k - 1) * split.k < k
    assert (share.m - 1) * split.m < m and (share.n - 1) * split.n < n   # shares are balanced
    assert choose_split(op, chip) == split                                # deterministic


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 4, 6, 8]), st.integers(1, 64), st.integers(1, 3000))
def test_a_broadcast_binary_shares_whole_rows(cores, rows, row):
    """A bias add (a row of ``row`` elements broadcast over ``rows`` rows) split over cores:
    each share holds whole rows (the row divides it) and the shares cover the op; a share
    smaller than one row reads that part of the row (here: one row over many cores)."""
    from compiler.ir import Binary
    op = Binary(name="bias", fn="add", elements=rows * row, other_elements=row)
    share = share_graph(Graph("x", (op,)), _chip(cores))[0].ops[0]
    assert share.elements % share.other_elements == 0
    assert share.elements * cores >= op.elements and share.elements <= op.elements
    assert share.other_elements == row or share.other_elements == share.elements < row


@pytest.mark.parametrize("l2_kib", [0, 4096])
def test_a_streamed_second_operand_is_split_like_the_first_not_shared(l2_kib):
    """A residual add's two operands are both split over the cores (each core reads its own
    slice of each, once, from DRAM: 2 tensors in all, with or without an L2); a broadcast bias
    is the same for every core: read once through an L2, once per core without one."""
    from compiler.ir import Binary
    chip = _chip(4, l2_kib)
    n = 1 << 20
    add = simulate(Graph("g", (Binary(name="add", fn="add", elements=n),)), chip).totals
    assert add["dram_read_bytes"] == 2 * n and add["dram_write_bytes"] == n
    bias = simulate(Graph("g", (Binary(name="b", fn="add", elements=n, other_elements=1024),)),
                    chip).totals
    assert bias["dram_read_bytes"] == n + 1024 * (1 if l2_kib else 4)


def test_copies_follow_what_the_cores_share():
    s = Split(m=3, n=4, g=2)
    assert (s.copies(Operand.IFMAP), s.copies(Operand.FILTER), s.copies(Operand.OFMAP)) == (6, 8, 24)
    k = Split(n=2, k=3)          # a K split: each core its own slice of A and of B
    assert (k.copies(Operand.IFMAP), k.copies(Operand.FILTER), k.cores) == (3, 6, 6)


def test_k_split_adds_the_partial_sums_when_the_output_is_too_small_for_the_cores(monkeypatch):
    """A 16 x 64 output is two 32 x 32 array tiles: four cores split K (split-K, as cuBLAS
    does when the output tiles cannot fill the GPU), each writes its partial sums and a vector
    op adds them: the partial sums' traffic is k x M x N elements written and read back, the
    sum M x N written (no L2: all of it through DRAM)."""
    import compiler.backends.multicore as mc
    chip = _chip(4)
    m, n, k = 16, 64, 16384
    graph = Graph("skinny", (Gemm(name="g", m=m, n=n, k=k),))
    split = choose_split(graph.ops[0], chip)
    assert split.k > 1 and split.cores == 4
    r = simulate(graph, chip)
    assert [(la.name, la.cores) for la in r.layers] == [("g", 4), ("g" + mc.REDUCE_SUFFIX, 4)]
    part, total = r.layers
    assert part.macs == m * n * k and total.engine == "vector" and total.macs == 0
    assert part.dram_write_bytes == split.k * m * n                      # int8: one byte each
    assert total.dram_read_bytes == split.k * m * n and total.dram_write_bytes == m * n
    one = simulate(graph, _chip(1))
    assert r.totals["cycles"] * 4 >= one.totals["cycles"]              # never beats 4 x one
    # every timing mode lists the same layers
    assert [la.name for la in simulate(graph, chip, timing="compute").layers] == ["g", "g.ksum"]
    # without the K split the rows and columns take the cores: slower on this output
    monkeypatch.setattr(mc, "MIN_K_SHARE", 1 << 40)
    mc._ranked_splits.cache_clear()
    try:
        no_k = simulate(graph, chip)
    finally:
        mc._ranked_splits.cache_clear()
    assert [la.name for la in no_k.layers] == ["g"]
    assert r.totals["cycles"] < 0.8 * no_k.totals["cycles"]
    # an output with enough tiles never splits K
    assert choose_split(Gemm(name="sq", m=512, n=1024, k=16384), chip).k == 1
    # nor does a GEMM with a fused epilogue: the activation needs whole sums
    from compiler.ir.vector import Activation
    fused = Graph("fused", (graph.ops[0], Activation(name="act", fn="gelu", elements=m * n,
                                                      inputs=("g",))))
    shares, splits = share_graph(fused, chip)
    assert splits["g"].k == 1 and [op.name for op in shares.ops] == ["g", "act"]
    assert simulate(fused, chip).layers[1].fused is not None


@pytest.mark.parametrize("cores, fused", [(4, True), (16, False)])
def test_conv_pool_runs_fused_or_apart_whichever_is_faster(monkeypatch, cores, fused):
    """ResNet's stem (a 64-channel 7x7 conv and its max-pool): fused, the pool's rows tie the
    split to the 64 output channels; apart, the conv splits along rows and the pool reads its
    output back. On the default chip's DDR4 the round trip costs more than the channel split
    loses on 4 cores and less on 16: the choice is the faster of the two simulated runs."""
    import compiler.backends.multicore as mc
    stem = Graph("stem", zoo.get("resnet18").ops[:2])
    chip = _chip(cores)
    chosen = simulate(stem, chip)
    assert (chosen.layers[1].fused is not None) == fused
    assert chosen.layers[0].cores == (4 if fused else 16)
    real = mc._conv_pool_cycles
    monkeypatch.setattr(mc, "_conv_pool_cycles",    # the other way round
                        lambda conv, pool, split, f, c: -real(conv, pool, split, f, c))
    other = simulate(stem, chip)
    assert (other.layers[1].fused is not None) != fused
    assert chosen.totals["cycles"] < other.totals["cycles"]


def test_fused_groups_keep_fusing_when_split():
    chip = _chip(8)
    graph = zoo.get("transformer_block", seq_len=256)
    from compiler.fusion import find_groups
    shares, splits = share_graph(graph, chip)
    assert ({g.anchor: g for g in find_groups(shares).values()}
            == {g.anchor: g for g in find_groups(graph).values()})
    assert max(s.cores for s in splits.values()) == 8


# ---- the L2's placement (Belady's policy) ----------------------------------------------------

def _min_misses(keys: list, capacity: int) -> int:
    """Fewest misses of a cache of ``capacity`` unit-size entries on ``keys`` (exhaustive over
    every choice of what to keep: the gold model Belady's policy is optimal against)."""
    best = [math.inf]

    def walk(j: int, held: frozenset, misses: int) -> None:
        if misses >= best[0]:
            return
        if j == len(keys):
            best[0] = misses
            return
        key = keys[j]
        if key in held:
            walk(j + 1, held, misses)
            return
        walk(j + 1, held, misses + 1)                     # bypass
        if len(held) < capacity:
            walk(j + 1, held | {key}, misses + 1)
        else:
            for out in held:
                walk(j + 1, (held - {out}) | {key}, misses + 1)
    walk(0, frozenset(), 0)
    return best[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.integers(1, 3))
def test_the_l2_keeps_tiles_as_the_optimal_policy(keys, capacity):
    place = Placement(_chip(2, l2_kib=capacity * 2))   # entries of 1 KiB: capacity x 2 KiB
    place.capacity = capacity * 1024                      # the tiles' share (no kept tensors)
    for index, key in enumerate(keys):
        place.pending(index, (key * 4096, 1, 0, 1, 0, 1024), 1)
    hits = place.resolve()
    assert len(keys) - len(hits) == _min_misses(keys, capacity)


# ---- the executor: shared resources and invariants -------------------------------------------

HUGE = SramConfig(capacity_kib=1 << 20, banks=1024, bank_width_bytes=1024, ports=2)


def test_cores_with_unlimited_memory_take_one_share_of_the_compute():
    """Ideal DRAM, L2 and network: four cores finish in one share's compute time (the timing
    engine's cycles of the share as one tile, plus one booking cycle per transfer side)."""
    chip = ChipConfig(array=ArrayConfig(rows=16, cols=16), ifmap_sram=HUGE, filter_sram=HUGE,
                      ofmap_sram=HUGE, dram=dram_preset("ideal"),
                      host_link=HostLinkConfig(ideal=True), dma=DmaConfig(descriptor_setup_cycles=0),
                      cores=4, noc=NocConfig(link_bytes_per_cycle=1e6, hop_latency_cycles=0))
    graph = Graph("g", (Gemm(name="g", m=256, n=512, k=64),))
    split = choose_split(graph.ops[0], chip)
    share = share_graph(graph, chip)[0].ops[0]
    cycles = execute(compile_graph(graph, chip), chip).cycles
    compute = int(tile_counters(chip.array, share.m, share.n, share.k, 1)[K_CYCLES])
    assert split.cores == 4 and 0 <= cycles - compute <= 4


def test_the_l2_bandwidth_bounds_the_run():
    """An L2 of 16 bytes a cycle: every load the L2 serves or fills books its bytes on it, so
    the run lasts at least the L2's busiest side's bytes / 16 cycles, and never overbooks."""
    chip = _chip(4, 4096, **{"l2.banks": 1, "l2.bank_width_bytes": 16})
    graph = Graph("g", (Gemm(name="g", m=256, n=256, k=256),))
    run = execute(compile_graph(graph, chip), chip)
    t = run.totals
    assert t["l2_read_port_cycles"] == pytest.approx(t["l2_read_bytes"] / 16, abs=len(run.trace.start))
    assert run.cycles >= max(t["l2_read_bytes"], t["l2_write_bytes"]) / 16
    assert t["l2_read_port_cycles"] <= run.cycles and t["noc_network_in_cycles"] <= run.cycles


MODELS = [("resnet18", {"image_size": 64}), ("mobilenetv2", {"image_size": 64}),
          ("transformer_block", {"seq_len": 128})]


@pytest.mark.parametrize("model, params", MODELS)
def test_invariants_cores_l2_and_utilizations(model, params):
    graph = zoo.get(model, **params)
    one = simulate(graph, _chip(1))
    four = simulate(graph, _chip(4))
    four_l2 = simulate(graph, _chip(4, 2048))
    # N cores never beat N x one core, op by op
    for a, b in zip(one.layers, four_l2.layers):
        if a.cycles and b.cycles and not a.fused:
            assert b.cycles >= a.cycles / 4 - 64, a.name
    # the L2 never adds DRAM traffic: what it cannot serve it fetches once
    assert four_l2.totals["dram_read_bytes"] <= four.totals["dram_read_bytes"]
    assert four_l2.totals["dram_write_bytes"] <= four.totals["dram_write_bytes"]
    for run in (four, four_l2):
        t, cycles = run.execution.totals, run.totals["cycles"]
        for key in ("l2_read_port_cycles", "l2_write_port_cycles", "noc_in_port_cycles",
                    "noc_out_port_cycles", "noc_network_in_cycles", "noc_network_out_cycles",
                    "array_busy_cycles"):
            assert t[key] <= cycles, key
        assert t["pe_busy_cycles"] <= cycles * run.totals["peak_macs_per_cycle"]
        assert run.totals["utilization_pct"] <= 100.0


def test_one_core_with_an_l2_serves_reuse_from_it():
    graph = zoo.get("resnet18", image_size=64)
    plain, l2 = simulate(graph, _chip(1)), simulate(graph, _chip(1, 4096))
    assert l2.totals["dram_read_bytes"] < plain.totals["dram_read_bytes"]
    e = l2.execution.totals
    # every load passes the L2: its hits and misses add up to what the core received from
    # memory (fills less the on-chip moves, plus partial sums)
    assert e["l2_hit_bytes"] + e["l2_miss_bytes"] == (e["ifmap_sram_fill_bytes"]
                                                      + e["filter_sram_fill_bytes"]
                                                      + e["ofmap_sram_fill_bytes"]
                                                      - e["onchip_move_bytes"]
                                                      + e["dram_psum_read_bytes"])


def test_kept_outputs_skip_dram_and_the_store_goes_to_the_l2():
    graph = Graph("g", (Gemm(name="a", m=128, n=128, k=128),
                        Gemm(name="b", m=128, n=128, k=128, inputs=("a",))))
    chip = _chip(2, 4096, **{"chip.model_input": '"dram"', "chip.model_output": '"dram"'})
    program = compile_graph(graph, chip)
    c = program.columns
    first = program.layers[0]
    stores = [i for i in range(first.first, first.last) if c["kind"][i] == Kind.STORE]
    assert stores and all(c["location"][i] == Location.L2 for i in stores)
    second = program.layers[1]
    a_loads = [i for i in range(second.first, second.last)
               if c["kind"][i] == Kind.LOAD and c["operand"][i] == Operand.IFMAP]
    assert a_loads and all(c["location"][i] == Location.L2 for i in a_loads)
    run = execute(program, chip)
    assert run.layers[0]["dram_ofmap_write_bytes"] == 0


def test_a_multicore_run_has_a_valid_timeline_and_the_same_lines_everywhere(tmp_path):
    """The DMA engines of a multi-core chip overlap transfers: the timeline puts them on extra
    tracks and stays a valid trace; the terminal's cores/L2/network lines are the HTML's."""
    from npulab.html_report import headline
    from npulab.report import multicore_items
    from npulab.timeline import chrome_trace, validate_trace
    graph = Graph("gemm", (Gemm(name="gemm", m=512, n=1024, k=1024),))
    r = simulate(graph, _chip(4, 2048))
    doc = chrome_trace(r)
    validate_trace(doc)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"core 0", "core 3", "load DMA 2"} <= names
    items = multicore_items(r.totals, r.spec)
    assert [k for k, _ in items] == ["cores", "L2", "network"]
    assert set(items) <= set(headline(r.summary()))


# ---- the mapper searches the split ------------------------------------------------------------

def test_the_mapper_chooses_among_the_best_estimated_splits_by_its_own_cost(monkeypatch):
    import compiler.backends.multicore as mc
    import compiler.backends.systolic as sy
    from compiler.backends.systolic import split_score, tile_problem
    from compiler.mapper import map_op
    from compiler.options import CompileOptions
    chip = _chip(4, 0, **{"chip.model_input": '"dram"', "chip.model_output": '"dram"'})
    op = Gemm(name="g", m=512, n=2048, k=2048)
    options = CompileOptions(map="best-latency")
    g, mu, unit, n, k, n_parts = mc._matrix_extents(op)
    few = g * -(-mu // chip.array.rows) * -(-n // chip.array.cols) < chip.cores
    ranked = mc._ranked_splits(g, mu, unit, n, k, n_parts, few, chip)
    assert len(ranked) > 1 and choose_split(op, chip) == ranked[0]   # the estimate's
    # gold: the mapper's latency of each candidate's share at one core's rate
    latency = {}
    for sp in ranked[:mc.MAPPER_SPLITS]:
        share = mc._share(op, sp)
        rate = mc.share_bytes_per_cycle(chip, sp.cores)
        best = map_op(tile_problem(share, chip, options), chip, "latency", keep=1,
                      bytes_per_cycle=rate).best
        extra = ((sp.k + 1) * -(-op.output_elements // sp.cores) * 1 / rate
                 if sp.k > 1 else 0.0)
        latency[sp] = best.latency_cycles + extra
    score = split_score(chip, options)
    chosen = choose_split(op, chip, score=score)
    assert latency[chosen] == min(latency.values()) and chosen != ranked[0]
    assert choose_split(op, chip, score=score) == chosen      # deterministic
    # the program runs the mapper's split: its share's rows
    program = compile_graph(Graph("g", (op,)), chip, options)
    assert program.layers[0].cores == chosen.cores
    assert share_graph(Graph("g", (op,)), chip, score)[0].ops[0].m == op.m // chosen.m
    # one core: nothing to choose
    assert split_score(_chip(1), options) is None
    assert choose_split(op, _chip(1), score=split_score(chip, options)) == Split()
    # and the simulation agrees: fewer cycles than the estimate's split, both mapped
    searched = simulate(Graph("g", (op,)), chip, options=options).totals["cycles"]
    monkeypatch.setattr(mc, "MAPPER_SPLITS", 1)
    sy._mapper_key.cache_clear()
    assert simulate(Graph("g", (op,)), chip, options=options).totals["cycles"] > searched
    sy._mapper_key.cache_clear()


def test_a_share_streams_at_its_port_its_share_of_the_network_and_of_what_is_below():
    from compiler.backends.multicore import share_bytes_per_cycle
    from compiler.mapper.search import stream_bytes_per_cycle
    l2 = _chip(8, 1024, **{"noc.link_bytes_per_cycle": 512})
    assert share_bytes_per_cycle(l2, 8) == l2.l2.bytes_per_cycle / 8      # 1024 B/cycle shared
    assert share_bytes_per_cycle(l2, 1) == 512                             # its port
    dram = _chip(4)
    rate = stream_bytes_per_cycle(dram.dram, dram.dma.max_outstanding, dram.clock_mhz)
    assert share_bytes_per_cycle(dram, 4) == pytest.approx(min(dram.noc.link_bytes_per_cycle,
                                                               rate / 4))


# ---- L2 banks ---------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(banks=st.sampled_from([1, 3, 4, 16]), g=st.sampled_from([1, 8, 64]),
       addr=st.integers(0, 3000), n2=st.integers(1, 3), n1=st.integers(1, 4),
       chunk=st.integers(1, 300), gap1=st.integers(0, 900), gap2=st.integers(0, 2000))
def test_busiest_bank_bytes_counts_every_byte_into_its_bank(banks, g, addr, n2, n1, chunk, gap1,
                                                            gap2):
    """The closed form equals placing each byte of the box in bank (address // g) mod banks."""
    from hw.memory.l2 import L2Config, busiest_bank_bytes
    cfg = L2Config(capacity_kib=64, banks=banks, interleave_bytes=g)
    s1 = chunk + gap1
    s2 = n1 * s1 + gap2
    hist = [0] * banks
    for i2 in range(n2):
        for i1 in range(n1):
            a = addr + i2 * s2 + i1 * s1
            for byte in range(a, a + chunk):
                hist[(byte // g) % banks] += 1
    assert busiest_bank_bytes(cfg, addr, n2, s2, n1, s1, chunk) == max(hist)


def test_plain_bank_interleaving_conflicts_and_hashed_banks_do_not():
    """Hashed banks (the default) book the L2 as before. Plain interleaving in 1 MiB stretches
    puts each tile in one bank: the L2 then runs as one bank of the same width, which a hashed
    one-bank L2 gives directly (to within the few tiles crossing a 1 MiB line); and every
    added cycle is counted as a conflict, never overbooking the L2."""
    graph = Graph("g", (Gemm(name="g", m=256, n=512, k=256),))
    kw = {"l2.banks": 8, "l2.bank_width_bytes": 16}
    hashed = execute(compile_graph(graph, _chip(4, 4096, **kw)), _chip(4, 4096, **kw))
    camp_chip = _chip(4, 4096, **kw, **{"l2.bank_hash": "false", "l2.interleave_bytes": 1 << 20})
    camped = execute(compile_graph(graph, camp_chip), camp_chip)
    one_chip = _chip(4, 4096, **{"l2.banks": 1, "l2.bank_width_bytes": 16})
    one = execute(compile_graph(graph, one_chip), one_chip)
    assert hashed.totals["l2_conflict_cycles"] == 0
    t = camped.totals
    assert t["l2_conflict_cycles"] > 0 and camped.cycles > hashed.cycles
    assert one.cycles == pytest.approx(camped.cycles, rel=0.02)
    assert t["l2_read_port_cycles"] <= camped.cycles and t["l2_write_port_cycles"] <= camped.cycles
    # 16-byte interleaving spreads these tiles' rows (multiples of 8 x 16 bytes) evenly
    fine_chip = _chip(4, 4096, **kw, **{"l2.bank_hash": "false", "l2.interleave_bytes": 16})
    fine = execute(compile_graph(graph, fine_chip), fine_chip)
    assert fine.totals["l2_conflict_cycles"] == 0 and fine.cycles == hashed.cycles


def test_the_network_energy_is_its_bytes_times_the_mean_hops_times_the_table_figure():
    """The ``noc`` energy component: every byte on the network x 8 x the mesh's mean hops x
    ``[noc] pj_per_bit_hop``; a one-core chip has none; a saved run costs it the same."""
    from hw.energy import load_technology
    from npulab.metrics import compute_metrics
    from npulab.record import RunRecord
    graph = zoo.get("resnet18", image_size=32)
    chip = _chip(9, 2048, **{"noc.topology": "mesh"})
    run = simulate(graph, chip)
    tech = load_technology()
    network = compute_metrics(run, tech).network
    noc_bytes = run.execution.totals["noc_bytes"]
    hops = (3 * 3 - 1) / 9 * 2                       # 3x3 mesh: (c^2-1)/(3c) per dimension
    assert chip.noc.mean_hops(9) == pytest.approx(hops)
    expect = noc_bytes * 8 * hops * tech.noc_pj_per_bit_hop * 1e-12
    assert network["energy_breakdown_j"]["noc"] == pytest.approx(expect, rel=1e-6)
    saved = RunRecord.from_dict(run.to_dict())
    assert compute_metrics(saved, tech).network["energy_breakdown_j"]["noc"] == \
        pytest.approx(expect, rel=1e-12)
    one = compute_metrics(simulate(graph, _chip(1)), tech).network
    assert "noc" not in one["energy_breakdown_j"]
