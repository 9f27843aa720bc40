"""The whole-byte precisions through the chip pipeline (issue 27): bytes, cycles and energy
follow the operand width, and the MAC energy its datatype (hw.energy's stated estimates)."""

from __future__ import annotations

import pytest

import npulab
from compiler.ir import Gemm, Graph
from hw.configfile import load_chip_config
from hw.energy import DEFAULT_TECHNOLOGY, load_technology

G = Graph("g", (Gemm(name="g", m=128, n=128, k=256),))


def _run(precision):
    chip = load_chip_config(overrides=[f"array.precision={precision}"])
    return npulab.simulate(G, chip)


def test_bytes_and_cycles_follow_the_operand_width_and_energy_the_datatype():
    r = {p: _run(p) for p in ("int8", "fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "int16")}
    dram = {p: x.totals["dram_read_bytes"] + x.totals["dram_write_bytes"] for p, x in r.items()}
    cycles = {p: x.totals["cycles"] for p, x in r.items()}
    # one byte per operand: fp8 moves int8's bytes in int8's cycles; two bytes: fp16's
    assert dram["fp8_e4m3"] == dram["fp8_e5m2"] == dram["int8"]
    assert dram["bf16"] == dram["fp16"] == dram["int16"] == 2 * dram["int8"]
    assert cycles["fp8_e4m3"] == cycles["int8"] and cycles["bf16"] == cycles["fp16"]
    # MAC energy: the array's MACs x the technology's per-MAC figure of each datatype
    tech = load_technology(DEFAULT_TECHNOLOGY)
    macs = 128 * 128 * 256
    for p in ("int8", "fp8_e4m3", "bf16", "fp16"):
        net = r[p].metrics().network
        assert net["macs"] == macs
        assert net["energy_breakdown_j"]["mac"] == pytest.approx(macs * tech.mac_pj(p) * 1e-12,
                                                                 rel=1e-9)
    assert tech.mac_pj("int8") < tech.mac_pj("fp8_e4m3") < tech.mac_pj("bf16")
    assert tech.mac_pj("bf16") == tech.mac_pj("fp16")
