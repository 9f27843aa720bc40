"""Processing elements of the systolic array in Amaranth 0.5.

Two PEs share one arithmetic (:func:`accumulate`): :class:`OutputStationaryPE` for OS and
:class:`StationaryPE` for WS and IS (the same hardware; IS only swaps which operand the feeder
streams). Their timing contracts are the register-level model's (:mod:`hw.systolic.regmodel`);
:mod:`hw.systolic.rtl.cosim` checks every register of every PE against that model each cycle.

Conventions: every register is in the ``sync`` domain, resets to zero, and loads at the clock
edge that ends a cycle. A PE computes on its *inputs* (the left neighbour's and upper
neighbour's registers) during a cycle and latches them at its edge: the operand a PE multiplies
in cycle t is the one it forwards from cycle t + 1 on.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "stream_layout", "weight_layout", "top_layout", "output_layout", "accumulate", "saturate",
    "psum_bits",
    "OutputStationaryPE", "StationaryPE",
]


def operand_shape(bits: int):
    """One operand's shape: ``signed(bits)``, or one plain bit for binary operands (1 stands
    for +1, 0 for -1)."""
    return unsigned(1) if bits == 1 else signed(bits)


def _operand(bits: int, group: int):
    """One operand, or (``group > 1``) a group of them: an N:M sparse PE's activations."""
    shape = operand_shape(bits)
    return shape if group == 1 else data.ArrayLayout(shape, group)


def stream_layout(bits: int, last: bool, group: int = 1,
                  index_bits: int = 0) -> data.StructLayout:
    """An operand streamed along a row with its control bits (OS carries ``last`` too).
    N:M sparse PEs: ``group`` activations per lane (OS, WS), or one weight with its
    ``index_bits``-wide position in its group (IS)."""
    fields = {"value": _operand(bits, group), "valid": 1, "first": 1}
    if index_bits:
        fields["index"] = index_bits
    if last:
        fields["last"] = 1
    return data.StructLayout(fields)


def top_layout(bits: int, index_bits: int = 0, group: int = 1) -> data.StructLayout:
    """An operand streamed down a column (OS ``b``; with N:M sparse PEs, with its index;
    dual-MAC PEs: ``group`` operands)."""
    fields = {"value": _operand(bits, group), "valid": 1}
    if index_bits:
        fields["index"] = index_bits
    return data.StructLayout(fields)


def weight_layout(bits: int, group: int = 1, index_bits: int = 0) -> data.StructLayout:
    """A stationary operand (WS weight, IS input) and whether it belongs to the fold. N:M
    sparse PEs: a weight with its index (WS), or a group of activations (IS)."""
    fields = {"value": _operand(bits, group), "valid": 1}
    if index_bits:
        fields["index"] = index_bits
    return data.StructLayout(fields)


def output_layout(acc_bits: int) -> data.StructLayout:
    """A column's output port: the value leaving the bottom PE and whether one leaves."""
    return data.StructLayout({"value": signed(acc_bits), "valid": 1})


def saturate(m: Module, x, bits: int, name: str = "sat"):
    """Logic for :func:`hw.numerics.saturate`: ``x`` clamped to a signed ``bits``-wide range.
    Returns a ``signed(bits)`` signal. Shared by every npulab RTL block."""
    hi, lo = (1 << (bits - 1)) - 1, -(1 << (bits - 1))
    out = Signal(signed(bits), name=name)
    with m.If(x > hi):
        m.d.comb += out.eq(hi)
    with m.Elif(x < lo):
        m.d.comb += out.eq(lo)
    with m.Else():
        m.d.comb += out.eq(x)
    return out


def accumulate(m: Module, acc, value, acc_bits: int, saturating: bool):
    """``acc + value`` in an ``acc_bits``-wide register: two's-complement wrap, or saturation
    at every addition (``hw.numerics.accumulate``). Returns a ``signed(acc_bits)`` value.
    The sum is formed ``acc_bits + 1`` wide, which holds any two ``acc_bits``-bit values."""
    total = Signal(signed(acc_bits + 1))
    m.d.comb += total.eq(acc + value)
    if not saturating:
        return total[:acc_bits].as_signed()
    return saturate(m, total, acc_bits, "acc_sat")


