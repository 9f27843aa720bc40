"""The Selene-like system file (sim_configs/systems/selene.toml): 64 DGX A100 nodes on HDR
InfiniBand, every figure as cited in the file (NVLink3 12 x 25 GB/s per GPU at 0.8 efficiency;
one 200 Gb/s = 25 GB/s HDR NIC per GPU, efficiency 0.9 and 2 us end to end as Calculon's
systems/a100_80g.json; NVIDIA RA-09950-001 for the NIC-per-GPU, non-blocking fabric)."""

from __future__ import annotations

import numpy as np
import pytest

from hw.system.collectives import collective
from hw.system.system import DEVICES, load_system, system_names, systems_dir

GIB = 1 << 30


@pytest.fixture(scope="module")
def selene():
    return load_system("selene")


def test_selene_loads_512_gpus_in_64_nodes(selene):
    assert "selene" in system_names() and (systems_dir() / "selene.toml").is_file()
    t = selene.topology
    assert (selene.name, t.kind, t.n_ranks, t.dims) == ("selene", "hierarchical", 512, (8, 64))
    # one NVSwitch per node + one level-1 switch standing for the non-blocking fat tree
    assert t.node_kinds.count("switch") == 64 + 1 and t.host is None
    # 512 GPU-NVSwitch + 512 GPU-fabric full-duplex links = 2048 directed links
    assert t.n_links == 2048
    assert t.levels()[0][1] == tuple(range(8, 16))           # level 0: the GPUs of node 1
    assert t.levels()[1][3] == tuple(range(3, 512, 8))       # level 1: local GPU 3 of each node
    dev = selene.device
    assert dev is DEVICES["a100"]                              # datasheet A100 80GB SXM
    assert (dev.peak_tflops, dev.mem_gbps, dev.mem_bytes) == (312.0, 2039.0, 80 * GIB)
    assert selene.reduce_gbps == pytest.approx(2039 / 3, rel=1e-4)
    assert selene.overhead_ns == 1400.0
    # NCCL's protocols as dgx-a100.toml: (name, overhead per message, payload factor)
    assert [(p.name, p.overhead_ns, p.bandwidth_factor) for p in selene.protocols] == [
        ("LL", 1400.0, 0.25), ("LL128", 2830.0, 0.92), ("Simple", 4330.0, 1.0)]


def test_nvlink_and_infiniband_bandwidths_as_cited(selene):
    t = selene.topology
    # inside a node: GPU -> NVSwitch -> GPU, 12 NVLink3 x 25 GB/s = 300 GB/s, x 0.8 achievable
    ptr, links = t.routes(np.array([0]), np.array([5]))
    assert len(links) == 2
    assert np.all(t.link_gbps[links] == 300.0) and np.all(t.link_efficiency[links] == 0.8)
    assert t.link_latency_ns[links].sum() == pytest.approx(700.0)
    # across nodes: GPU -> own HDR NIC -> fabric -> peer's NIC, 200 Gb/s = 25 GB/s, x 0.9,
    # 2 x 1000 ns = Calculon's 2 us inter-node latency
    ptr, links = t.routes(np.array([0]), np.array([8 * 63 + 7]))
    assert len(links) == 2
    assert np.all(t.link_gbps[links] == 25.0) and np.all(t.link_efficiency[links] == 0.9)
    assert t.link_latency_ns[links].sum() == pytest.approx(2000.0)
    # injection per GPU: 240 GB/s NVLink + 22.5 GB/s InfiniBand
    for r in (0, 7, 300, 511):
        assert t.injection_bytes_per_s(r) == pytest.approx((300 * 0.8 + 25 * 0.9) * 1e9)


def test_pipeline_send_uses_one_nic_per_gpu(selene):
    # A pipeline-stage boundary: the 8 TP ranks of node 3 each send n bytes to the same local
    # rank of node 4 at once (Megatron's scatter/gather send). One NIC per GPU, non-blocking
    # fabric: no two sends share a link, so each takes what a lone send takes, by hand, with
    # NCCL's Simple protocol (the fastest at 13 MB): overhead 4.33 us + latency 2 x 1 us +
    # n / (25 GB/s x 0.9 x 1.0). (LL128: 2.83 us + 2 us + n / (22.5 GB/s x 0.92) is slower.)
    n = 2048 * 25600 * 2 / 8                     # Megatron 1T: b*s*h/t fp16 elements
    alone = n / (25e9 * 0.9) + 4.33e-6 + 2e-6
    pairs = [(24 + i, 32 + i) for i in range(8)]
    r8 = collective(selene, "broadcast", n, groups=pairs)
    r1 = collective(selene, "broadcast", n, groups=pairs[:1])
    assert r1.protocol == "Simple" and r1.time_s == pytest.approx(alone, rel=1e-9)
    assert r8.time_s == pytest.approx(alone, rel=1e-9)
    # ... whereas 8 blocks out of ONE GPU to 8 other nodes share its single 22.5 GB/s NIC:
    # a direct scatter of 9 n over 9 ranks sends 8 blocks of n from rank 0 at once, all
    # finishing after 8 n / 22.5 GB/s (+ overhead + latency).
    group = (0,) + tuple(8 * k for k in range(1, 9))
    rf = collective(selene, "scatter", 9 * n, groups=[group], algorithm="direct")
    assert rf.messages == 8
    assert rf.time_s == pytest.approx(8 * n / (25e9 * 0.9) + 4.33e-6 + 2e-6, rel=1e-9)


def test_tp_groups_in_different_nodes_do_not_contend(selene):
    # 64 concurrent 8-GPU all-reduces (one per node, TP = 8) take as long as one alone: each
    # stays on its own NVSwitch.
    n = 4 * 2048 * 6144 * 2.0                    # Megatron 22B TP all-reduce buffer, fp16
    one = collective(selene, "allreduce", n, groups=[tuple(range(8))])
    all_nodes = collective(selene, "allreduce", n,
                           groups=[tuple(range(8 * k, 8 * k + 8)) for k in range(64)])
    assert all_nodes.time_s == pytest.approx(one.time_s, rel=1e-9)
    # the ring's bandwidth floor on a 240 GB/s port: 2 (p-1)/p n / 240 GB/s (Patarasuk & Yuan)
    assert one.time_s > 2 * 7 / 8 * n / 240e9
