"""Collective protocols (NCCL's LL / LL128 / Simple) and the analytic ring on shared links."""

from __future__ import annotations

import pytest

from hw.system.collectives import collective
from hw.system.system import DEVICES, Protocol, SystemConfig, load_system, system_from_dict
from hw.system.topology import fully_connected, ring
from hw.systolic.config import ConfigError

P = 4
GBPS = 50.0
LAT_NS = 500.0


def _ring_system(protocols=()):
    # reduce_gbps huge: the gamma term vanishes, leaving the alpha-beta form.
    return SystemConfig("r4", ring(P, gbps=GBPS, latency_ns=LAT_NS, efficiency=1.0),
                        DEVICES["a100"], reduce_gbps=1e9, overhead_ns=0.0,
                        protocols=protocols)


def _ring_allreduce_s(n, overhead_ns, factor):
    """Ring all-reduce on ring:4 with the forward and reverse rings each carrying n/2
    (Thakur et al. 2005: 2(p-1) alpha + 2 (p-1)/p m beta + (p-1)/p m gamma per ring, m = n/2;
    gamma = 1 / 1e18 B/s from reduce_gbps = 1e9)."""
    alpha = (overhead_ns + LAT_NS) * 1e-9
    beta = 1.0 / (GBPS * 1e9 * factor)
    gamma = 1.0 / 1e18
    return (2 * (P - 1) * alpha + 2 * (P - 1) / P * (n / 2) * beta
            + (P - 1) / P * (n / 2) * gamma)


LL = Protocol("LL", overhead_ns=1000.0, bandwidth_factor=0.25)
SIMPLE = Protocol("Simple", overhead_ns=8000.0, bandwidth_factor=1.0)


@pytest.mark.parametrize("n", [8, 64 << 10, 1 << 20, 64 << 20])
def test_each_protocol_matches_alpha_beta_and_auto_takes_the_fastest(n):
    system = _ring_system((LL, SIMPLE))
    times = {}
    for proto in (LL, SIMPLE):
        r = collective(system, "allreduce", n, algorithm="ring", protocol=proto.name)
        expected = _ring_allreduce_s(n, proto.overhead_ns, proto.bandwidth_factor)
        assert r.time_s == pytest.approx(expected, rel=1e-9)
        assert r.protocol == proto.name
        times[proto.name] = r.time_s
    auto = collective(system, "allreduce", n, algorithm="ring")
    assert auto.time_s == min(times.values())
    assert auto.protocol == min(times, key=times.get)


def test_crossover_small_messages_pick_ll_large_pick_simple():
    # LL: 6 * 1.5 us + 0.75 n / 12.5 GB/s; Simple: 6 * 8.5 us + 0.75 n / 50 GB/s;
    # equal at 0.75 n (1/12.5e9 - 1/50e9) = 42e-6 s -> n = 1.0 MB.
    system = _ring_system((LL, SIMPLE))
    assert collective(system, "allreduce", 900_000, algorithm="ring").protocol == "LL"
    assert collective(system, "allreduce", 1_100_000, algorithm="ring").protocol == "Simple"


def test_with_protocol_scales_links_and_replaces_overhead():
    system = _ring_system((LL, SIMPLE))
    ll = system.with_protocol("LL")
    assert ll.overhead_ns == 1000.0 and ll.protocols == ()
    assert (ll.topology.link_bytes_per_s == 0.25 * system.topology.link_bytes_per_s).all()
    with pytest.raises(ValueError, match="'LL128'.*LL, Simple"):
        system.with_protocol("LL128")
    with pytest.raises(ValueError, match="protocol = 'LL'"):
        collective(_ring_system(), "allreduce", 8, protocol="LL")


def test_nvlink_presets_carry_nccl_protocols():
    for name in ("dgx-a100", "hgx-a100-4", "hgx-h100"):
        protos = {p.name: p for p in load_system(name).protocols}
        assert set(protos) == {"LL", "LL128", "Simple"}
        # NCCL tuning.cc: ring LL busBw x 1/4, LL128 x 0.92; per-step NVLink latency over LL
        # +1.43 us (LL128 1.9 vs 0.47) and +2.93 us (Simple 3.4 vs 0.47).
        assert protos["LL"].bandwidth_factor == 0.25
        assert protos["LL128"].bandwidth_factor == 0.92
        assert protos["LL128"].overhead_ns - protos["LL"].overhead_ns == pytest.approx(1430.0)
        assert protos["Simple"].overhead_ns - protos["LL"].overhead_ns == pytest.approx(2930.0)


def test_protocol_table_errors_name_the_key(tmp_path):
    base = {"system": {"name": "x", "topology": "ring:4", "reduce_gbps": 100.0,
                       "overhead_ns": 0.0}}
    bad = dict(base, protocol=[{"name": "LL", "overhead_ns": 1.0, "bandwidth_factor": 1.5}])
    with pytest.raises(ConfigError, match=r"f\.toml: protocol\[0\].*bandwidth_factor = 1\.5"):
        system_from_dict(bad, "f.toml")
    bad = dict(base, protocol=[{"name": "LL", "overhead_ns": 1.0, "speed": 2}])
    with pytest.raises(ConfigError, match=r"protocol\[0\]\.speed: unknown key"):
        system_from_dict(bad, "f.toml")
    bad = dict(base, protocol=[{"name": "LL"}])
    with pytest.raises(ConfigError, match=r"protocol\[0\]\.overhead_ns: missing"):
        system_from_dict(bad, "f.toml")


def test_analytic_ring_shares_links_like_the_simulation():
    # fc:4 rings: the six directed Hamiltonian cycles, 1/6 of the data each; every directed link
    # lies on two of them, so each ring gets half a link. Ring all-reduce, 4 links x 25 GB/s per
    # pair: per rank 3 x 100 GB/s out; time = 1.5 n / 300 GB/s + 6 * latency.
    topo = fully_connected(4, links_per_pair=4, gbps=25.0, latency_ns=700.0, efficiency=1.0)
    system = SystemConfig("fc4", topo, DEVICES["a100"], reduce_gbps=1e9, overhead_ns=0.0)
    n = 1 << 30
    expected = 1.5 * n / 300e9 + 6 * 700e-9
    sim = collective(system, "allreduce", n, algorithm="ring")
    analytic = collective(system, "allreduce", n, algorithm="ring", mode="analytic")
    assert sim.time_s == pytest.approx(expected, rel=1e-6)
    assert analytic.time_s == pytest.approx(expected, rel=1e-6)