class _MacPE(wiring.Component):
    """What both PEs share: operand width, accumulator, and the multiplier."""

    def __init__(self, bits: int, acc_bits: int, saturate: bool, signature: dict):
        self.bits = bits
        self.acc_bits = acc_bits
        self.saturate = saturate
        super().__init__(signature)

    def product(self, a, b):
        """The signed ``bits x bits`` product (exact in ``2 * bits``). Binary operands
        (``bits = 1``, 1 standing for +1 and 0 for -1) multiply by XNOR: +1 where they are
        equal, else -1, so a sum of them is a popcount (:func:`hw.numerics.xnor_popcount`).
        Subclasses that break it are the mutations :mod:`hw.systolic.rtl.mutations` offers to
        co-simulation."""
        if self.bits == 1:
            return Mux(a == b, 1, -1)
        return a * b

    def pick(self, group, index):
        """The index mux of an N:M sparse PE: element ``index`` of the activation ``group``.
        Mutations (:mod:`hw.systolic.rtl.mutations`) break it too."""
        return group[index]

    def _product_signal(self, m: Module, a, b):
        prod = Signal(signed(2 * self.bits))
        m.d.comb += prod.eq(self.product(a, b))
        return prod

    def _dot_signal(self, m: Module, xs, ws, lanes: int):
        """A dual-MAC PE's products added: ``sum(product(xs[e], ws[e]))``, exact."""
        dot = Signal(signed(2 * self.bits + lanes.bit_length() - 1))
        m.d.comb += dot.eq(sum(self.product(xs[e], ws[e]) for e in range(lanes)))
        return dot


