"""NVDLA datapath units in Amaranth 0.5, bit-exact with :mod:`hw.nvdla.numerics`.

Four units, each a :class:`~amaranth.lib.wiring.Component` with the same timing contract:

* inputs (operands and configuration) are sampled at the clock edge that ends cycle t; the
  result of cycle t's inputs is on ``out`` during cycle t + 1 (latency 1, one registered
  output, new inputs every cycle: full throughput);
* ``valid`` (input) travels alongside: ``out_valid`` during cycle t + 1 is ``valid`` of cycle
  t. ``out`` loads every cycle regardless of ``valid`` (it is meaningful only when
  ``out_valid``); both registers are in the ``sync`` domain and reset to zero.

The only state is that output register: ``len(out) + 1`` flip-flops per unit (tested on the
synthesized netlist). All arithmetic between input and register is combinational and exact,
in the widths :mod:`hw.nvdla.numerics` documents.

Rounding: one helper, :func:`round_shift_right`, builds the NVIDIA right shift (round half
away from zero, a shift of at least the input width gives 0) for every unit;
:func:`hw.systolic.rtl.pe.saturate` (shared with the systolic array) builds the clamp.
Units call the shift through :meth:`_Unit.shift_right`, which a
test subclass overrides to get a deliberately broken unit (:func:`truncate_shift_right`).

:func:`synthesize` runs a unit through Yosys (generic ``synth`` or ``synth_ice40 -dsp``) and
returns its cell counts, reusing :mod:`hw.systolic.rtl.synth`'s Yosys runner.
"""

from __future__ import annotations


from amaranth import Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.systolic.rtl.pe import saturate

__all__ = [
    "round_shift_right", "truncate_shift_right", "saturate", "mac_psum_bits",
    "MacCell", "CaccTruncate", "SdpX", "OutputConverter", "TARGETS", "synthesize",
    "expected_flip_flops",
]

#: Width of the SDP X multiplier output (33-bit ALU result x 16-bit operand): numerics.X_MUL_BITS.
X_MUL_BITS = 49


# ------------------------------------------------------------------------------------ helpers
def round_shift_right(m: Module, x, shift, in_bits: int, name: str = "rsh"):
    """Logic for :func:`hw.nvdla.numerics.shift_right`: ``x`` (a signed ``in_bits``-wide
    value) arithmetically shifted right by the unsigned value ``shift``, rounded half away from
    zero; 0 when ``shift >= in_bits``. Returns a ``signed(in_bits)`` signal (the rounded
    result always fits: rounding up only happens below the top bit).

    Hardware: ``pre = x >>> (shift - 1)`` gives the floor (``pre >>> 1``) and the round bit
    (``pre[0]``, the half); the sticky bit ORs the bits below the half. The floor is
    incremented when the round bit is set and either the sticky bit is set (more than half) or
    ``x >= 0`` (exactly half, away from zero): the same decision as :func:`hw.numerics.round_shift`.
    """
    x_s = Signal(signed(in_bits), name=f"{name}_x")
    m.d.comb += x_s.eq(x)
    sm1 = Signal(unsigned(len(shift)), name=f"{name}_sm1")
    m.d.comb += sm1.eq(shift - 1)  # only used when shift >= 1
    pre = Signal(signed(in_bits), name=f"{name}_pre")
    m.d.comb += pre.eq(x_s >> sm1)
    mask = Signal(in_bits, name=f"{name}_mask")
    m.d.comb += mask.eq((Const(1, 1) << sm1) - 1)  # truncated: ones below the half bit
    sticky = (x_s.as_unsigned() & mask).any()
    inc = pre[0] & (sticky | ~x_s[-1])
    out = Signal(signed(in_bits), name=name)
    with m.If(shift == 0):
        m.d.comb += out.eq(x_s)
    with m.Elif(shift >= in_bits):
        m.d.comb += out.eq(0)
    with m.Else():
        m.d.comb += out.eq((pre >> 1) + inc)
    return out


def truncate_shift_right(m: Module, x, shift, in_bits: int, name: str = "tsh"):
    """A *wrong* right shift for mutation tests: plain arithmetic shift (floor, no rounding),
    same width and shift >= in_bits rule as :func:`round_shift_right`."""
    x_s = Signal(signed(in_bits), name=f"{name}_x")
    m.d.comb += x_s.eq(x)
    out = Signal(signed(in_bits), name=name)
    m.d.comb += out.eq(Mux(shift >= in_bits, 0, x_s >> shift))
    return out


