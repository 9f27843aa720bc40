"""The mapper: its space is the documented one, its Numba cost equals a pure-Python gold model
built from the tiler's own formulas and the timing engine, the exhaustive search finds the
brute-force optimum, the chosen mapping runs in the executor with exactly the predicted counters
and energies, and results are reproducible."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.backends.systolic import tile_problem, compile_graph
from compiler.backends.systolic_tiling import (
    TilingError, _a_pass, _b_bytes, _burst, _c_bytes, _candidates, _psum_resident,
    _reuse_factor, _traffic, choose_tiling, tile_sizes,
)
from compiler.ir import Conv2d, Gemm, Graph
from compiler.mapper import build_space, distinct_trip_sizes, map_op
from compiler.mapper import cost as C
from compiler.mapper.search import _Search, mapper_parameters, stream_bytes_per_cycle
from compiler.mapper.space import TILE
from compiler.options import ORDERS, CompileOptions
from hw.chip import ChipConfig
from hw.energy import load_technology
from hw.memory.dma import DmaConfig
from hw.memory.dram import dram_preset
from hw.memory.link import HostLinkConfig
from hw.memory.sram import SramConfig
from hw.systolic.config import ArrayConfig, Dataflow
from hw.systolic.mapping import K_BUSY, K_CYCLES, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES
from hw.systolic.timing import tile_counters

TECH = load_technology("45nm")
IDEAL = dict(dram=dram_preset("ideal"), host_link=HostLinkConfig(ideal=True),
             dma=DmaConfig(descriptor_setup_cycles=0), model_input="dram", model_output="dram")
DRAM_IO = dict(model_input="dram", model_output="dram")


def _chip(kib_a, kib_b, kib_c, dataflow="ws", rows=4, cols=4, ideal=False) -> ChipConfig:
    extra = IDEAL if ideal else DRAM_IO
    return ChipConfig(array=ArrayConfig(rows=rows, cols=cols, dataflow=dataflow),
                      ifmap_sram=SramConfig(capacity_kib=kib_a),
                      filter_sram=SramConfig(capacity_kib=kib_b),
                      ofmap_sram=SramConfig(capacity_kib=kib_c), **extra)


def _conv(hw, cin, cout, kern, stride=1, pad=0, groups=1, batch=1, name="c"):
    return Conv2d(name=name, in_h=hw, in_w=hw, in_channels=cin * groups,
                  out_channels=cout * groups, kernel_h=kern, kernel_w=kern, stride_h=stride,
                  stride_w=stride, pad_top=pad, pad_bottom=pad, pad_left=pad, pad_right=pad,
                  groups=groups, batch=batch)


# ---- the gold model: every tile enumerated, the tiler's formulas, the documented estimate ----

def reference(p, chip, gt, mu, nt, ku, order, df, input_resident=False, output_resident=False):
    """Counters, latency estimate and energy of one mapping, in plain Python over every tile."""
    arr = replace(chip.array, dataflow=df)
    bits, ab = p.elem_bits, p.acc_bytes

    def nb(x):          # bytes of x operands, packed below a byte (hw.packing)
        return -(-x * bits // 8)

    ideal = chip.dram.is_ideal
    burst = 1 if ideal else chip.dram.request_bytes
    mtiles = p.m_tiles(mu)
    ntl, ktl, gtl = tile_sizes(p.n, nt), tile_sizes(p.k_units, ku), tile_sizes(p.count, gt)
    sums = Counter()
    for _, gsz in gtl:
        for _, units, _ in mtiles:
            for _, nsz in ntl:
                for _, ksz in ktl:
                    v = tile_counters(arr, units * p.unit_pixels, nsz, ksz * p.k_unit, gsz)
                    for name, idx in (("comp", K_CYCLES), ("busy", K_BUSY), ("left", K_LEFT_READS),
                                      ("top", K_TOP_READS), ("writes", K_WRITES),
                                      ("psum", K_PSUM_READS)):
                        sums[name] += v[idx]
    trips = {"m": len(mtiles), "n": len(ntl), "k": len(ktl)}
    k_sizes = Counter(s for _, s in ktl)
    n_sizes = Counter(s for _, s in ntl)
    passes = []
    for unit in (burst, 1):
        a = _a_pass(p, mtiles, k_sizes, bits, unit)
        b = sum(kc * nc * _b_bytes(p, ks * p.k_unit, ns, bits, unit)
                for ks, kc in k_sizes.items() for ns, nc in n_sizes.items())
        c = sum(nc * _c_bytes(p, mt, ns, bits, unit) for mt in mtiles
                for ns, nc in n_sizes.items())
        acc = sum(nc * _burst(mt[1] * p.unit_pixels * ns * ab, unit)
                  for mt in mtiles for ns, nc in n_sizes.items())
        passes.append((a, b, c, acc))
    bus, exact = (_traffic(order, trips, input_resident, output_resident, *ps) * p.count
                  for ps in passes)
    # loads, stores and bytes per engine (the documented estimate)
    g_trips = len(gtl)
    ra, rb = _reuse_factor(order, trips, "mk"), _reuse_factor(order, trips, "kn")
    ps = 0 if _psum_resident(order, trips) else trips["k"] - 1
    tmn = trips["m"] * trips["n"]
    loads = g_trips * ((0 if input_resident else trips["m"] * trips["k"] * ra)
                       + trips["k"] * trips["n"] * rb + ps * tmn) + (1 if input_resident else 0)
    stores = g_trips * ((0 if output_resident else tmn) + ps * tmn)
    a_bus, b_bus, c_bus, acc_bus = passes[0]
    load_bus = ((0 if input_resident else a_bus * ra) + b_bus * rb + ps * acc_bus) * p.count
    store_bus = ((0 if output_resident else c_bus) + ps * acc_bus) * p.count
    assert load_bus + store_bus == bus
    setup = chip.dma.descriptor_setup_cycles
    bwinv = 0.0 if ideal else 1 / stream_bytes_per_cycle(chip.dram, chip.dma.max_outstanding,
                                                          chip.clock_mhz)
    max_rows = max(t[2] for t in mtiles)
    a_fp = max_rows * p.in_w * nb(ku) if p.lowering == "direct" else mu * nb(ku)
    b_fp = ku * p.k_unit * nt * bits / 8
    in_bytes = 0
    if input_resident:
        in_bytes = p.input_bytes
        move = min(chip.ofmap_sram.bytes_per_cycle, chip.ifmap_sram.bytes_per_cycle)
        first = setup + -(-in_bytes // move) + setup + math.ceil(gt * b_fp * bwinv)
    else:
        first = 2 * setup + math.ceil((gt * a_fp + gt * b_fp) * bwinv)
    last = 0 if output_resident else setup + math.ceil(
        gt * mu * p.unit_pixels * nb(nt) * bwinv)
    mem = max(math.ceil(bus * bwinv), setup * loads + math.ceil(load_bus * bwinv),
              setup * stores + math.ceil(store_bus * bwinv))
    latency = max(sums["comp"] + first + last, mem)
    # energy: npulab.metrics' actions and per-action energies
    a_ex, b_ex, c_ex, acc_ex = passes[1]
    ra_bytes = 0 if input_resident else a_ex * ra * p.count
    fill_a = in_bytes if input_resident else ra_bytes
    fill_b = b_ex * rb * p.count
    drain = ((0 if output_resident else c_ex) + ps * acc_ex) * p.count + in_bytes
    if df is Dataflow.IS:
        if_reads, fi_reads = sums["top"], sums["left"]
    else:
        if_reads, fi_reads = sums["left"], sums["top"]
    op, acc = arr.precision.bits, arr.acc_bits
    macs = p.count * p.m * p.n * p.k

    def pj(name, write=False):
        s = chip.sram(name)
        return TECH.sram_pj_per_bit(int(s.capacity_kib * 1024) / s.banks, write)

    kind = "ddr4" if ideal else chip.dram.preset[:4]
    energy = {
        "mac": macs * TECH.mac_pj(arr.precision.value, acc) * 1e-12,
        "rf": macs * ((2 * op if df is Dataflow.OS else op) + acc) * TECH.register_pj_per_bit * 1e-12,
        "sram.ifmap": (if_reads * op * pj("ifmap") + 8 * fill_a * pj("ifmap", True)) * 1e-12,
        "sram.filter": (fi_reads * op * pj("filter") + 8 * fill_b * pj("filter", True)) * 1e-12,
        "sram.ofmap": ((sums["psum"] * acc + 8 * drain) * pj("ofmap")
                       + sums["writes"] * acc * pj("ofmap", True)) * 1e-12,
        "dram": 8 * (exact if ideal else bus) * TECH.dram_energy_pj_per_bit(kind) * 1e-12,
    }
    area = arr.pes * TECH.mac_area_um2(arr.precision.value, acc) / 1e6 + sum(
        TECH.sram_area_mm2(int(chip.sram(n).capacity_kib * 1024)) for n in ("ifmap", "filter", "ofmap"))
    energy["static"] = TECH.leakage_w(area) * latency / chip.clock_hz
    total = sum(energy.values())
    return {"latency_cycles": latency, "compute_cycles": sums["comp"], "dram_bus_bytes": bus,
            "dram_bytes": exact, "tiles": g_trips * trips["m"] * trips["n"] * trips["k"],
            "pe_busy_cycles": sums["busy"], "ifmap_sram_reads": if_reads,
            "filter_sram_reads": fi_reads, "ofmap_sram_writes": sums["writes"],
            "ofmap_sram_reads": sums["psum"], "ifmap_sram_fill_bytes": fill_a,
            "filter_sram_fill_bytes": fill_b, "ofmap_sram_drain_bytes": drain,
            "loads": loads, "stores": stores, "energy": energy, "energy_j": total,
            "edp_js": total * latency / chip.clock_hz}


def _objective(ref, objective):
    return {"latency": ref["latency_cycles"], "energy": ref["energy_j"],
            "edp": ref["edp_js"]}[objective]


def _space_candidates(space):
    ig, im, i_n, ik = space.all_combos()
    return [(int(space.g[a, TILE]), int(space.m[b, TILE]), int(space.n[c, TILE]),
             int(space.k[d, TILE])) for a, b, c, d in zip(ig, im, i_n, ik)]


def _kernel_details(p, chip, dfs, combos, objective="latency", ir=False, orr=False):
    """Kernel detail rows for explicit candidates (tile values) via the search's evaluator."""
    space = build_space(p, chip, dfs, input_resident=ir, output_resident=orr)
    pint, pflt = mapper_parameters(p, chip, TECH, objective, input_resident=ir,
                                   output_resident=orr)
    s = _Search(space, chip, dfs, ORDERS, pint, pflt, 1)
    index = [{int(v): i for i, v in enumerate(tab[:, TILE])}
             for tab in (space.g, space.m, space.n, space.k)]
    idx = np.array([[index[d][c[d]] for d in range(4)] + [c[4]] for c in combos], np.int64)
    det_i, det_f = s.run(idx[:, 0], idx[:, 1], idx[:, 2], idx[:, 3], idx[:, 4], detail=True)
    return det_i, det_f