class OutputStationaryPE(_MacPE):
    """Output-stationary PE: owns one output and accumulates it over the whole K.

    Ports
    -----
    ``a_in`` / ``a_out``: row operand with ``valid``, ``first``, ``last`` (from the left; to
    the right, registered). ``b_in`` / ``b_out``: column operand with ``valid`` (from above;
    downward, registered). ``res_in``: the ``res`` register of the PE above (drain chain);
    ``shift``: load ``res`` from ``res_in`` this cycle. ``acc`` and ``res`` expose the
    accumulator and result registers (debug and co-simulation; ``res`` also feeds the PE below).
    N:M sparse (``group = M``): ``a`` carries a group of M activations and ``b`` its weight's
    ``index_bits``-wide position in that group; the PE multiplies ``b`` by ``a[index]``.
    Dual-MAC (``group = lanes = 2``, int4): ``a`` and ``b`` carry two operands of consecutive
    k and the PE adds both products (saturated at ``acc_bits`` on ``first`` too).

    Timing contract (``hw.systolic.regmodel``, OS)
    ----------------------------------------------
    During a cycle in which both operands are valid the PE performs one MAC:
    ``acc <= a*b`` when ``first``, else ``acc <= acc + a*b`` (wrapping or saturating at
    ``acc_bits``). When ``last`` is also set the same sum is loaded into ``res``; otherwise
    ``res <= res_in`` when ``shift`` (a MAC's ``last`` wins over a drain shift, which the
    contract's fold spacing makes impossible). Operands are forwarded one hop per cycle.
    """

    def __init__(self, bits: int, acc_bits: int, saturate: bool = False, group: int = 1,
                 index_bits: int = 0, lanes: int = 1):
        self.group, self.lanes = group, lanes
        a_lay = stream_layout(bits, True, group)
        b_lay = top_layout(bits, index_bits, lanes)
        super().__init__(bits, acc_bits, saturate, {
            "a_in": In(a_lay),
            "b_in": In(b_lay),
            "a_out": Out(a_lay),
            "b_out": Out(b_lay),
            "res_in": In(signed(acc_bits)),
            "shift": In(1),
            "acc": Out(signed(acc_bits)),
            "res": Out(signed(acc_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += [self.a_out.eq(self.a_in), self.b_out.eq(self.b_in)]
        if self.lanes > 1:      # dual-MAC: both operands' lanes multiplied and added
            prod = self._dot_signal(m, self.a_in.value, self.b_in.value, self.lanes)
        else:
            a_value = (self.a_in.value if self.group == 1
                       else self.pick(self.a_in.value, self.b_in.index))
            prod = self._product_signal(m, a_value, self.b_in.value)
        summed = accumulate(m, self.acc, prod, self.acc_bits, self.saturate)
        if self.lanes > 1 and self.saturate:    # a pair's sum alone may pass acc_bits
            prod = saturate(m, prod, self.acc_bits, "first_sat")
        total = Signal(signed(self.acc_bits))
        m.d.comb += total.eq(Mux(self.a_in.first, prod, summed))
        on = self.a_in.valid & self.b_in.valid
        with m.If(on):
            m.d.sync += self.acc.eq(total)
        with m.If(on & self.a_in.last):
            m.d.sync += self.res.eq(total)
        with m.Elif(self.shift):
            m.d.sync += self.res.eq(self.res_in)
        return m


def psum_bits(bits: int, acc_bits: int, row: int, lanes: int = 1) -> int:
    """Width of row ``row``'s partial-sum register in a WS/IS column: it holds the exact sum of
    ``(row + 1) * lanes`` products of ``bits``-bit signed operands (each at most
    ``2**(2*bits-2)`` in magnitude; ``lanes`` per dual-MAC PE), which needs
    ``2*bits + floor(log2((row + 1) * lanes))`` bits, capped at ``acc_bits`` (where the
    column's arithmetic wraps or saturates). Narrower upper rows hold the same values as
    ``acc_bits``-wide ones, so the contract is unchanged."""
    return min(acc_bits, 2 * bits + ((row + 1) * lanes).bit_length() - 1)


class StationaryPE(_MacPE):
    """Weight/input-stationary PE: holds one stationary operand, passes partial sums down.

    Ports
    -----
    ``x_in`` / ``x_out``: streamed operand with ``valid`` and ``first`` (from the left; to the
    right, registered). ``w_load`` / ``w_in``: write ``w_in`` into the ``shadow`` register this
    cycle (the weight port). ``psum_in`` / ``psum_valid_in``: the partial sum of the PE above
    (absent in the top row, ``row == 0``, which adds to zero). ``psum`` / ``psum_valid``: this
    PE's partial-sum register (to the PE below or the output port), :func:`psum_bits` wide.
    ``shadow`` and ``active`` expose the double-buffered stationary operand. N:M sparse:
    WS (``x_group = M``) streams groups of M activations and holds each weight with its
    ``index_bits``-wide position; IS (``w_group = M``) holds the group and streams the weight
    with its index; either way the index picks the activation the PE multiplies.

    Timing contract (``hw.systolic.regmodel``, WS/IS)
    -------------------------------------------------
    When ``first`` arrives the PE copies ``shadow`` into ``active`` and uses the copied value
    in the same cycle; a ``shadow`` write in that cycle lands at the edge (the copy sees the old
    value). ``psum <= psum_in + x * active`` when ``x`` and the stationary operand are valid,
    else ``psum <= psum_in`` (wrapping or saturating at ``acc_bits``). ``psum_valid`` follows
    ``psum_valid_in`` one cycle later; in the top row it is the ``valid`` bit of the streamed
    operand register, which holds the same bit, so the top row has no separate register for it.
    """

    def __init__(self, bits: int, acc_bits: int, saturate: bool = False, row: int = 0,
                 x_group: int = 1, w_group: int = 1, index_bits: int = 0):
        self.row = row
        self.x_group, self.w_group = x_group, w_group
        # dual-MAC (int4): both sides carry the same number of operands, no index
        self.lanes = x_group if x_group == w_group else 1
        self.psum_bits = psum_bits(bits, acc_bits, row, self.lanes)
        above = psum_bits(bits, acc_bits, row - 1, self.lanes) if row else 1
        x_lay = stream_layout(bits, False, x_group, index_bits if w_group > 1 else 0)
        w_lay = weight_layout(bits, w_group, index_bits if x_group > 1 else 0)
        super().__init__(bits, acc_bits, saturate, {
            "x_in": In(x_lay),
            "x_out": Out(x_lay),
            "w_load": In(1),
            "w_in": In(w_lay),
            "psum_in": In(signed(above)),
            "psum_valid_in": In(1),
            "psum": Out(signed(self.psum_bits)),
            "psum_valid": Out(1),
            "shadow": Out(w_lay),
            "active": Out(w_lay),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.x_out.eq(self.x_in)
        with m.If(self.w_load):
            m.d.sync += self.shadow.eq(self.w_in)
        first = self.x_in.first
        with m.If(first):
            m.d.sync += self.active.eq(self.shadow)
        w_valid = Mux(first, self.shadow.valid, self.active.valid)
        x_value = self.x_in.value
        if self.lanes > 1:      # dual-MAC: every lane of x times the same lane of w, added
            w_value = Mux(first, self.shadow.value.as_value(), self.active.value.as_value())
            w_lanes = data.View(data.ArrayLayout(operand_shape(self.bits), self.lanes), w_value)
            prod = self._dot_signal(m, x_value, w_lanes, self.lanes)
        else:
            if self.x_group > 1:    # sparse WS: the weight's index picks the activation
                x_value = self.pick(x_value, Mux(first, self.shadow.index, self.active.index))
            if self.w_group > 1:    # sparse IS: the streamed weight's index picks it
                w_value = Mux(first, self.pick(self.shadow.value, self.x_in.index),
                              self.pick(self.active.value, self.x_in.index))
            else:
                w_value = Mux(first, self.shadow.value, self.active.value)
            prod = self._product_signal(m, x_value, w_value)
        if self.row == 0:
            summed, passed = prod, 0
            if self.lanes > 1:  # a pair's sum may pass a narrow accumulator's range
                summed = accumulate(m, 0, prod, self.psum_bits,
                                    self.saturate and self.psum_bits == self.acc_bits)
            m.d.comb += self.psum_valid.eq(self.x_out.valid)
        else:
            # Below acc_bits the exact sum fits (psum_bits), so only a full-width row can
            # overflow, and only there does the overflow mode matter.
            summed = accumulate(m, self.psum_in, prod, self.psum_bits,
                                self.saturate and self.psum_bits == self.acc_bits)
            passed = self.psum_in
            m.d.sync += self.psum_valid.eq(self.psum_valid_in)
        with m.If(self.x_in.valid & w_valid):
            m.d.sync += self.psum.eq(summed)
        with m.Else():
            m.d.sync += self.psum.eq(passed)
        return m
