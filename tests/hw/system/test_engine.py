"""Flow-level network engine (hw/system/engine.py): max-min sharing worked by hand, the start
rule (arrival / send-order predecessors, delay, release, latency), port limits, errors, and a
pure-Python gold model (global progressive filling at every event) on random DAGs."""

from __future__ import annotations

import numpy as np
import pytest

from hw.system.engine import Messages, messages_from_edges, simulate, simulate_links
from hw.system.topology import topology_from_spec


def run(cap, routes, msgs, lat=None, contention=True):
    """Links with capacities ``cap`` (bytes/s); ``routes`` = one list of link ids per message."""
    cap = np.asarray(cap, float)
    lat = np.zeros(len(cap)) if lat is None else np.asarray(lat, float)
    ptr = np.concatenate(([0], np.cumsum([len(r) for r in routes]))).astype(np.int64)
    links = np.asarray([x for r in routes for x in r], dtype=np.int32)
    return simulate_links(cap, lat, ptr, links, np.arange(len(routes)), msgs,
                          contention=contention)


def test_two_flows_on_one_link_get_exactly_half():
    # 10 B/s link, two 30 B flows: 5 B/s each -> both done at 6 s (alone: 3 s)
    msgs = messages_from_edges([0, 0], [1, 1], [30.0, 30.0])
    r = run([10.0], [[0], [0]], msgs)
    assert r.send_done_s.tolist() == [6.0, 6.0]
    r = run([10.0], [[0], [0]], msgs, contention=False)
    assert r.send_done_s.tolist() == [3.0, 3.0]


def test_max_min_leftover_goes_to_the_other_flows():
    # link 0 (10 B/s) carries A, B, C; link 1 (2 B/s) carries C only. Progressive filling:
    # shares 10/3 on link 0, 2/1 on link 1 -> C frozen at 2; A, B get (10 - 2)/2 = 4 B/s.
    # 40 B each: A, B done at 10 s; C at 40/2 = 20 s (still capped by link 1 after A, B end).
    msgs = messages_from_edges([0, 0, 0], [1, 1, 1], [40.0, 40.0, 40.0])
    r = run([10.0, 2.0], [[0], [0], [0, 1]], msgs)
    assert r.send_done_s.tolist() == [10.0, 10.0, 20.0]
    assert r.link_bytes.tolist() == [120.0, 40.0]


def test_rate_rises_when_a_sharer_finishes():
    # A 10 B and B 30 B on a 10 B/s link: 5 B/s each until A ends at 2 s; B then has 20 B
    # left at 10 B/s -> done at 4 s.
    msgs = messages_from_edges([0, 0], [1, 1], [10.0, 30.0])
    r = run([10.0], [[0], [0]], msgs)
    assert r.send_done_s.tolist() == pytest.approx([2.0, 4.0], rel=1e-12)


def test_start_rule_latency_delay_release():
    # m0 (20 B over links 0,1; 10 B/s; latencies 0.5 + 0.25 s) -> m1 (delay 1 s) -> arrival
    # m0: send 0..2, arrives 2.75; m1 starts 3.75, sends 10 B on link 2 (5 B/s) until 5.75,
    # arrives 5.75 + 0.125. m2 has release 7 and no predecessor.
    msgs = messages_from_edges([0, 1, 2], [1, 2, 3], [20.0, 10.0, 5.0], [0.0, 1.0, 0.0],
                               [0.0, 0.0, 7.0], edges=([0], [1]))
    r = run([10.0, 10.0, 5.0], [[0, 1], [2], [2]], msgs, lat=[0.5, 0.25, 0.125])
    assert r.start_s.tolist() == [0.0, 3.75, 7.0]
    assert r.send_done_s.tolist() == [2.0, 5.75, 8.0]
    assert r.finish_s.tolist() == [2.75, 5.875, 8.125]
    assert r.makespan_s == 8.125


def test_send_order_successor_waits_for_last_byte_not_arrival():
    # m0 -> m1 in port order (chain edge): m1 starts when m0's last byte has left (1 s) plus
    # its delay 0.25, not at m0's arrival (1 + 10 s latency).
    msgs = messages_from_edges([0, 0], [1, 1], [10.0, 10.0], [0.0, 0.25],
                               send_edges=([0], [1]))
    r = run([10.0], [[0], [0]], msgs, lat=[10.0])
    assert r.start_s.tolist() == [0.0, 1.25]
    assert r.finish_s.tolist() == [11.0, 12.25]