# ---- the space ------------------------------------------------------------------------------

def test_space_is_distinct_trip_counts_plus_the_tilers_grid():
    op = _conv(14, 6, 10, 3, pad=1, batch=3)
    chip = _chip(64, 64, 64, rows=8, cols=8)
    p = tile_problem(op, chip, CompileOptions())
    space = build_space(p, chip, (Dataflow.WS, Dataflow.OS))
    # hand check of the trip rule: 10 -> tiles of 10, 5, 4, 3, 2, 1 (1, 2, 3, 4, 5, 10 trips)
    assert distinct_trip_sizes(10).tolist() == [1, 2, 3, 4, 5, 10]
    rows = {math.ceil(14 / t) for t in range(2, 15)}
    images = {14 * math.ceil(3 / t) for t in range(1, 4)}
    grid_m = set()
    for df, gm in ((Dataflow.WS, 16), (Dataflow.OS, 8)):
        grid_m |= {u for u in _candidates(42, -(-gm // 14)) if u < 14}
        grid_m |= {14 * i for i in _candidates(3, 1)}
    assert set(space.m[:, TILE].tolist()) == rows | images | grid_m
    assert set(space.n[:, TILE].tolist()) == set(distinct_trip_sizes(10).tolist()) | set(
        _candidates(10, 8))
    assert set(space.k[:, TILE].tolist()) == set(distinct_trip_sizes(6).tolist()) | set(
        _candidates(6, 8)) | set(_candidates(6, 2))


# ---- the cost kernel equals the gold model ---------------------------------------------------

gemms = st.builds(lambda m, n, k, b: Gemm(name="g", m=m, n=n, k=k, batch=b),
                  st.integers(1, 90), st.integers(1, 90), st.integers(1, 90), st.integers(1, 3))
convs = st.builds(_conv, st.integers(5, 16), st.integers(1, 12), st.integers(1, 12),
                  st.sampled_from([1, 3]), st.integers(1, 2), st.integers(0, 1),
                  st.sampled_from([1, 1, 2]), st.integers(1, 2))


@settings(max_examples=25, deadline=None)
@given(op=st.one_of(gemms, convs), kib=st.sampled_from([1, 2, 8]),
       lowering=st.sampled_from(["direct", "im2col"]), ideal=st.booleans(),
       res=st.sampled_from([(False, False), (True, False), (False, True)]), seed=st.integers(0, 99))
def test_kernel_counters_and_energy_equal_the_gold_model(op, kib, lowering, ideal, res, seed):
    chip = _chip(kib, kib, kib, ideal=ideal)
    p = tile_problem(op, chip, CompileOptions(conv_lowering=lowering))
    dfs = (Dataflow.OS, Dataflow.WS, Dataflow.IS)
    ir, orr = res
    if orr and p.count * p.m * p.n * p.elem_bytes >= chip.ofmap_sram.capacity_bytes:
        orr = False
    space = build_space(p, chip, dfs, input_resident=ir, output_resident=orr)
    cands = _space_candidates(space)
    if not cands:
        return
    rng = np.random.default_rng(seed)
    picks = [cands[i] + (int(rng.integers(3)),) for i in rng.choice(len(cands), min(6, len(cands)))]
    det_i, det_f = _kernel_details(p, chip, dfs, picks, ir=ir, orr=orr)
    for j, (gt, mu, nt, ku, d) in enumerate(picks):
        for o, order in enumerate(ORDERS):
            ref = reference(p, chip, gt, mu, nt, ku, order, dfs[d], ir, orr)
            got = dict(zip(C.DETAIL_INT, det_i[j, o].tolist()))
            for name in got:
                if name in ref:
                    assert got[name] == ref[name], (name, (gt, mu, nt, ku, order, dfs[d]))
            energy = dict(zip(C.DETAIL_FLOAT, det_f[j, o].tolist()))
            for name, value in ref["energy"].items():
                assert energy[name] == pytest.approx(value, rel=1e-12, abs=1e-18), name
            assert energy["energy_j"] == pytest.approx(ref["energy_j"], rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(op=st.one_of(gemms, convs), kib=st.sampled_from([1, 4, 16]),
       dataflow=st.sampled_from(["os", "ws", "is"]), order=st.sampled_from([None, *ORDERS]))
def test_tilers_choice_costs_the_same_in_the_mapper(op, kib, dataflow, order):
    """Same tiling -> same DRAM bytes and compute cycles as choose_tiling, and the mapper's
    latency optimum is never worse than the tiler's choice under the mapper's cost."""
    chip = _chip(kib, kib, kib, dataflow=dataflow, rows=8, cols=8)
    p = tile_problem(op, chip, CompileOptions())
    try:
        t = choose_tiling(p, chip, order=order)
    except TilingError:
        with pytest.raises(TilingError, match="no tiling fits"):
            map_op(p, chip, orders=order)
        return
    det_i, _ = _kernel_details(p, chip, (chip.array.dataflow,),
                               [(t.group_tile, t.m_units, t.n_tile, t.k_units, 0)])
    got = dict(zip(C.DETAIL_INT, det_i[0, ORDERS.index(t.order)].tolist()))
    assert got["dram_bytes"] == t.dram_bytes
    assert got["compute_cycles"] == t.compute_cycles
    assert got["tiles"] == t.tiles
    best = map_op(p, chip, "latency", orders=order)
    assert best.best.latency_cycles <= got["latency_cycles"]


# ---- the search ------------------------------------------------------------------------------

small_gemms = st.builds(lambda m, n, k, b: Gemm(name="g", m=m, n=n, k=k, batch=b),
                        st.integers(1, 24), st.integers(1, 24), st.integers(1, 24),
                        st.integers(1, 2))
small_convs = st.builds(_conv, st.integers(4, 9), st.integers(1, 8), st.integers(1, 8),
                        st.sampled_from([1, 3]), st.integers(1, 2), st.integers(0, 1),
                        st.sampled_from([1, 2]), st.integers(1, 2))


@settings(max_examples=8, deadline=None)
@given(op=st.one_of(small_gemms, small_convs), kib=st.sampled_from([0.5, 1, 4]),
       objective=st.sampled_from(["latency", "energy", "edp"]), ideal=st.booleans(),
       multi=st.booleans())
def test_exhaustive_search_finds_the_brute_force_optimum(op, kib, objective, ideal, multi):
    chip = _chip(kib, kib, kib, ideal=ideal)
    p = tile_problem(op, chip, CompileOptions())
    dfs = (Dataflow.OS, Dataflow.WS, Dataflow.IS) if multi else (Dataflow.WS,)
    space = build_space(p, chip, dfs)
    cands = _space_candidates(space)
    try:
        result = map_op(p, chip, objective, dataflows=dfs, tech=TECH)
    except TilingError:
        assert not cands
        return
    assert result.exhaustive
    assert result.space_size == len(cands) * 6 * len(dfs) == result.evaluated
    values = {}
    for gt, mu, nt, ku in cands:
        for df in dfs:
            for order in ORDERS:
                ref = reference(p, chip, gt, mu, nt, ku, order, df)
                values[(gt, mu, nt, ku, order, df)] = _objective(ref, objective)
    optimum = min(values.values())
    b = result.best
    chosen = values[(b.group_tile, b.m_units, b.n_tile, b.k_units, b.order, b.dataflow)]
    assert chosen == pytest.approx(optimum, rel=1e-12)
    assert b.objective == pytest.approx(optimum, rel=1e-12)
    # the ranking is sorted and starts with the best
    objs = [m.objective for m in result.ranked]
    assert objs == sorted(objs) and result.top(1)[0] == b


def test_results_are_identical_across_runs_exhaustive_and_pruned():
    op = _conv(28, 32, 48, 3, pad=1)
    chip = ChipConfig(**DRAM_IO)
    p = tile_problem(op, chip, CompileOptions())
    for kw in ({}, {"exhaustive_limit": 0, "samples": 3000, "seed": 7}):
        a = map_op(p, chip, "edp", **kw)
        b = map_op(p, chip, "edp", **kw)
        assert a == b   # every field but the wall time
        assert a.ranked == b.ranked and a.best.index == b.best.index
    assert not map_op(p, chip, exhaustive_limit=0, samples=10).exhaustive


@pytest.mark.parametrize("op, objective", [
    (_conv(28, 64, 64, 3, pad=1, name="mid_conv"), "latency"),
    (_conv(14, 128, 96, 3, pad=1, name="deep_conv"), "energy"),
    (Gemm(name="fc", m=96, n=500, k=300), "edp"),
])
def test_pruned_search_is_close_to_exhaustive_and_never_worse_than_the_grid(op, objective):
    chip = _chip(32, 32, 32, rows=16, cols=16)
    p = tile_problem(op, chip, CompileOptions())
    full = map_op(p, chip, objective, exhaustive_limit=10**9)
    pruned = map_op(p, chip, objective, exhaustive_limit=0, samples=2000)
    assert full.exhaustive and not pruned.exhaustive
    assert pruned.space_size == full.space_size
    assert pruned.evaluated < full.evaluated
    assert full.best.objective <= pruned.best.objective <= 1.02 * full.best.objective
    # the grid phase alone: the pruned result is never worse
    space = build_space(p, chip, (chip.array.dataflow,))
    pint, pflt = mapper_parameters(p, chip, TECH, objective, input_resident=False,
                                   output_resident=False)
    s = _Search(space, chip, (chip.array.dataflow,), ORDERS, pint, pflt, 1)
    ig, im, i_n, ik = space.grid_combos(chip.array.dataflow)
    s.run(ig, im, i_n, ik, np.zeros(len(ig), np.int64))
    assert pruned.best.objective <= s.best[0][0]


# ---- the chosen mapping in the executor and the metrics --------------------------------------

@pytest.mark.parametrize("dram", ["ideal", "ddr4-3200", "hbm2"])
@pytest.mark.parametrize("op", [
    _conv(20, 24, 40, 3, pad=1, name="conv"),
    _conv(12, 8, 8, 3, pad=1, groups=4, batch=2, name="grouped"),
    Gemm(name="fc", m=50, n=300, k=200, batch=2),
    Gemm(name="fc_int4", m=50, n=300, k=200, batch=2, w_bits=4),   # weights stored in 4 bits
    # N:M sparse weights, compressed, on 2:4 sparse PEs (K tiles ending inside a group)
    Gemm(name="fc_2of4", m=50, n=300, k=202, batch=2, weight_nm=(2, 4)),
    replace(_conv(12, 10, 16, 3, pad=1, name="conv_1of4"), weight_nm=(1, 4)),
    # zero activations gate MAC energy (the mapper's objective charges the same)
    Gemm(name="fc_zeros", m=50, n=300, k=200, act_zeros=0.4),
    # weights kept in unstructured-sparse formats (CompileOptions.weight_format, below)
    Gemm(name="fc_csr", m=50, n=300, k=200, weight_density=0.3),
    replace(_conv(12, 10, 16, 3, pad=1, name="conv_bitmask"), weight_density=0.2),
    # operands packed below a byte in the chip's memories (hw.packing): int4 and binary,
    # odd extents whose rows are padded to whole bytes, grouped channels that fill bytes
    Gemm(name="fc_packed_int4", m=50, n=301, k=203, batch=2),
    _conv(12, 8, 16, 3, pad=1, groups=2, name="conv_packed_int4"),
    Gemm(name="fc_packed_binary", m=40, n=300, k=200),
    _conv(10, 8, 16, 3, pad=1, name="conv_packed_binary"),
])
def test_executor_and_metrics_count_what_the_mapper_predicted(op, dram):
    from npulab.metrics import compute_metrics
    from npulab.simulate import simulate
    ideal = dram == "ideal"
    chip = _chip(8, 8, 8, rows=8, cols=8, ideal=ideal)
    if "_packed_" in op.name:       # and PEs doing 2 int4 or 8 binary MACs a cycle
        precision = op.name.split("_")[-1]
        chip = replace(chip, array=replace(chip.array, precision=precision, acc_bits=None,
                                           macs_per_pe=2 if precision == "int4" else 8))
    if getattr(op, "weight_nm", None):
        chip = replace(chip, array=replace(chip.array, sparse_m=4))
    if not ideal:
        chip = replace(chip, dram=dram_preset(dram))
    options = CompileOptions(map="best-energy", keep_on_chip=False, tech="45nm",
                             weight_format={"fc_csr": "csr",
                                            "conv_bitmask": "bitmask"}.get(op.name))
    p = tile_problem(op, chip, options)
    mp = map_op(p, chip, "energy", tech="45nm").best
    program = compile_graph(Graph("t", (op,)), chip, options)
    t = program.layers[0].tiling
    assert (t.group_tile, t.m_tile, t.n_tile, t.k_tile, t.order) == (
        mp.group_tile, mp.m_tile, mp.n_tile, mp.k_tile, mp.order)
    assert t.estimated_cycles == mp.latency_cycles
    run = simulate(Graph("t", (op,)), chip, options=options)
    c = run.execution.layers[0]
    k = mp.counters
    for name in ("ifmap_sram_reads", "filter_sram_reads", "ofmap_sram_writes", "ofmap_sram_reads",
                 "ifmap_sram_fill_bytes", "filter_sram_fill_bytes", "ofmap_sram_drain_bytes",
                 "dram_ifmap_read_bytes", "dram_filter_read_bytes", "dram_psum_read_bytes",
                 "dram_ofmap_write_bytes", "dram_psum_write_bytes", "pe_busy_cycles"):
        assert c[name] == k[name], name
    assert c["array_busy_cycles"] == mp.compute_cycles
    assert c["computes"] == mp.tiles
    assert c["loads"] == k["loads"] and c["stores"] == k["stores"]
    metrics = compute_metrics(run, "45nm")
    layer = metrics.layers[0]["energy_breakdown_j"]
    for name in ("mac", "rf", "sram.ifmap", "sram.filter", "sram.ofmap"):
        assert layer[name] == pytest.approx(mp.energy_breakdown_j[name], rel=1e-12), name
    # Where the two count differently (the mapper's latency is an estimate, its bus bytes a
    # formula) they charge the same rates (hw.energy.rates): leakage power, and pJ per DRAM bit
    # of the same DRAM type (an ideal DRAM's assumed to be DDR4 by both).
    assert metrics.chip["dram"]["kind"] == {"ideal": "ddr4", "ddr4-3200": "ddr4",
                                            "hbm2": "hbm2"}[dram]
    seconds = mp.latency_cycles / chip.clock_hz
    assert mp.energy_breakdown_j["static"] == pytest.approx(
        metrics.chip["static_power_w"] * seconds, rel=1e-12)
    mapper_bits = 8 * (mp.dram_bytes if ideal else mp.dram_bus_bytes)
    assert mp.energy_breakdown_j["dram"] / mapper_bits == pytest.approx(
        layer["dram"] / run.layers[0].actions.dram_bits, rel=1e-12)
    if ideal:
        assert layer["dram"] == pytest.approx(mp.energy_breakdown_j["dram"], rel=1e-12)
    else:
        # The executor's bus bytes are whole 64-byte column requests per chunk at its real
        # address; the formula rounds each chunk from an aligned start, so a chunk that
        # straddles a request boundary costs one request more: at most one per transfer.
        bus = c["dram_bus_read_bytes"] + c["dram_bus_write_bytes"]
        assert mp.dram_bus_bytes <= bus
        cols = program.columns
        transfers = (cols["kind"] == 0) | (cols["kind"] == 1)
        chunks = int((cols["n2"] * cols["n1"])[transfers].sum())
        assert bus - mp.dram_bus_bytes <= 64 * chunks


# ---- errors ---------------------------------------------------------------------------------

def test_bad_arguments_are_clear_errors():
    chip = _chip(8, 8, 8)
    p = tile_problem(Gemm(name="fc", m=8, n=8, k=8), chip, CompileOptions())
    with pytest.raises(ValueError, match=r"objective = 'speed'.*latency, energy, edp"):
        map_op(p, chip, "speed")
    with pytest.raises(ValueError, match=r"dataflows: 'rs'.*os, ws, is"):
        map_op(p, chip, dataflows=("rs",))
    with pytest.raises(ValueError, match=r"orders = \('mmk',\)"):
        map_op(p, chip, orders=("mmk",))
    with pytest.raises(ValueError, match=r"samples = -1: must be an integer >= 0"):
        map_op(p, chip, samples=-1)
    with pytest.raises(ValueError, match=r"map = 'fastest'.*best-latency, best-energy, best-edp"):
        CompileOptions(map="fastest")
    with pytest.raises(ValueError, match=r"objective = 'traffic' is the tiler's"):
        CompileOptions(map="best-edp", objective="traffic")
    big = _conv(512, 64, 64, 3, name="conv_big")
    tiny = replace(_chip(64, 64, 64), ifmap_sram=SramConfig(capacity_kib=0.25))
    with pytest.raises(TilingError, match=r"conv_big: no tiling fits.*ifmap scratchpad"):
        compile_graph(Graph("t", (big,)), tiny, CompileOptions(map="best-latency"))
