"""What the formal checks (:mod:`hw.core.formal`) put into the core: engines that finish each
command when the solver chooses, and the properties and assumptions the check proves under.
A :class:`~hw.core.rtl.core.Core` built with ``formal=latency`` uses them."""

from __future__ import annotations

from amaranth import Module, ResetSignal, Signal
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.core.isa import VOP, CoreProgram, Op
from hw.core.rtl.engines import (
    _engine_signature, mem_read_signature, mem_write_signature, read_layout, word_layout,
)

__all__ = ["AbstractEngine", "dependencies_done", "environment", "bound"]


def bound(core: CoreProgram, latency: int) -> int:
    """The cycle (from reset) by which the program must be done (``STATUS.done``): it starts
    in cycle 2 (the CSR write is in cycle 1), each command takes at most ``latency + 1``
    cycles, all of them one after another in the worst case, and the done flag is a register."""
    return 3 + sum(len(q) for q in core.queues) * (latency + 1)


class AbstractEngine(wiring.Component):
    """An engine that finishes each command 1 to ``latency`` cycles after its start, as the
    solver chooses; ``cur`` is the command it runs. It makes no scratchpad or memory access."""

    def __init__(self, row: int, latency: int, kind: str):
        self.latency = latency
        extra = {"cur": Out(word_layout()), "rd_b": Out(read_layout()), "b_data": In(8 * row),
                 "rd_c": Out(read_layout()), "c_data": In(8 * row)}
        if kind == "load":
            extra.update(mem_rd=Out(mem_read_signature(row)), mem_rd_data=In(8 * row))
        if kind == "store":
            extra["mem_wr"] = Out(mem_write_signature(row))
        super().__init__(_engine_signature(row, extra))

    def elaborate(self, platform):
        from amaranth.asserts import AnySeq

        m = Module()
        count = Signal(range(self.latency + 1))
        with m.If(self.start):
            m.d.sync += [self.cur.eq(self.cmd), self.busy.eq(1), count.eq(1)]
        choose = AnySeq(1)
        m.d.comb += self.last.eq(self.busy & (choose | (count >= self.latency)))
        with m.If(self.busy):
            m.d.sync += count.eq(count + 1)
            with m.If(self.last):
                m.d.sync += self.busy.eq(0)
        return m


def dependencies_done(m: Module, start, done, waits) -> None:
    """Property 1 (module docstring) for one engine."""
    ok = 1
    for d, w in zip(done, waits):
        ok = ok & (d >= w)
    m.d.comb += Assert(~start | ok)


def _touches(w):
    """A 6-bit mask of the (scratchpad, half) ports command word ``w`` uses (bit 2 s + h)."""
    def bit(spad, half):
        return (1 << (spad << 1)) << half

    load = bit(w.spad, w.half)
    store = bit(2, w.half)
    compute = bit(0, w.a_half) | bit(1, w.b_half) | bit(2, w.c_half)
    vector = bit(w.src, w.src_half) | bit(2, w.dst_half)
    vector = vector | ((w.vop == VOP["add"]).replicate(6) & bit(1, w.b_half))
    return ((w.op == Op.LOAD).replicate(6) & load) | ((w.op == Op.STORE).replicate(6) & store) \
        | ((w.op == Op.COMPUTE).replicate(6) & compute) \
        | ((w.op == Op.VECTOR).replicate(6) & vector)


def environment(m: Module, core, engines: dict, run, done_flag, control_addr: int) -> None:
    """Assumptions (reset once, the program started by one CSR write of 1 to ``control_addr``)
    and properties 2 and 3 of :mod:`hw.core.formal`."""
    from amaranth.asserts import Initial

    m.d.comb += Assume(ResetSignal() == Initial())
    t = Signal(16)
    m.d.sync += t.eq(t + 1)
    csr = core.csr
    m.d.comb += [Assume(csr.we == (t == 1)), Assume(csr.addr == control_addr),
                 Assume(csr.wdata == 1)]
    running = list(engines.values())
    masks = []
    for eng in running:
        mask = Signal(6, name=f"ports_{id(eng) % 9973}")
        m.d.comb += mask.eq(_touches(eng.cur))
        masks.append(mask)
    for i in range(len(running)):
        for j in range(i + 1, len(running)):
            both = running[i].busy & running[j].busy
            m.d.comb += Assert(~both | ((masks[i] & masks[j]) == 0))
    with m.If(t == bound(core.program, core.formal)):
        m.d.comb += Assert(done_flag)
    m.d.comb += Cover(done_flag)


