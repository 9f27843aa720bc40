"""The vector lanes in Amaranth 0.5: int8 requantization, ReLU, element-wise add and pooling.

:class:`VectorLanes` is ``lanes`` identical integer lanes behind one pair of streams
(:mod:`amaranth.lib.stream`). A beat carries one element per lane: ``a`` (an int32 accumulator,
or an activation) and ``b`` (the second operand of an add), plus ``last``, which ends a pooling
window. The operation and its parameters (``cfg``) are held while a stream runs, as the
sequencer's command register holds them. Every lane computes exactly what
:mod:`hw.vector.functional` computes, rounded to the output type with
:func:`~hw.vector.functional.to_dtype` (:mod:`.cosim` checks it):

* ``REQUANT``: :func:`~hw.vector.functional.requantize_fixed`: ``a << max(shift, 0)``
  saturated to int32, times the Q0.31 ``multiplier`` with the high half rounded (ties toward
  +infinity), divided by ``2**max(-shift, 0)`` rounding half away from zero, plus
  ``zero_point``, clamped below at the zero point with ``relu``, saturated;
* ``RELU``: ``max(a, 0)``, saturated;
* ``ADD``: ``a + b``, saturated (:func:`~hw.vector.functional.binary` ``add`` on integers);
* ``MAX_POOL`` / ``AVG_POOL``: a window arrives as consecutive beats, one window element per
  lane per beat, the last one flagged ``last``; the lane emits the window's maximum, or its
  sum divided by the beats it received, rounded half to even (the float32 quotient of
  :func:`~hw.vector.functional.pool2d` rounded by ``to_dtype``, equal for windows of up to
  :data:`MAX_WINDOW` elements). Padding is never fed, so the count excludes it, as
  ``count_include_pad=0`` does; lanes pool channels side by side (NHWC).

Pipeline: three register stages for every operation. A beat accepted in cycle ``t`` (or a
window's last beat) leaves in cycle ``t + LATENCY``; the output stream's ``ready`` stalls every
stage at once (``in.ready = ~out.valid | out.ready``).

Datapath of one lane (stage registers between the rows)::

    a ─┬─ << left, sat32 ────────── x ── x * multiplier + nudge, >> 31 ── hi ── RDBP, + zp, relu ─┐
       ├─ max(a, 0) / a + b ─────── s ──────────────────────────────────── s ─────────────────────┤ sat ─ out
       └─ window max / sum, count ─ w ── (2|sum| + n) * recip[n] >> k ──── q ── tie to even, sign ─┘

The average divides without a divider: ``floor(N / d)`` for ``N = 2|sum| + n`` and ``d = 2n``
is ``N * ceil(2**k / d) >> k`` exactly when ``N < 2**(k - ceil(log2 d))`` (the round-up method of
Granlund and Montgomery, PLDI 1994); the reciprocals are a table indexed by the window's count,
shared by all lanes. A remainder of zero is a tie, which goes to the even quotient.
"""

from __future__ import annotations

from amaranth import Array, C, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["VecOp", "VectorLanes", "LATENCY", "MAX_WINDOW", "MUTATIONS", "reciprocals",
           "cfg_layout", "beat_layout"]

#: Cycles from a beat (or a window's last beat) in to its result out.
LATENCY = 3
#: Most beats one pooling window may have (kernels up to 16 x 16).
MAX_WINDOW = 256
_ACC_BITS = 32
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


class VecOp(enum.Enum, shape=3):
    """The lanes' operations (the ``op`` field of a command)."""
    REQUANT = 0
    RELU = 1
    ADD = 2
    MAX_POOL = 3
    AVG_POOL = 4


#: Deliberately broken lanes a co-simulation must catch: ``name: what is wrong``.
MUTATIONS = {
    "round-down": "the requantizing shift truncates instead of rounding half away from zero",
    "no-saturate": "results wrap to the output width instead of saturating",
    "relu-at-zero": "fused ReLU clamps at 0 instead of the output zero point",
    "avg-floor": "the average rounds down instead of half to even",
}


