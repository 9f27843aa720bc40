"""Systems (hw/system/system.py): devices, presets with cited figures, system TOML files."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hw.system.system import (
    DEVICES, PRESETS, ChipDevice, RooflineDevice, SystemConfig, load_system, system_names,
    systems_dir,
)
from hw.system.topology import TopologyError, ring
from hw.systolic.config import ConfigError

GIB = 1 << 30


def test_system_names():
    assert PRESETS == ("dgx-a100", "hgx-a100-4", "hgx-h100", "tpu-v3-32", "pcie4-x4")
    assert system_names()[:5] == PRESETS and "dgx1-v100" in system_names()
    for name in system_names():
        assert (systems_dir() / f"{name}.toml").is_file()
        cfg = load_system(name)
        assert cfg.name == name
        json.dumps(cfg.describe())


def test_dgx_a100():
    cfg = load_system("dgx-a100")
    t = cfg.topology
    assert (t.name, t.kind, t.n_ranks, t.node_kinds.count("switch")) == ("dgx-a100", "switch", 8, 1)
    # 12 NVLink3 links x 25 GB/s per direction x 0.8 achievable (~20 of 25 GB/s per link)
    for r in range(8):
        assert t.injection_bytes_per_s(r) == pytest.approx(12 * 25 * 0.8 * 1e9)
    # GPU -> NVSwitch -> GPU: 2 x 350 ns = 0.7 us
    ptr, links = t.routes(np.array([0]), np.array([5]))
    assert t.link_latency_ns[links].sum() == pytest.approx(700.0)
    # host: PCIe Gen4 x16, 31.5 GB/s per direction, 80 % practical
    assert t.host is not None and cfg.host_link.startswith("PCIe Gen4 x16")
    ptr, links = t.routes(np.array([t.host]), np.array([3]))
    assert len(links) == 1 and t.link_bytes_per_s[links[0]] == pytest.approx(31.5 * 0.8 * 1e9)
    dev = cfg.device
    assert (dev.peak_tflops, dev.vector_tflops, dev.mem_gbps, dev.mem_bytes) == (
        312.0, 78.0, 2039.0, 80 * GIB)
    assert dev.matrix_efficiency == 1.0
    assert cfg.reduce_gbps == pytest.approx(2039 / 3, rel=1e-4)
    assert cfg.overhead_ns == 1400.0


def test_hgx_a100_4_reaches_three_peers_bandwidth():
    cfg = load_system("hgx-a100-4")
    t = cfg.topology
    assert t.kind == "fc" and t.n_ranks == 4 and t.n_links == 12
    # 4 NVLink3 links per pair: 100 GB/s per direction per pair
    assert np.all(t.link_gbps == 100.0) and np.all(t.link_efficiency == 0.8)
    assert t.injection_bytes_per_s(0) == pytest.approx(3 * 100 * 0.8 * 1e9)
    # the six directed Hamiltonian rings load each directed link with 1/3 of the ring traffic
    load = np.zeros(t.n_links)
    for order, share in t.rings():
        a = np.array(order)
        np.add.at(load, t.routes(a, np.roll(a, -1))[1], share)
    per_rank = np.min(t.link_bytes_per_s / load)
    assert per_rank == pytest.approx(240e9)
    # measured bus bandwidth plateau on 4 x A100: 234 GB/s (reference, LLMCompass artifact)
    assert per_rank / 234e9 == pytest.approx(1.0, abs=0.03)


def test_hgx_h100():
    cfg = load_system("hgx-h100")
    t = cfg.topology
    # 18 NVLink4 links, 450 GB/s per direction
    assert t.link_gbps[t.link_ids([0], [8])[0]] == 450.0
    assert t.injection_bytes_per_s(7) == pytest.approx(450 * 0.8 * 1e9)
    assert (cfg.device.peak_tflops, cfg.device.mem_gbps) == (989.0, 3350.0)
    assert cfg.device.mem_bytes == 80 * GIB
    # NCCL's measured ~370 GB/s ring bus bandwidth on 8 H100 is within 3 % of 450 x 0.8
    assert 450 * 0.8 / 370 == pytest.approx(1.0, abs=0.03)


def test_tpu_v3_32():
    cfg = load_system("tpu-v3-32")
    t = cfg.topology
    assert (t.kind, t.dims) == ("torus2d", (4, 8))
    # 4 ICI ports; 100 GB/s per link per direction derived from the v3 Pod's 6.4 TB/s
    # bisection over the 2 x 32 links cut in a 32 x 32 torus
    assert 6.4e12 / (2 * 32) == pytest.approx(100e9)
    assert t.injection_bytes_per_s(0) == pytest.approx(4 * 100e9)
    assert len(t.rings()) == 4
    assert (cfg.device.peak_tflops, cfg.device.mem_gbps, cfg.device.mem_bytes) == (
        123.0, 900.0, 32 * GIB)
    assert load_system("tpu-v3-32", link_gbps=50.0).topology.injection_bytes_per_s(0) == (
        pytest.approx(200e9))


def test_pcie4_x4():
    cfg = load_system("pcie4-x4")
    t = cfg.topology
    assert cfg.device == ChipDevice(name="default", config="default")
    assert t.injection_bytes_per_s(1) == pytest.approx(31.5 * 0.8 * 1e9)
    # host -> PCIe switch -> accelerator
    ptr, links = t.routes(np.array([t.host, 2]), np.array([2, 0]))
    assert [t.link_names[i] for i in links] == ["host->sw0", "sw0->r2", "r2->sw0", "sw0->r0"]
    assert cfg.reduce_gbps == pytest.approx(25.6 / 3, rel=1e-3)   # one DDR4-3200 channel / 3


def test_dgx1_v100_hybrid_cube_mesh():
    cfg = load_system("dgx1-v100")
    t = cfg.topology
    assert t.kind == "graph" and t.n_ranks == 8 and t.n_links == 2 * 16
    # six NVLink2 links x 25 GB/s per GPU; eight pairs have two links
    for r in range(8):
        assert t.link_gbps[t.link_src == r].sum() == 6 * 25.0
    doubled = {(int(a), int(b)) for a, b, g in zip(t.link_src, t.link_dst, t.link_gbps)
               if g == 50.0 and a < b}
    assert doubled == {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
    assert cfg.device.name == "V100-SXM2-32GB"


# ------------------------------------------------------------------------------------------
# devices
# ------------------------------------------------------------------------------------------

def test_roofline_op_seconds():
    a100 = DEVICES["a100"]
    # 4096^3 GEMM: 2 x 4096^3 = 1.374e11 FLOP / 312e12 = 440.5 us; operands 3 x 4096^2 x 2 B
    # = 100.7 MB / 2039e9 = 49.4 us -> compute bound
    n = 4096
    assert a100.op_seconds(2 * n**3, 3 * n * n * 2, matrix=True) == pytest.approx(
        2 * n**3 / 312e12)
    # elementwise op on 1e9 bytes with 1e9 FLOP: 12.8 us of vector compute < 490 us of HBM
    assert a100.op_seconds(1e9, 1e9, matrix=False) == pytest.approx(1e9 / 2039e9)
    assert a100.op_seconds(1e12, 0, matrix=False) == pytest.approx(1e12 / 78e12)
    half = dataclasses.replace(a100, matrix_efficiency=0.5, mem_efficiency=0.5)
    assert half.op_seconds(312e12, 0, True) == pytest.approx(2.0)
    assert half.op_seconds(0, 2039e9, True) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="flops = -1"):
        a100.op_seconds(-1, 0, True)


@pytest.mark.parametrize("field, value, match", [
    ("peak_tflops", 0, "device.peak_tflops = 0: must be a number in \\(0"),
    ("mem_bytes", 1.5, "device.mem_bytes = 1.5: must be an integer > 0"),
    ("matrix_efficiency", 1.2, "device.matrix_efficiency = 1.2"),
    ("name", "", "device.name = ''"),
])
def test_roofline_device_errors(field, value, match):
    kw = dict(name="x", peak_tflops=1.0, vector_tflops=1.0, mem_gbps=1.0, mem_bytes=1)
    kw[field] = value
    with pytest.raises(ConfigError, match=match):
        RooflineDevice(**kw)


# ------------------------------------------------------------------------------------------
# inline specs, overrides, files, errors
# ------------------------------------------------------------------------------------------

def test_inline_spec_system():
    cfg = load_system("torus2d:4x4", link_gbps=50.0, link_latency_ns=100.0)
    assert cfg.topology.kind == "torus2d" and np.all(cfg.topology.link_gbps == 50.0)
    assert np.all(cfg.topology.link_latency_ns == 100.0)
    assert cfg.device is DEVICES["a100"]
    assert cfg.reduce_gbps == pytest.approx(2039 / 3) and cfg.overhead_ns == 1400.0
    assert load_system("ring:4", device="h100").device is DEVICES["h100"]
    assert load_system("ring:4", device="nv_small").device == ChipDevice("nv_small", "nv_small")
    assert load_system("dgx-a100", link_gbps=600.0).topology.injection_bytes_per_s(0) == (
        pytest.approx(480e9))
    with pytest.raises(ConfigError, match="'foo': unknown; presets: dgx-a100"):
        load_system("foo")
    with pytest.raises(TopologyError, match="'torus2d:4'"):
        load_system("torus2d:4")
    with pytest.raises(ConfigError, match="overrides apply to spec-based topologies only"):
        load_system("dgx1-v100", link_gbps=10.0)
    with pytest.raises(ConfigError, match="device = 3"):
        load_system("ring:4", device=3)


def test_system_config_checks():
    with pytest.raises(ConfigError, match="reduce_gbps = 0"):
        SystemConfig("s", ring(4), DEVICES["a100"], reduce_gbps=0, overhead_ns=0)
    with pytest.raises(ConfigError, match="topology must be a Topology"):
        SystemConfig("s", "ring:4", DEVICES["a100"], reduce_gbps=1, overhead_ns=0)


def test_system_file_forms(tmp_path):
    (tmp_path / "g.toml").write_text(
        'nodes = [{name = "a"}, {name = "b"}, {name = "c"}]\n'
        'links = [{a = "a", b = "b"}, {a = "b", b = "c"}]\n')
    (tmp_path / "inline.toml").write_text(
        '[system]\nname = "x"\ntopology = "ring:6"\nreduce_gbps = 10\noverhead_ns = 5\n')
    (tmp_path / "graph.toml").write_text(
        '[system]\ntopology = "g.toml"\nreduce_gbps = 10\noverhead_ns = 5\n'
        '[device]\nkind = "chip"\nconfig = "default"\n')
    (tmp_path / "hier.toml").write_text(
        '[system]\nreduce_gbps = 10\noverhead_ns = 5\n[topology]\nkind = "hierarchical"\n'
        'levels = [{count = 4, kind = "switch", gbps = 100.0}, '
        '{count = 2, kind = "switch", gbps = 25.0, latency_ns = 900.0}]\n'
        '[device]\nkind = "a100"\nmatrix_efficiency = 0.7\n')
    (tmp_path / "ft.toml").write_text(
        '[system]\nreduce_gbps = 10\noverhead_ns = 5\n[topology]\nspec = "fattree:16x4"\n'
        'oversubscription = 2.0\n[topology.host]\ngbps = 8.0\n'
        '[device]\nkind = "roofline"\nname = "d"\npeak_tflops = 10.0\nvector_tflops = 1.0\n'
        'mem_gbps = 100.0\nmem_bytes = 1000\n')
    a = load_system(str(tmp_path / "inline.toml"))
    assert (a.name, a.topology.kind, a.reduce_gbps, a.overhead_ns) == ("x", "ring", 10.0, 5.0)
    assert a.device is DEVICES["a100"]
    b = load_system(str(tmp_path / "graph.toml"))
    assert b.name == "graph" and b.topology.kind == "graph" and b.topology.n_ranks == 3
    assert isinstance(b.device, ChipDevice)
    c = load_system(str(tmp_path / "hier.toml"))
    assert c.topology.dims == (4, 2) and c.device.matrix_efficiency == 0.7
    assert c.device.peak_tflops == 312.0
    assert c.topology.injection_bytes_per_s(0) == pytest.approx(125e9)
    d = load_system(str(tmp_path / "ft.toml"))
    assert d.topology.node_kinds.count("switch") == 4 + 2 and d.topology.host is not None
    assert d.host_link == "host link 8.0 GB/s per direction (ranks)"
    assert d.device.mem_bytes == 1000
    # a bare graph file is a system with the default device
    assert load_system(str(tmp_path / "g.toml")).topology.n_ranks == 3


@pytest.mark.parametrize("text, match", [
    ('[sys]\n', r"\[sys\]: unknown section"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\ncolor = 1\ntopology = "ring:4"',
     r"system\.color: unknown key"),
    ('[system]\ntopology = "ring:4"\noverhead_ns = 1', r"system\.reduce_gbps: missing"),
    ('[system]\ntopology = "ring:4"\nreduce_gbps = -1\noverhead_ns = 1',
     r"system\.reduce_gbps = -1"),
    ('[system]\ntopology = "ring:x"\nreduce_gbps = 1\noverhead_ns = 1', r"'ring:x': must be one"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1', "no topology"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\n[topology]\nspec = "ring:4"\nlink_gbps = 0',
     "gbps = 0"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\n[topology]\nspec = "ring:4"\nfoo = 0',
     r"topology\.foo: unknown key"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\n[topology]\nspec = "ring:4"\n'
     'links_per_pair = 2', r"topology\.links_per_pair: only for fc:N"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\n[topology]\nspec = "ring:4"\n'
     '[topology.host]\nbw = 1', r"topology\.host\.bw: unknown key"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\ntopology = "nope.toml"',
     r"nope\.toml: no such graph file"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\ntopology = "ring:4"\n[device]\nkind = "gpu"',
     r"device\.kind = 'gpu': must be one of roofline, chip, a100"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\ntopology = "ring:4"\n[device]\nkind = "chip"',
     r"device\.config = None"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\ntopology = "ring:4"\n[device]\n'
     'peak_tflops = 1.0', r"device\.name: missing"),
    ('[system]\nreduce_gbps = 1\noverhead_ns = 1\n[topology]\nlevels = [{count = 2}]',
     r"topology\.levels\[0\]"),
])
def test_system_file_errors_name_file_and_key(tmp_path, text, match):
    p = tmp_path / "sys.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as exc:
        load_system(str(p))
    assert str(p) in str(exc.value)


def test_missing_system_file(tmp_path):
    with pytest.raises(ConfigError, match="no such system file"):
        load_system(str(tmp_path / "none.toml"))