def mac_psum_bits(atomic_c: int, bits: int = 8) -> int:
    """Exact width of a sum of ``atomic_c`` products of signed ``bits``-bit operands:
    ``2*bits + ceil(log2(atomic_c))`` (int8: 22 for 64, 19 for 8; int16: 38 for 64). Each
    product lies in ``[-2**(2b-2) + 2**(b-1), 2**(2b-2)]``; ``atomic_c`` of them need
    ``2b - 1 + ceil(log2(atomic_c))`` magnitude bits plus a sign."""
    return 2 * bits + (atomic_c - 1).bit_length()


class _Unit(wiring.Component):
    """What every unit shares: the rounding shift (overridable for mutation tests) and the
    ``valid`` -> ``out_valid`` register."""

    def shift_right(self, m: Module, x, shift, in_bits: int, name: str):
        return round_shift_right(m, x, shift, in_bits, name)

    def _register(self, m: Module, result) -> None:
        m.d.sync += [self.out.eq(result), self.out_valid.eq(self.valid)]


# --------------------------------------------------------------------------------- MAC cell
class MacCell(_Unit):
    """One CMAC MAC cell: the exact dot product of an atomic-C data vector and one kernel's
    weights (:func:`hw.nvdla.numerics.mac_cell`).

    Ports
    -----
    ``data``, ``weight`` (In): ``atomic_c`` signed ``bits``-bit elements each (``lib.data``
    arrays). ``valid`` (In). ``out`` (Out): ``signed(mac_psum_bits(atomic_c, bits))``, the sum
    of the ``atomic_c`` products, exact (no wrap or saturation can occur in that width).
    ``out_valid`` (Out).

    Latency 1: ``out`` during cycle t + 1 is ``sum(data[i] * weight[i])`` of cycle t's inputs.
    The products are ``2*bits`` wide and summed by a balanced adder tree.
    """

    def __init__(self, atomic_c: int, bits: int = 8):
        if atomic_c < 1 or bits < 2:
            raise ValueError(f"MacCell(atomic_c={atomic_c}, bits={bits}): "
                             "need atomic_c >= 1, bits >= 2")
        self.atomic_c = atomic_c
        self.bits = bits
        self.psum_bits = mac_psum_bits(atomic_c, bits)
        vec = data.ArrayLayout(signed(bits), atomic_c)
        super().__init__({
            "data": In(vec), "weight": In(vec), "valid": In(1),
            "out": Out(signed(self.psum_bits)), "out_valid": Out(1),
        })

    def product(self, a, b):
        """The signed ``bits x bits`` product (exact in ``2 * bits``)."""
        return a * b

    def elaborate(self, platform):
        m = Module()
        terms = []
        for i in range(self.atomic_c):
            p = Signal(signed(2 * self.bits), name=f"prod{i}")
            m.d.comb += p.eq(self.product(self.data[i], self.weight[i]))
            terms.append(p)
        while len(terms) > 1:  # balanced tree; every partial sum is held exactly
            nxt = []
            for j in range(0, len(terms) - 1, 2):
                s = Signal(signed(max(len(terms[j]), len(terms[j + 1])) + 1))
                m.d.comb += s.eq(terms[j] + terms[j + 1])
                nxt.append(s)
            if len(terms) % 2:
                nxt.append(terms[-1])
            terms = nxt
        self._register(m, terms[0])
        return m


