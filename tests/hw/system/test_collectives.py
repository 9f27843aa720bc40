"""Collectives (hw/system/collective*.py) against the alpha-beta-gamma closed forms of
Thakur, Rabenseifner & Gropp 2005, Chan et al. 2007 and Patarasuk & Yuan 2009 (the reference
table in docs/multichip.md), each written out here, on topologies where every logical step
has its own links: ring:8 for ring algorithms, fc:8 (one link per ordered pair) for direct,
rhd, tree and ps, switch:8 where the port is the bottleneck. Links: 25 GB/s, 500 ns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hw.system import analytic
from hw.system.collectives import (ALGORITHMS, OPS, applicable_algorithms, build_messages,
                                   collective, compare_algorithms)
from hw.system.topology import topology_from_spec

BW = 25e9                   # bytes/s per link direction (topology default)
BETA = 1 / BW
L = 500e-9                  # link latency
O = 1e-6                    # overhead_ns = 1000
GAMMA = 1 / 100e9           # reduce_gbps = 100
ALPHA = O + L               # one logical hop over one link
N = float(1 << 23)          # 8 MiB
P = 8
KW = dict(overhead_ns=1000.0, reduce_gbps=100.0)


@pytest.fixture(scope="module")
def ring8():
    return topology_from_spec("ring:8")


@pytest.fixture(scope="module")
def fc8():
    return topology_from_spec("fc:8")


def t(topo, op, alg, n=N, **kw):
    return collective(topo, op, n, algorithm=alg, **{**KW, **kw}).time_s


# ----------------------------------------------------------------------------- ring on ring:8
# ring:8 has two rings (forward, reverse) on disjoint link directions, each carrying n/2.

def test_ring_allreduce(ring8):
    h = N / 2
    want = 2 * (P - 1) * ALPHA + 2 * (P - 1) / P * h * BETA + (P - 1) / P * h * GAMMA
    assert t(ring8, "allreduce", "ring") == pytest.approx(want, rel=1e-9)


def test_ring_reducescatter_allgather(ring8):
    h = N / 2
    assert t(ring8, "reducescatter", "ring") == pytest.approx(
        (P - 1) * ALPHA + (P - 1) / P * h * (BETA + GAMMA), rel=1e-9)
    assert t(ring8, "allgather", "ring") == pytest.approx(
        (P - 1) * ALPHA + (P - 1) / P * h * BETA, rel=1e-9)


@pytest.mark.parametrize("c", [1, 4])
def test_ring_broadcast_is_a_pipelined_chain(ring8, c):
    # two chains of p-1 hops from the root (one per ring direction), n/2 each in c chunks:
    # H (S + L + o) + (c - 1)(S + o), S = n / 2 / c x beta
    s = N / 2 / c * BETA
    want = (P - 1) * (s + L + O) + (c - 1) * (s + O)
    assert t(ring8, "broadcast", "ring", chunks=c, root=3) == pytest.approx(want, rel=1e-9)


def test_ring_reduce_chain(ring8):
    # p-1 hops of n/2, each receiver reduces n/2 before forwarding (root: at the end)
    s = N / 2 * BETA
    want = (P - 1) * (s + L + O + N / 2 * GAMMA)
    assert t(ring8, "reduce", "ring", chunks=1) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("n, c", [(N, 4), (64e3, 4), (N, 16)])
def test_chunked_ring_allreduce_pipelines(ring8, n, c):
    # 2(p-1) steps; a port sends every step's c chunks in order, a chunk also waits for the
    # same chunk of the previous step to arrive. With S = n/2/p/c x beta (gamma = 0):
    # o + (c-1)(S+o) + (2p-3) max(S+L+o, c(S+o)) + S + L.
    s = n / 2 / P / c * BETA
    want = O + (c - 1) * (s + O) + (2 * P - 3) * max(s + L + O, c * (s + O)) + s + L
    got = collective(ring8, "allreduce", n, algorithm="ring", chunks=c, overhead_ns=1000.0)
    assert got.time_s == pytest.approx(want, rel=1e-9)
    # without per-message overhead, chunks hide latency: 3S + 13(S+L) + S + L for c = 4
    if n < 1e5:
        lean = collective(ring8, "allreduce", n, algorithm="ring", chunks=c).time_s
        assert lean == pytest.approx((c - 1) * s + (2 * P - 3) * (s + L) + s + L, rel=1e-9)
        assert lean < 2 * (P - 1) * (L + n / 2 / P * BETA)      # unchunked


# ----------------------------------------------------------------------------- rhd on fc:8

def test_rabenseifner_allreduce(fc8):
    lg = math.log2(P)
    want = 2 * lg * ALPHA + 2 * (P - 1) / P * N * BETA + (P - 1) / P * N * GAMMA
    assert t(fc8, "allreduce", "rhd") == pytest.approx(want, rel=1e-9)


def test_recursive_halving_doubling(fc8):
    lg = math.log2(P)
    assert t(fc8, "reducescatter", "rhd") == pytest.approx(
        lg * ALPHA + (P - 1) / P * N * (BETA + GAMMA), rel=1e-9)
    assert t(fc8, "allgather", "rhd") == pytest.approx(
        lg * ALPHA + (P - 1) / P * N * BETA, rel=1e-9)


def test_binomial_trees(fc8):
    lg = math.ceil(math.log2(P))
    assert t(fc8, "broadcast", "rhd", root=5) == pytest.approx(lg * (ALPHA + N * BETA), rel=1e-9)
    assert t(fc8, "scatter", "rhd") == pytest.approx(lg * ALPHA + (P - 1) / P * N * BETA,
                                                     rel=1e-9)
    assert t(fc8, "gather", "rhd") == pytest.approx(lg * ALPHA + (P - 1) / P * N * BETA,
                                                    rel=1e-9)
    assert t(fc8, "reduce", "rhd") == pytest.approx(lg * (ALPHA + N * BETA + N * GAMMA),
                                                    rel=1e-9)


def test_rabenseifner_non_power_of_two_fold():
    # p = 6 (latency 0, alpha = o): odd ranks 1, 3 hand n to 0, 2 (o + n beta), which reduce
    # it (n gamma), Rabenseifner on 4 ranks, result back (o + n beta).
    topo = topology_from_spec("fc:6", link_latency_ns=0)
    rab4 = 2 * 2 * O + 2 * 3 / 4 * N * BETA + 3 / 4 * N * GAMMA
    want = rab4 + 2 * (O + N * BETA) + N * GAMMA
    assert t(topo, "allreduce", "rhd") == pytest.approx(want, rel=1e-9)


# ----------------------------------------------------------------------------- direct

def test_direct_on_fc(fc8):
    blk = N / P
    assert t(fc8, "alltoall", "direct") == pytest.approx(ALPHA + blk * BETA, rel=1e-9)
    assert t(fc8, "allgather", "direct") == pytest.approx(ALPHA + blk * BETA, rel=1e-9)
    assert t(fc8, "reducescatter", "direct") == pytest.approx(
        ALPHA + blk * BETA + (P - 1) * blk * GAMMA, rel=1e-9)
    assert t(fc8, "allreduce", "direct") == pytest.approx(
        2 * (ALPHA + blk * BETA) + (P - 1) * blk * GAMMA, rel=1e-9)
    assert t(fc8, "broadcast", "direct") == pytest.approx(ALPHA + N * BETA, rel=1e-9)
    assert t(fc8, "scatter", "direct") == pytest.approx(ALPHA + blk * BETA, rel=1e-9)
    assert t(fc8, "gather", "direct") == pytest.approx(ALPHA + blk * BETA, rel=1e-9)
    assert t(fc8, "reduce", "direct") == pytest.approx(
        ALPHA + N * BETA + (P - 1) * N * GAMMA, rel=1e-9)


def test_direct_on_switch_is_port_bound():
    # every message crosses rank -> switch -> rank (2 hops); a rank's 7 messages share its
    # one 25 GB/s port: alpha + (p-1)/p n beta per phase
    sw = topology_from_spec("switch:8")
    a2 = O + 2 * L
    assert t(sw, "alltoall", "direct") == pytest.approx(a2 + (P - 1) / P * N * BETA, rel=1e-9)
    assert t(sw, "broadcast", "direct") == pytest.approx(a2 + (P - 1) * N * BETA, rel=1e-9)


@pytest.mark.parametrize("spec", ["switch:8", "fc:8"])
@pytest.mark.parametrize("op", ["alltoall", "allreduce"])
def test_no_rank_injects_faster_than_its_ports(spec, op):
    topo = topology_from_spec(spec)
    msgs, tail, group, alg, c, gs = build_messages(topo, op, N, algorithm="direct")
    res = collective(topo, op, N, algorithm="direct")
    sent = np.bincount(msgs.src, weights=msgs.nbytes, minlength=topo.n_ranks)
    for r in range(topo.n_ranks):
        assert sent[r] / res.time_s <= topo.injection_bytes_per_s(r)
    # all-reduce: two phases of (p-1)/p n each through the port; it cannot be faster
    phases = 2 if op == "allreduce" else 1
    port = topo.injection_bytes_per_s(0)
    assert res.time_s >= phases * (P - 1) / P * N / port


# ----------------------------------------------------------------------------- tree, ps

@pytest.mark.parametrize("c", [1, 8])
def test_pipelined_tree_broadcast(fc8, c):
    # heap-ordered binary tree of 8 ranks: depth 3; 3 (S + L + o) + (c-1)(S + o), S = n/c beta
    s = N / c * BETA
    want = 3 * (s + L + O) + (c - 1) * (s + O)
    assert t(fc8, "broadcast", "tree", chunks=c, root=2) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("c", [1, 8])
def test_double_binary_tree_allreduce(fc8, c):
    # two trees (link-disjoint on fc:8), n/2 each, reduced up 3 levels then broadcast down
    # 3: 6 hops; gamma = 0. 6 (S + L + o) + (c-1)(S + o), S = n/2/c beta
    s = N / 2 / c * BETA
    want = 6 * (s + L + O) + (c - 1) * (s + O)
    got = collective(fc8, "allreduce", N, algorithm="tree", chunks=c, overhead_ns=1000.0)
    assert got.time_s == pytest.approx(want, rel=1e-9)


def test_parameter_server(fc8):
    # 7 clients push n to rank 0 over their own links, rank 0 reduces 7 n, sends n back
    want = 2 * (ALPHA + N * BETA) + (P - 1) * N * GAMMA
    assert t(fc8, "allreduce", "ps") == pytest.approx(want, rel=1e-9)


# ----------------------------------------------------------------------------- hierarchical

def test_hierarchical_on_torus():
    # torus 4x4: levels = rows, then columns. Each phase: two rings of 4 (n/2 each).
    # RS rows (n): 3 alpha + 3/4 (n/2)(beta + gamma)
    # AR columns (n/4): 6 alpha + 2 x 3/4 (n/8) beta + 3/4 (n/8) gamma
    # AG rows (n): 3 alpha + 3/4 (n/2) beta
    topo = topology_from_spec("torus2d:4x4")
    rs = 3 * ALPHA + 3 / 4 * N / 2 * (BETA + GAMMA)
    ar = 6 * ALPHA + 2 * 3 / 4 * N / 8 * BETA + 3 / 4 * N / 8 * GAMMA
    ag = 3 * ALPHA + 3 / 4 * N / 2 * BETA
    got = collective(topo, "allreduce", N, **KW)
    assert got.algorithm == "hierarchical"            # auto: levels() has 2 levels
    assert got.time_s == pytest.approx(rs + ar + ag, rel=1e-9)


# ----------------------------------------------------------------------------- groups

def test_concurrent_groups_share_links():
    # ring:4, groups (0, 2) and (1, 3), direct all-gather: each rank sends n/2 to its partner
    # over 2 hops (0->1->2, 1->2->3, 2->3->0, 3->0->1). Alone: alpha2 + (n/2) beta. Together
    # every used link carries two flows: alpha2 + (n/2) / (bw/2).
    topo = topology_from_spec("ring:4")
    a2 = O + 2 * L
    alone = collective(topo, "allgather", N, algorithm="direct", groups=[(0, 2)], **KW)
    both = collective(topo, "allgather", N, algorithm="direct", groups=[(0, 2), (1, 3)], **KW)
    assert alone.time_s == pytest.approx(a2 + N / 2 * BETA, rel=1e-9)
    assert both.time_s == pytest.approx(a2 + N / 2 * 2 * BETA, rel=1e-9)
    assert both.groups == 2 and len(both.group_times_s) == 2
    assert both.algbw_gbps == pytest.approx(N / both.time_s / 1e9)


# ----------------------------------------------------------------------------- results, modes

def test_busbw_and_analytic_mode(ring8):
    r = collective(ring8, "allreduce", N, algorithm="ring", **KW)
    assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 2 * (P - 1) / P)
    assert r.messages == 2 * 2 * (P - 1) * P
    a = collective(ring8, "allreduce", N, algorithm="ring", mode="analytic", **KW)
    h = N / 2
    assert a.time_s == pytest.approx(
        2 * (P - 1) * ALPHA + 2 * (P - 1) / P * h * BETA + (P - 1) / P * h * GAMMA, rel=1e-12)
    d = r.to_dict()
    assert d["time_us"] == pytest.approx(r.time_s * 1e6) and d["op"] == "allreduce"
    # both ring directions carry 7/8 x n/2 x 2 (RS + AG) bytes in time_s
    assert r.max_link_utilization == pytest.approx(2 * (P - 1) / P * h / BW / r.time_s)
    assert analytic.busbw_factor("broadcast", 8) == 1.0


@pytest.mark.parametrize("spec, op, n, want", [
    ("torus2d:4x4", "allreduce", N, "hierarchical"), ("ring:16", "allreduce", 1e3, "ring"),
    ("fc:4", "allreduce", 1e3, "rhd"), ("fc:4", "allgather", N, "ring"),
    ("switch:8", "alltoall", N, "direct"), ("switch:8", "broadcast", N, "rhd")])
def test_auto_rule(spec, op, n, want):
    assert collective(topology_from_spec(spec), op, n).algorithm == want


def test_compare_algorithms_lists_every_applicable_one(fc8):
    res = compare_algorithms(fc8, "allreduce", N, **KW)
    assert set(res) == {"ring", "tree", "rhd", "direct", "ps"}
    assert res["tree"].time_s == t(fc8, "allreduce", "tree")
    # the server's 7 links carry 7 n in and 7 n out: the slowest by far on fc:8
    assert max(res, key=lambda a: res[a].time_s) == "ps"
    assert applicable_algorithms(topology_from_spec("torus2d:4x4"), "allreduce")[-1] == "ps"


def test_bad_input(ring8):
    with pytest.raises(ValueError, match=r"op = 'allsum': unknown collective; allowed: "
                                         r"broadcast, scatter"):
        collective(ring8, "allsum", N)
    with pytest.raises(ValueError, match=r"algorithm = 'butterfly': unknown; allowed: auto, ring"):
        collective(ring8, "allreduce", N, algorithm="butterfly")
    with pytest.raises(ValueError, match=r"algorithm = 'ring' does not implement alltoall; "
                                         r"allowed for alltoall: auto, direct"):
        collective(ring8, "alltoall", N, algorithm="ring")
    for bad in (0, -5, float("nan")):
        with pytest.raises(ValueError, match=r"nbytes = .*: must be a finite number of bytes > 0"):
            collective(ring8, "allreduce", bad)
    with pytest.raises(ValueError, match=r"rank 8 in group \(0, 8\) is out of range; "
                                         r"topology 'ring:8' has ranks 0..7"):
        collective(ring8, "allreduce", N, groups=[(0, 8)])
    with pytest.raises(ValueError, match="mode = 'exact': allowed: sim, analytic"):
        collective(ring8, "allreduce", N, mode="exact")
    with pytest.raises(ValueError, match=r"chunks = 0: must be an integer in 1\.\.65,536"):
        collective(ring8, "allreduce", N, algorithm="ring", chunks=0)
    assert set(OPS) == set(["broadcast", "scatter", "gather", "reduce", "allreduce",
                            "allgather", "reducescatter", "alltoall"])
    assert ALGORITHMS[0] == "auto"


# ------------------------------------------------------------ generated rings vs their DAG

def _dag_times(topo, op, n, groups=None, contention=True, **kw):
    """Each group's time from the explicit message DAG (build_messages + simulate), the way
    collective() ran every ring before rings were generated inside the engine."""
    from hw.system.engine import simulate
    msgs, tail, group, _, _, _ = build_messages(topo, op, n, algorithm="ring", groups=groups,
                                                **kw)
    res = simulate(topo, msgs, contention=contention)
    done = res.finish_s + tail
    return np.maximum.reduceat(done, group), res


@pytest.mark.parametrize("spec, groups", [
    ("ring:8", None), ("ring:5", None), ("torus2d:4x4", None), ("mesh2d:3x3", None),
    ("switch:8", None), ("fattree:8x4", None), ("fc:6", None), ("torus2d:4x4", "rows"),
    ("torus3d:2x3x2", None)])
@pytest.mark.parametrize("op", ["allreduce", "reducescatter", "allgather"])
def test_generated_rings_equal_their_message_dag(spec, groups, op):
    """collective() generates ring reduce-scatter / all-gather / all-reduce inside the engine
    (hw.system.engine.RingProgram); the times, link bytes and event batches must equal the
    explicit DAG of collective_schedules._ring_steps on every topology, with chunks,
    overheads, reduction costs, concurrent groups and without contention."""
    topo = topology_from_spec(spec)
    if groups == "rows":
        groups = [tuple(range(4 * r, 4 * r + 4)) for r in range(4)]
    for chunks, kw, contention in ((1, {}, True), (3, KW, True), (2, KW, False)):
        want, res = _dag_times(topo, op, 3e6, groups, contention, chunks=chunks, **kw)
        got = collective(topo, op, 3e6, algorithm="ring", groups=groups, chunks=chunks,
                         contention=contention, **kw)
        np.testing.assert_allclose(got.group_times_s, want, rtol=1e-12, atol=0)
        assert got.messages == len(res.finish_s) and got.events == res.events
        assert got.max_link_utilization == pytest.approx(float(np.max(
            res.link_bytes / (np.asarray(topo.link_bytes_per_s) * got.time_s))), rel=1e-12)


def test_generated_ring_window_grows_when_positions_drift_apart():
    """A link at a tenth of the bandwidth lets sends queue up at the rank before it while the
    others run ahead: the engine's window of steps per ring position doubles until it holds
    them, and the result still equals the DAG's."""
    from hw.system.collective_schedules import ring_program
    from hw.system.engine import simulate_rings
    from dataclasses import replace
    ring6 = topology_from_spec("ring:6")
    gbps = np.asarray(ring6.link_gbps, dtype=float).copy()
    gbps[0] /= 10                                   # r0 -> r1
    topo = replace(ring6, link_gbps=gbps)
    want, _ = _dag_times(topo, "allreduce", 3e6, chunks=4, **KW)
    prog, _ = ring_program(topo, "allreduce", [tuple(range(6))], 3e6, 4, O, GAMMA)
    res = simulate_rings(topo, prog)
    assert res.window > 2
    assert res.finish_s.max() == pytest.approx(want.max(), rel=1e-12)