def cfg_layout(out_bits: int) -> data.StructLayout:
    """The operation and its parameters, held while a stream runs."""
    return data.StructLayout({"op": VecOp, "multiplier": unsigned(31), "shift": signed(6),
                              "zero_point": signed(out_bits), "relu": 1})


def beat_layout(lanes: int, out_bits: int) -> data.StructLayout:
    """One input beat: ``a`` (int32) and ``b`` (output width) per lane, and ``last``."""
    return data.StructLayout({"a": data.ArrayLayout(signed(_ACC_BITS), lanes),
                              "b": data.ArrayLayout(signed(out_bits), lanes), "last": 1})


def _count_bits(max_window: int) -> int:
    return max_window.bit_length()


def reciprocals(out_bits: int, max_window: int = MAX_WINDOW) -> tuple[int, list[int]]:
    """``(k, table)``: ``table[n] = ceil(2**k / (2n))`` for window counts ``n`` in
    ``1..max_window`` (``table[0]`` unused), with ``k`` large enough that
    ``(N * table[n]) >> k == N // (2n)`` for every ``N = 2|sum| + n`` a window of ``n``
    ``out_bits``-bit values can give (module docstring)."""
    n_bits = (2 * (1 << (out_bits - 1)) * max_window + max_window).bit_length()
    k = n_bits + (2 * max_window - 1).bit_length()
    table = [0] + [-(-(1 << k) // (2 * n)) for n in range(1, max_window + 1)]
    return k, table


def _saturate(value, lo: int, hi: int):
    return Mux(value > hi, hi, Mux(value < lo, lo, value))


class VectorLanes(wiring.Component):
    """``lanes`` integer lanes with ``out_bits``-bit results (8: int8, 16: int16); see the
    module docstring. ``mutation``: one of :data:`MUTATIONS` (a broken lane), or None."""

    def __init__(self, lanes: int, out_bits: int = 8, max_window: int = MAX_WINDOW,
                 mutation: str | None = None):
        if mutation is not None and mutation not in MUTATIONS:
            self._MustUse__silence = True      # never elaborated: no "unused" warning
            raise ValueError(f"VectorLanes: mutation = {mutation!r}: must be one of "
                             f"{', '.join(MUTATIONS)}")
        self.lanes, self.out_bits, self.max_window = lanes, out_bits, max_window
        self.mutation = mutation
        super().__init__({
            "cfg": In(cfg_layout(out_bits)),
            "inp": In(stream.Signature(beat_layout(lanes, out_bits))),
            "out": Out(stream.Signature(data.ArrayLayout(signed(out_bits), lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, bits, cfg = self.lanes, self.out_bits, self.cfg
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        mut = self.mutation
        k, table = reciprocals(bits, self.max_window)
        cbits = _count_bits(self.max_window)
        sum_bits = bits + cbits + 1

        en = Signal()
        m.d.comb += [en.eq(~self.out.valid | self.out.ready), self.inp.ready.eq(en)]
        fire = Signal()
        m.d.comb += fire.eq(self.inp.valid & en)
        op = cfg.op
        pool = (op == VecOp.MAX_POOL) | (op == VecOp.AVG_POOL)
        last = self.inp.payload.last

        # Window state shared by the lanes: beats so far in the open window.
        count = Signal(cbits)
        count_a = Signal(cbits)                  # the finished window's count (stage A)
        recip_b = Signal(range(table[1] + 1))    # its reciprocal (stage B)
        d_b = Signal(cbits + 1)                  # 2 * count (stage B)
        valid_a, valid_b = Signal(), Signal()
        with m.If(en):
            m.d.sync += [valid_a.eq(fire & (~pool | last)), valid_b.eq(valid_a),
                         self.out.valid.eq(valid_b)]
            recip = Array(C(v, len(recip_b)) for v in table)
            m.d.sync += [recip_b.eq(recip[count_a]), d_b.eq(count_a << 1)]
            with m.If(fire):
                m.d.sync += count.eq(Mux(last | ~pool, 0, count + 1))
                m.d.sync += count_a.eq(count + 1)

        left = Mux(cfg.shift > 0, cfg.shift, 0).as_unsigned()[:5]
        right = Mux(cfg.shift < 0, -cfg.shift, 0).as_unsigned()[:6]
        for i in range(lanes):
            a = self.inp.payload.a[i]
            b = self.inp.payload.b[i]
            x_a = Signal(signed(_ACC_BITS), name=f"x_a{i}")      # requant: shifted, sat32
            s_a = Signal(signed(_ACC_BITS + 1), name=f"s_a{i}")  # relu / add
            acc = Signal(signed(sum_bits), name=f"pool{i}")      # open window: max or sum
            w_a = Signal(signed(sum_bits), name=f"w_a{i}")       # finished window
            hi_b = Signal(signed(_ACC_BITS), name=f"hi_b{i}")
            s_b = Signal(signed(_ACC_BITS + 1), name=f"s_b{i}")
            q_b = Signal(sum_bits + 1, name=f"q_b{i}")
            n_b = Signal(sum_bits + 1, name=f"n_b{i}")
            neg_b = Signal(name=f"neg_b{i}")
            res = self.out.payload[i]

            # --- stage A
            first = count == 0
            with m.If(fire):
                m.d.sync += x_a.eq(_saturate(a << left, _INT32_MIN, _INT32_MAX))
                m.d.sync += s_a.eq(Mux(op == VecOp.ADD, a + b, Mux(a > 0, a, 0)))
                grown = Mux(op == VecOp.MAX_POOL, Mux(first | (a > acc), a, acc),
                            Mux(first, a, acc + a))
                m.d.sync += [acc.eq(grown), w_a.eq(grown)]
            # --- stage B
            with m.If(en):
                ab = x_a * cfg.multiplier
                total = Signal(signed(64), name=f"total{i}")
                m.d.comb += total.eq(ab + Mux(ab >= 0, 1 << 30, 1 - (1 << 30)))
                m.d.sync += hi_b.eq(Mux(total >= 0, total >> 31, -((-total) >> 31)))
                m.d.sync += s_b.eq(Mux(op == VecOp.MAX_POOL, w_a, s_a))
                mag = Mux(w_a < 0, -w_a, w_a).as_unsigned()
                n = (mag << 1) + count_a
                m.d.sync += [n_b.eq(n), neg_b.eq(w_a < 0)]
                if mut == "avg-floor":
                    m.d.sync += q_b.eq((mag * recip[count_a]) >> (k - 1))
                else:
                    m.d.sync += q_b.eq((n * recip[count_a]) >> k)
            # --- stage C
            with m.If(en):
                mask = Signal(32, name=f"mask{i}")
                m.d.comb += mask.eq((C(1, 33) << right) - 1)
                rem = hi_b.as_unsigned() & mask
                threshold = (mask >> 1) + (hi_b < 0)
                if mut == "round-down":
                    rq = hi_b >> right
                else:
                    rq = (hi_b >> right) + (rem > threshold)
                zp = cfg.zero_point
                y = Signal(signed(_ACC_BITS + 2), name=f"y{i}")
                m.d.comb += y.eq(rq + zp)
                floor_at = C(0, 1) if mut == "relu-at-zero" else zp
                y = Mux(cfg.relu & (y < floor_at), floor_at, y)
                tie = (n_b - q_b * d_b) == 0
                q = q_b - (tie & q_b[0]) if mut != "avg-floor" else q_b
                avg = Mux(neg_b, -q.as_signed(), q.as_signed())
                value = Mux(op == VecOp.REQUANT, y, Mux(op == VecOp.AVG_POOL, avg, s_b))
                if mut == "no-saturate":
                    m.d.sync += res.eq(value[:bits])
                else:
                    m.d.sync += res.eq(_saturate(value, lo, hi))
        return m