# ------------------------------------------------------------------------------------- CACC
class CaccTruncate(_Unit):
    """The CACC output stage: an accumulator value truncated for the SDP
    (:func:`hw.nvdla.numerics.cacc_output`).

    Ports
    -----
    ``acc`` (In): ``signed(acc_bits)`` (34 for int8 in NVIDIA's RTL, 48 for int16 / the C
    model). ``clip_truncate`` (In): ``unsigned(shift_bits)`` (default 6 bits, 0..63; NVDLA's
    register field is 5 bits, 0..31, a subset). ``valid`` (In). ``out`` (Out): ``signed(32)``.
    ``out_valid`` (Out).

    Latency 1: ``out = sat32(shift_right(acc, clip_truncate, acc_bits))``: round half away from
    zero, 0 when ``clip_truncate >= acc_bits``, then saturation to 32 bits.
    """

    def __init__(self, acc_bits: int = 34, shift_bits: int = 6):
        self.acc_bits = acc_bits
        self.shift_bits = shift_bits
        super().__init__({
            "acc": In(signed(acc_bits)), "clip_truncate": In(unsigned(shift_bits)),
            "valid": In(1), "out": Out(signed(32)), "out_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        r = self.shift_right(m, self.acc, self.clip_truncate, self.acc_bits, "clip")
        self._register(m, saturate(m, r, 32, "sat32"))
        return m


# ------------------------------------------------------------------------------------ SDP X
class SdpX(_Unit):
    """One SDP X unit (X1 bias or X2 batch-norm) on one 32-bit value
    (:func:`hw.nvdla.numerics.sdp_x`), configuration as input ports.

    Ports (In)
    ----------
    ``d`` signed(32); ``bypass``, ``alu_bypass``, ``mul_bypass``, ``prelu``, ``relu_bypass``
    (1 bit each); ``alu_algo`` (2 bits: 0 MAX, 1 MIN, 2 SUM; 3, EQL, exists only in the Y
    unit: the X ALU adds, as NVIDIA's C model ``X_alu`` and the Numba model do); ``alu_op``, ``mul_op`` signed(16);
    ``alu_shift``, ``mul_shift`` unsigned(``shift_bits``) (default 6: 0..63); ``valid``.
    ``out`` (Out) signed(32) and ``out_valid``.

    Latency 1. Datapath (all combinational, widths as the C model's):

    1. ALU operand ``sat32(alu_op << alu_shift)`` (:func:`~hw.nvdla.numerics.shift_left_sat`:
       a non-zero operand shifted by 32 or more saturates);
    2. ``a = d (max|min|sum) operand`` in 33 bits, not saturated (``a = d`` when
       ``alu_bypass``);
    3. PReLU: when ``prelu`` and not ``mul_bypass`` and ``a >= 0``, the result is ``a``'s low 32
       bits (two's-complement wrap, as the C model's assignment) and steps 4-5 are skipped;
    4. ``m = a * mul_op`` (49 bits; ``m = a`` when ``mul_bypass``);
    5. ``sat32(shift_right(m, mul_shift, 49))`` -- applied even when the multiplier is bypassed
       (the 49-bit input width decides the shift >= width rule);
    6. ReLU: negative results become 0 unless ``relu_bypass``;

    and ``bypass`` passes ``d`` through unchanged (still registered, latency 1).
    """

    def __init__(self, shift_bits: int = 6):
        self.shift_bits = shift_bits
        super().__init__({
            "d": In(signed(32)), "bypass": In(1),
            "alu_bypass": In(1), "alu_algo": In(2), "alu_op": In(signed(16)),
            "alu_shift": In(unsigned(shift_bits)),
            "mul_bypass": In(1), "mul_op": In(signed(16)), "mul_shift": In(unsigned(shift_bits)),
            "prelu": In(1), "relu_bypass": In(1), "valid": In(1),
            "out": Out(signed(32)), "out_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        d = self.d
        # 1. operand shifter: the shifted value is exact in 16 + 2**shift_bits - 1 bits.
        op_shifted = Signal(signed(16 + (1 << self.shift_bits) - 1))
        m.d.comb += op_shifted.eq(self.alu_op << self.alu_shift)
        op = saturate(m, op_shifted, 32, "alu_operand")
        # 2. ALU, 33 bits.
        alu = Signal(signed(33))
        with m.Switch(self.alu_algo):
            with m.Case(0):
                m.d.comb += alu.eq(Mux(d > op, d, op))
            with m.Case(1):
                m.d.comb += alu.eq(Mux(d < op, d, op))
            with m.Case(2, 3):
                m.d.comb += alu.eq(d + op)
        a = Signal(signed(33))
        m.d.comb += a.eq(Mux(self.alu_bypass, d, alu))
        # 4. multiplier, 49 bits.
        mul = Signal(signed(X_MUL_BITS))
        m.d.comb += mul.eq(Mux(self.mul_bypass, a, a * self.mul_op))
        # 5. truncate.
        trunc = saturate(m, self.shift_right(m, mul, self.mul_shift, X_MUL_BITS, "mul_trunc"),
                         32, "trunc_sat32")
        # 3. PReLU.
        pre = Signal(signed(32))
        m.d.comb += pre.eq(Mux(self.prelu & ~self.mul_bypass & ~a[-1], a[:32].as_signed(), trunc))
        # 6. ReLU.
        relu = Signal(signed(32))
        m.d.comb += relu.eq(Mux(~self.relu_bypass & pre[-1], 0, pre))
        self._register(m, Mux(self.bypass, d, relu))
        return m


# ---------------------------------------------------------------------------- output convert
class OutputConverter(_Unit):
    """The SDP output converter (:func:`hw.nvdla.numerics.cvt_out`).

    Ports
    -----
    ``x`` (In) signed(32) (the SDP result); ``offset`` signed(32); ``scale`` signed(16);
    ``shift`` unsigned(``shift_bits``) (default 6: 0..63, NVDLA's ``cvt_shift`` field width);
    ``valid``. ``out`` (Out) ``signed(out_bits)`` (8 for int8, 16 for int16 outputs) and
    ``out_valid``.

    Latency 1: ``out = sat_out(sat17(shift_right((x - offset) * scale, shift, 49)))``; the
    difference is 33 bits, the product 49 bits, the shift rounds half away from zero (0 for
    ``shift >= 49``), then saturation to 17 bits and to ``out_bits``.
    """

    def __init__(self, out_bits: int = 8, shift_bits: int = 6):
        if not 2 <= out_bits <= 32:
            raise ValueError(f"OutputConverter(out_bits={out_bits}): must be 2..32")
        self.out_bits = out_bits
        self.shift_bits = shift_bits
        super().__init__({
            "x": In(signed(32)), "offset": In(signed(32)), "scale": In(signed(16)),
            "shift": In(unsigned(shift_bits)), "valid": In(1),
            "out": Out(signed(out_bits)), "out_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        diff = Signal(signed(33))
        m.d.comb += diff.eq(self.x - self.offset)
        prod = Signal(signed(X_MUL_BITS))
        m.d.comb += prod.eq(diff * self.scale)
        r = self.shift_right(m, prod, self.shift, X_MUL_BITS, "cvt_shift")
        s17 = saturate(m, r, 17, "sat17")
        self._register(m, saturate(m, s17, self.out_bits, "sat_out"))
        return m


# --------------------------------------------------------------------------------- synthesis
def expected_flip_flops(unit: _Unit) -> int:
    """The unit's only state: its registered output and the ``valid`` bit."""
    return len(Value.cast(unit.out)) + 1


#: Synthesis targets: name -> Yosys command. ``generic`` is ``synth -flatten`` *without ABC*:
#: Yosys' own fine-grained gates ($_AND_, $_XOR_, $_MUX_, ... and $_SDFF_ flip-flops). ABC's
#: technology-independent optimization of the multiplier-heavy units takes minutes in the
#: WebAssembly Yosys (MacCell(8) did not finish in 3 minutes; with -noabc it takes < 1 s) and
#: does not change the flip-flops, which is what the generic netlist is used for. ``ice40`` is
#: ``synth_ice40 -dsp`` (iCE40 UltraPlus: SB_LUT4, SB_CARRY, flip-flops, SB_MAC16), as in
#: :data:`hw.systolic.rtl.synth.TARGETS`.
TARGETS = {
    "generic": "synth -flatten -noabc -top {top}",
    "ice40": "synth_ice40 -dsp -top {top}",
}


def synthesize(unit: _Unit, target: str = "generic", name: str | None = None) -> dict:
    """Synthesize one unit with Yosys (:data:`TARGETS`) and return ``{"design", "target",
    "script", "cells", "total_cells", "flip_flops", ...}`` (``lut4``, ``carry``, ``dsp`` for
    ``ice40``; ``logic_cells`` for ``generic``) plus ``expected_flip_flops``. Uses
    :mod:`hw.systolic.rtl.synth`'s Yosys runner and cell classification."""
    from amaranth.back import rtlil

    from hw.systolic.rtl.synth import synth_report

    name = name or type(unit).__name__.lower()
    result = synth_report(name, rtlil.convert(unit, name=name), target, TARGETS)
    result["expected_flip_flops"] = expected_flip_flops(unit)
    return result
