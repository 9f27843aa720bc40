"""The collective simulation budget (:mod:`hw.system.budget`, issue 21 item 6): the closed-form
message estimate against the real DAG, refusals before anything is built, bounded topologies
and chunks, and the one-line CLI errors. Property tests generate ranks, chunks, sizes and
topologies (huge, tiny, negative, nan) and assert a result or a one-line error, never a hang:
every case the budget admits is small by construction (<= a few thousand messages here), and
the big ones must be refused by the estimate without being built."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hw.system import budget
from hw.system.budget import BudgetError, check_collective, estimate_messages
from hw.system.collectives import SUPPORTED, build_messages, collective
from hw.system.topology import MAX_LINKS, TopologyError, topology_from_spec
from npulab.cli import main

SMALL = ("ring:5", "ring:8", "fc:4", "fc:5", "fc:6", "switch:6", "mesh2d:2x3", "torus2d:3x3",
         "torus2d:4x4", "mesh3d:2x2x2", "fattree:8x4")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SMALL), op=st.sampled_from(sorted(SUPPORTED)),
       data=st.data(), chunks=st.integers(1, 4))
def test_estimate_bounds_the_real_dag(spec, op, data, chunks):
    """estimate >= real message count and <= 4x it (+ a small constant): the refusal is never
    late and never far too eager."""
    topo = topology_from_spec(spec)
    alg = data.draw(st.sampled_from([a for a in SUPPORTED[op]
                                     if a != "hierarchical" or len(topo.levels()) > 1]))
    msgs, _, _, used, c, gs = build_messages(topo, op, 1 << 20, algorithm=alg, chunks=chunks)
    est = estimate_messages(topo, op, used, gs, c)
    assert len(msgs) <= est <= 4 * len(msgs) + 8, (spec, op, alg, len(msgs), est)


@pytest.mark.parametrize("spec, op, extra", [
    ("ring:10000", "allreduce", {}),                        # 64M all-reduce: MemoryError before
    ("switch:10000", "alltoall", {}),
    ("ring:100000", "allreduce", {}),
    ("ring:4", "allreduce", {"chunks": budget.MAX_CHUNKS}),   # 3.1M messages: a lowered limit
])
def test_big_collectives_are_refused_before_building(spec, op, extra, monkeypatch):
    topo = topology_from_spec(spec)
    if extra:       # the chunk limit alone is fine; shrink the message limit to see the check
        monkeypatch.setattr(budget, "MAX_MESSAGES", 1000)
        monkeypatch.setattr(budget, "MAX_GENERATED_MESSAGES", 1000)

    def boom(*a, **k):
        raise AssertionError("the DAG was built")
    monkeypatch.setattr("hw.system.collective_dag.MessageDag.add", boom)
    with pytest.raises(BudgetError, match=r"would need [\d,]+ messages .*--mode analytic"):
        collective(topo, op, 64 << 20, **extra)


def test_memory_limit_names_the_need(monkeypatch):
    monkeypatch.setattr(budget, "MAX_MEMORY_BYTES", 1 << 20)
    with pytest.raises(BudgetError, match=r"would need ~[\d.]+ MiB .* limit is 1.0 MiB"):
        collective(topology_from_spec("ring:64"), "allreduce", 1 << 20, algorithm="direct")


def test_generated_rings_are_budgeted_per_slot_not_per_message(monkeypatch):
    """A ring all-reduce is generated inside the engine: its memory is per (ring, position)
    (BYTES_PER_RING_SLOT), so 4,096 ranks (67 M messages) fit the default budget that the
    same messages as a DAG (160 B each, 10 GiB) would not; a tiny limit still refuses it."""
    topo = topology_from_spec("ring:4096")
    n = check_collective(topo, "allreduce", "ring", [tuple(range(4096))], 1, generated=True)
    assert n == 2 * 2 * 4095 * 4096
    with pytest.raises(BudgetError, match="limit is"):
        check_collective(topo, "allreduce", "ring", [tuple(range(4096))], 1)
    monkeypatch.setattr(budget, "MAX_MEMORY_BYTES", 1 << 20)
    with pytest.raises(BudgetError, match=r"would need ~[\d.]+ MiB"):
        check_collective(topo, "allreduce", "ring", [tuple(range(4096))], 1, generated=True)


@pytest.mark.parametrize("chunks", [0, -1, budget.MAX_CHUNKS + 1, 100_000_000, 1.5, True])
def test_chunks_are_bounded(chunks):
    topo = topology_from_spec("ring:4")
    for mode in ("sim", "analytic"):
        with pytest.raises(BudgetError, match="chunks"):
            collective(topo, "allreduce", 1 << 20, chunks=chunks, mode=mode)


@pytest.mark.parametrize("spec", ["fc:2000", "fc:513", "torus3d:64x64x64", "switch:200000",
                                  "ring:200000"])
def test_topology_size_checked_before_allocating(spec):
    with pytest.raises(TopologyError, match=rf"[\d,]+ directed links; .* at most {MAX_LINKS:,}"):
        topology_from_spec(spec)


def test_largest_admitted_topologies_build():
    assert topology_from_spec("fc:500").n_links == 249_500 <= MAX_LINKS
    assert topology_from_spec("ring:100000").n_links == 200_000


def test_analytic_mode_of_a_huge_ring_runs():
    """ring:100000 is refused in sim mode, its closed form answers (ring algorithm)."""
    topo = topology_from_spec("ring:100000")
    r = collective(topo, "allreduce", 1 << 20, mode="analytic")
    assert r.ranks == 100_000 and math.isfinite(r.time_s) and r.time_s > 0
    with pytest.raises(BudgetError, match="closed form would look at"):
        collective(topo, "allreduce", 1 << 20, mode="analytic", algorithm="direct")


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, pattern", [
    (("--system", "ring:4", "--op", "allreduce", "--bytes", "1M", "--chunks", "100000000"),
     r"chunks = 100000000: must be an integer in 1\.\.65,536"),
    (("--system", "ring:10000", "--op", "allreduce", "--bytes", "64M"),
     r"399,960,000 messages \(~[\d.]+ MiB\); the limit is 268,435,456 messages: use --mode "
     r"analytic"),
    (("--system", "fc:2000", "--op", "allreduce", "--bytes", "1M"),
     r"fc:2000: 3,998,000 directed links"),
    (("--system", "ring:1", "--op", "allreduce", "--bytes", "1M"),
     r"the system has 1 chip; a collective needs at least 2"),
])
def test_cli_one_line_errors(capsys, argv, pattern):
    import re
    code, out, err = cli(capsys, "collective", *argv)
    assert code == 2 and re.search(pattern, err), err
    assert err.count("\n") == 1 and err.startswith("npulab: error: ") and "Traceback" not in err


def test_system_command_refuses_a_huge_data_parallel_step(capsys):
    code, out, err = cli(capsys, "system", "--system", "ring:100000", "--model", "resnet18",
                         "--strategy", "dp=100000")
    assert code == 2 and "--comm analytic" in err and err.count("\n") == 1, err


_num = st.one_of(st.integers(-10 ** 12, 10 ** 12), st.floats(allow_nan=True,
                                                             allow_infinity=True),
                 st.sampled_from([0, 1, 2, 3, 2 ** 31, 2 ** 63, 10 ** 20]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["ring", "switch", "fc", "torus2d", "mesh3d", "fattree"]),
       n=st.sampled_from([1, 2, 3, 7, 64, 600, 5000, 10 ** 6, 10 ** 9, 10 ** 30]),
       op=st.sampled_from(sorted(SUPPORTED)), nbytes=_num, chunks=st.one_of(st.none(), _num),
       mode=st.sampled_from(["sim", "analytic"]))
def test_extreme_collectives_answer_or_refuse(kind, n, op, nbytes, chunks, mode):
    """Any (topology size, bytes, chunks): a result, or a ValueError/ConfigError with one line;
    what the budget admits at these sizes is small (no hang: the estimate is checked first)."""
    dims = {"ring": f"{n}", "switch": f"{n}", "fc": f"{n}", "torus2d": f"{n}x2",
            "mesh3d": f"{n}x2x2", "fattree": f"{n}x4"}[kind]
    monkey = budget.MAX_MESSAGES, budget.MAX_GENERATED_MESSAGES
    budget.MAX_MESSAGES = budget.MAX_GENERATED_MESSAGES = 20_000    # keep them all tiny
    try:
        topo = topology_from_spec(f"{kind}:{dims}")
        r = collective(topo, op, nbytes, chunks=chunks, mode=mode)
        assert r.time_s >= 0 and r.messages <= 20_000
    except (ValueError, TopologyError) as exc:
        assert "\n" not in str(exc)
    finally:
        budget.MAX_MESSAGES, budget.MAX_GENERATED_MESSAGES = monkey
