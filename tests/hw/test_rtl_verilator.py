"""Verilator co-simulation (hw.systolic.rtl.verilator) against the register model and against
the Amaranth co-simulation.

The Verilator tests are skipped when Verilator is not installed (it is optional). They build
Verilator's runtime library and five small simulators (about 30 s on 2 cores with an empty
cache, a few seconds once ``~/.cache/npulab/verilator`` -- or ``$NPULAB_CACHE/verilator`` --
holds them).
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment

from hw.systolic.config import ArrayConfig
from hw.systolic.regmodel import run_gemm, snapshot_layout
from hw.systolic.rtl import cosim
from hw.systolic.rtl.array import SystolicArray
from hw.systolic.rtl import verilator_testbench
from hw.systolic.rtl.verilator import (
    VerilatorError, VerilatorReport, build_simulator, probe_names, run_snapshots,
    verilator_available, verify_verilator,
)
from hw.systolic.rtl.verilator_testbench import _encode

needs_verilator = pytest.mark.skipif(
    not verilator_available(),
    reason="Verilator is not installed (optional: apt-get install verilator, or set NPULAB_VERILATOR)")

# (config, deskew): OS, WS and IS; int8 and int16; de-skew on one of them.
CONFIGS = [
    (dict(rows=2, cols=3, dataflow="os", precision="int8"), False),
    (dict(rows=3, cols=2, dataflow="ws", precision="int16", acc_bits=64), False),
    (dict(rows=2, cols=3, dataflow="is", precision="int8", acc_bits=20, overflow="saturate"), True),
]


# ---- no Verilator needed ---------------------------------------------------------------------

@pytest.mark.parametrize("kw", [c for c, _ in CONFIGS] + [dict(rows=1, cols=1, dataflow="os")])
def test_probes_are_the_amaranth_cosims(kw):
    """Same registers, same order, same names as cosim._probes: mismatches read the same."""
    cfg = ArrayConfig(**kw)
    ours = probe_names(cfg)
    top = SystolicArray(cfg)
    theirs = [(col, name) for col, name, _ in cosim._probes(cfg, top)]
    Fragment.get(top, None)  # elaborate it: an unused elaboratable warns (an error here)
    assert ours == theirs
    width = sum(n for _, n in snapshot_layout(cfg).values())
    assert all(0 <= col < width for col, _ in ours)


def test_verilator_name_encoding():
    assert _encode("mesh.pe_0_0.x_out") == "mesh__02epe_0_0__02ex_out"
    assert _encode("out__12") == "out___05F12"
    assert _encode("$flatten\\mesh.\\pe_0_0.$1") == "__024flatten__05cmesh__02e__05cpe_0_0__02e__0241"


@pytest.mark.parametrize("kw,deskew", [(CONFIGS[0][0], False), (CONFIGS[2][0], True)])
def test_the_testbench_template_is_package_data_with_every_placeholder_filled(kw, deskew):
    """verilator_testbench.cpp sits beside its module (installed as package data) and its
    placeholders are exactly the fields the code fills: none left over, none unused."""
    from importlib import resources
    from string import Template

    from hw.systolic.rtl.synth import verilog_text

    path = resources.files("hw.systolic.rtl").joinpath(verilator_testbench._TEMPLATE_FILE)
    assert path.is_file()
    template = Template(path.read_text())
    assert template.is_valid()
    cfg = ArrayConfig(**kw)
    verilog = verilog_text(cfg, deskew=deskew, flatten=True)
    fields = verilator_testbench._testbench_fields(cfg, deskew, verilog)
    assert set(template.get_identifiers()) == set(fields)
    text = verilator_testbench._testbench(cfg, deskew, verilog)
    assert "${" not in text and text.startswith("// npulab: Verilator testbench for ")
    assert f"static const int R = {cfg.rows}, C = {cfg.cols}," in text


def test_missing_verilator_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("NPULAB_VERILATOR", str(tmp_path / "no-such-verilator"))
    assert not verilator_available()
    with pytest.raises(VerilatorError, match="apt-get install verilator"):
        verify_verilator(ArrayConfig(rows=2, cols=2), cases=1)


@pytest.mark.parametrize("kw, message", [
    (dict(sparse_m=4), "sparse_m = 4: the Verilator testbench drives dense PEs"),
    (dict(precision="int4", macs_per_pe=2), "macs_per_pe = 2: the Verilator testbench drives "
                                            "one operand per PE lane"),
    (dict(precision="binary"), "precision = 'binary': the Verilator testbench drives "
                               "two's-complement operands"),
])
def test_pes_the_testbench_does_not_drive_are_refused(kw, message):
    """Checked before Verilator is looked for: the same one-line error with or without it."""
    from hw.systolic.config import ConfigError
    with pytest.raises(ConfigError, match=message):
        verify_verilator(ArrayConfig(rows=2, cols=2, **kw), cases=1)


def test_build_failure_shows_the_log(monkeypatch, tmp_path):
    fake = tmp_path / "verilator"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "Verilator 0.0 fake"; exit 0; fi\n'
                    'echo "%Error: design.v:1: something is badly wrong" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("NPULAB_VERILATOR", str(fake))
    monkeypatch.setenv("NPULAB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(VerilatorError, match="(?s)build of systolic_ws_2x2.*failed.*badly wrong"):
        verify_verilator(ArrayConfig(rows=2, cols=2), cases=1)
    assert list((tmp_path / "cache" / "verilator").glob("*.failed.log"))


# ---- with Verilator --------------------------------------------------------------------------

@needs_verilator
@pytest.mark.parametrize("kw,deskew", CONFIGS)
def test_random_gemms_agree(kw, deskew):
    cfg = ArrayConfig(**kw)
    report = verify_verilator(cfg, cases=6, seed=1, deskew=deskew)
    assert isinstance(report, VerilatorReport)
    assert report.ok, report.summary()
    assert len(report.cases) == 6 and report.cycles > 0
    assert report.summary().startswith("PASS")
    t = report.timings()
    assert t["simulation"] > 0 and t["run"] >= t["simulation"] and t["build"] >= 0
    # A second call reuses the cached simulator.
    again = verify_verilator(cfg, cases=1, seed=1, deskew=deskew)
    assert again.cached and again.ok


@needs_verilator
def test_port_mismatches_read_like_the_amaranth_cosim():
    """Corrupt the model's output port: both simulators report the same cycle and port."""
    kw, deskew = CONFIGS[0]
    cfg = ArrayConfig(**kw)
    build = build_simulator(cfg, deskew=deskew)
    rng = np.random.default_rng(5)
    a, b = cosim.random_gemm(rng, cfg)
    snaps = run_gemm(cfg, a, b, snapshots=True).snapshots
    lay = snapshot_layout(cfg)
    o_out, o_valid = lay["out"][0], lay["out_valid"][0]
    t, j = np.argwhere(snaps[:, o_valid:o_valid + cfg.cols] == 1)[3]
    for column, delta in ((o_out + j, 1), (o_valid + j, 1)):
        bad = snaps.copy()
        bad[t, column] ^= delta
        ours = run_snapshots(build, bad).mismatch
        theirs = cosim._simulate(cfg, bad, deskew=deskew, pe_class=None)
        assert ours is not None and ours == theirs
        assert ours.signal.startswith(f"mesh.out[{j}].")
    # And a register: the first corrupted column in probe order is reported by name.
    bad = snaps.copy()
    col, name = probe_names(cfg)[7]
    bad[4, col] += 1
    assert run_snapshots(build, bad).mismatch == cosim._simulate(cfg, bad, deskew=deskew,
                                                                 pe_class=None)
    assert run_snapshots(build, bad).mismatch.signal == name


@needs_verilator
def test_mutation_caught_like_amaranth_and_vcd_written(tmp_path):
    cfg = ArrayConfig(rows=2, cols=2, dataflow="os", precision="int8")
    ours = verify_verilator(cfg, cases=2, seed=4, mutation="unsigned-multiply",
                            vcd_dir=tmp_path)
    theirs = cosim.verify(cfg, cases=2, seed=4, mutation="unsigned-multiply")
    assert not ours.ok and not theirs.ok
    assert ours.summary().startswith("FAIL")
    for mine, amaranth in zip(ours.cases, theirs.cases):
        assert mine.cycles == amaranth.cycles and mine.shape == amaranth.shape
        assert (mine.mismatch is None) == (amaranth.mismatch is None)
        if mine.mismatch is None:
            continue
        m, x = mine.mismatch, amaranth.mismatch
        assert (m.cycle, m.signal, m.rtl, m.model) == (x.cycle, x.signal, x.rtl, x.model)
        vcd = tmp_path / f"os_2x2_int8_case{mine.index}.vcd"
        assert m.vcd == str(vcd)
        text = vcd.read_text()
        assert "$enddefinitions" in text and "acc" in text
        assert f"#{m.cycle * 10000 + 5000}" in text  # the failing edge is in the waveform