def test_zero_bytes_and_empty_route_take_only_latency():
    msgs = messages_from_edges([0, 1, 2], [1, 1, 2], [0.0, 8.0, 8.0], edges=([0], [1]))
    r = run([4.0], [[0], [], [0]], msgs, lat=[3.0])
    # m0: 0 bytes over link 0 -> arrives at 3; m1: empty route -> done when it starts (3);
    # m2 alone on link 0: 8/4 = 2 s, + 3 s latency
    assert r.finish_s.tolist() == [3.0, 3.0, 5.0]


def test_flows_joining_mid_transfer():
    # A (30 B) starts at 0, B (10 B) released at 1 s on the same 10 B/s link.
    # 0-1: A alone, 10 B sent. 1-3: 5 B/s each, B done at 3, A has 10 B left -> done at 4.
    msgs = messages_from_edges([0, 0], [1, 1], [30.0, 10.0], 0.0, [0.0, 1.0])
    r = run([10.0], [[0], [0]], msgs)
    assert r.send_done_s.tolist() == pytest.approx([4.0, 3.0], rel=1e-12)


def _gold(cap, lat, routes, nbytes, delay, release, edges, chain):
    """Reference: global progressive filling over all active flows at every event."""
    m = len(nbytes)
    preds = [[] for _ in range(m)]
    for a, b in edges:
        preds[b].append(("arr", a))
    for a, b in chain:
        preds[b].append(("snd", a))
    start = [None] * m
    sdone = [None] * m
    arrive = [None] * m
    rem = list(map(float, nbytes))
    t = 0.0
    active = set()
    while any(x is None for x in arrive):
        for i in range(m):     # ready messages start (all preds known)
            if start[i] is None and all((arrive if k == "arr" else sdone)[a] is not None
                                        for k, a in preds[i]):
                st = release[i]
                for k, a in preds[i]:
                    st = max(st, (arrive[a] if k == "arr" else sdone[a]) + delay[i])
                if st <= t + 1e-12:
                    start[i] = st
                    if not routes[i] or nbytes[i] == 0:
                        sdone[i] = st
                        arrive[i] = st + sum(lat[x] for x in routes[i])
                    else:
                        active.add(i)
        # rates by progressive filling
        rate = {}
        capr = dict(enumerate(cap))
        left = set(active)
        while left:
            share = {l_: capr[l_] / sum(1 for f in left if l_ in routes[f])
                     for l_ in range(len(cap)) if any(l_ in routes[f] for f in left)}
            lb = min(share, key=share.get)
            for f in [f for f in left if lb in routes[f]]:
                rate[f] = share[lb]
                for l_ in routes[f]:
                    capr[l_] -= share[lb]
                left.discard(f)
        # next event: a flow end or a pending start
        cands = [t + rem[f] / rate[f] for f in active]
        for i in range(m):
            if start[i] is None and all((arrive if k == "arr" else sdone)[a] is not None
                                        for k, a in preds[i]):
                st = release[i]
                for k, a in preds[i]:
                    st = max(st, (arrive[a] if k == "arr" else sdone[a]) + delay[i])
                cands.append(st)
        if not cands:
            break
        tn = min(cands)
        for f in list(active):
            rem[f] -= rate[f] * (tn - t)
            if rem[f] <= 1e-9 * nbytes[f]:
                active.discard(f)
                sdone[f] = tn
                arrive[f] = tn + sum(lat[x] for x in routes[f])
        t = tn
    return np.array(start), np.array(sdone), np.array(arrive)


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_match_gold_model(seed):
    rng = np.random.default_rng(seed)
    nl, m = 5, 14
    cap = rng.choice([2.0, 5.0, 8.0], nl)
    lat = rng.choice([0.0, 0.5, 1.0], nl)
    routes = [sorted(rng.choice(nl, rng.integers(1, 4), replace=False).tolist())
              for _ in range(m)]
    nbytes = rng.choice([4.0, 10.0, 16.0], m)
    delay = rng.choice([0.0, 0.25], m)
    release = rng.choice([0.0, 0.0, 1.0, 3.0], m)
    edges = [(a, b) for a in range(m) for b in range(a + 1, m) if rng.random() < 0.12]
    chain = [(a, b) for a in range(m) for b in range(a + 1, m) if rng.random() < 0.05]
    msgs = messages_from_edges(np.zeros(m), np.ones(m), nbytes, delay, release,
                               edges=tuple(map(np.array, zip(*edges))) if edges else None,
                               send_edges=tuple(map(np.array, zip(*chain))) if chain else None)
    r = run(cap, routes, msgs, lat=lat)
    gs, gd, ga = _gold(cap, lat, routes, nbytes, delay, release, edges, chain)
    assert r.start_s == pytest.approx(gs, rel=1e-9, abs=1e-9)
    assert r.send_done_s == pytest.approx(gd, rel=1e-9, abs=1e-9)
    assert r.finish_s == pytest.approx(ga, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("spec", ["switch:8", "fc:8"])
def test_rank_never_injects_faster_than_its_ports(spec):
    # every rank sends 1 MB to every other rank at once (direct all-to-all)
    topo = topology_from_spec(spec)
    p = topo.n_ranks
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    off = a != b
    nb = 1e6
    msgs = messages_from_edges(a[off], b[off], nb)
    r = simulate(topo, msgs)
    sent = (p - 1) * nb
    for rank in range(p):
        assert sent / r.makespan_s <= topo.injection_bytes_per_s(rank) * (1 + 1e-12)
    # switch: one 25 GB/s port per rank -> 7 MB take exactly 7e6 / 25e9 s (+ 2 hops latency)
    # fc: one 25 GB/s link per peer -> 1 MB per link, 1e6 / 25e9 s (+ 1 hop)
    hops = 2 if spec.startswith("switch") else 1
    per = sent if spec.startswith("switch") else nb
    assert r.makespan_s == pytest.approx(per / 25e9 + hops * 500e-9, rel=1e-12)
    # congestion-unaware mode ignores the shared port (the 70x error the reference quotes)
    free = simulate(topo, msgs, contention=False)
    assert free.makespan_s == pytest.approx(nb / 25e9 + hops * 500e-9, rel=1e-12)


def test_messages_between_same_pair_share_one_route():
    topo = topology_from_spec("ring:8")
    msgs = messages_from_edges([0, 0, 0], [3, 3, 3], 25e3)
    r = simulate(topo, msgs)
    # 3 flows over the same 3 links: each 25e9/3 B/s -> 3 x 1 us, + 3 hops x 500 ns
    assert r.makespan_s == pytest.approx(3e-6 + 1.5e-6, rel=1e-12)
    assert sorted(r.link_bytes[r.link_bytes > 0].tolist()) == [75e3] * 3


def test_errors():
    topo = topology_from_spec("ring:4")
    with pytest.raises(ValueError, match=r"Messages.dst = 9: node ids of topology 'ring:4' are 0..3"):
        simulate(topo, messages_from_edges([0], [9], 1.0))
    with pytest.raises(ValueError, match=r"Messages.nbytes = -1.0: must be finite and >= 0"):
        simulate(topo, messages_from_edges([0], [1], -1.0))
    with pytest.raises(ValueError, match="dependency cycle: 2 of 2 messages"):
        simulate(topo, messages_from_edges([0, 1], [1, 2], 1.0, edges=([0, 1], [1, 0])))
    bad = messages_from_edges([0], [1], 1.0)
    bad = Messages(bad.src, bad.dst, bad.nbytes, bad.delay_s, bad.release_s,
                   np.array([0, 1]), np.array([5], np.int32))
    with pytest.raises(ValueError, match="Messages.succ holds a message id outside 0..0"):
        simulate(topo, bad)


def test_capacity_regrowth_gives_same_answer():
    # 3000 flows released at 3000 distinct times on one link: the first guesses of the work
    # arrays are too small and get doubled; every flow still gets the whole link when alone.
    n = 3000
    msgs = messages_from_edges(np.zeros(n), np.ones(n), 10.0, 0.0, np.arange(n) * 2.0)
    r = run([10.0], [[0]] * n, Messages(*[getattr(msgs, f) for f in (
        "src", "dst", "nbytes", "delay_s", "release_s", "succ_ptr", "succ")]))
    assert np.array_equal(r.send_done_s, np.arange(n) * 2.0 + 1.0)
    # all at once: 3000 flows share 10 B/s -> all done at 3000 s
    msgs = messages_from_edges(np.zeros(n), np.ones(n), 10.0)
    r = run([10.0], [[0]] * n, msgs)
    assert r.send_done_s == pytest.approx(np.full(n, 3000.0), rel=1e-9)
    assert r.max_flows == n
