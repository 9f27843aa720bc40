"""An AXI4 master port for the core: a bridge from the DMA streams to AXI4, and the core with it.

The core's own memory port (:mod:`.engines`) is two streams: ``mem_rd`` (a byte address and a
length of at most a scratchpad row, answered in the cycle it is accepted) and ``mem_wr``
(address, length and bytes). :class:`AxiBridge` turns them into one AXI4 master interface
(ARM IHI 0022, "AMBA AXI and ACE Protocol Specification", issue H), for a team whose memory
system or FPGA shell speaks AXI:

* ``data_bytes`` wide (a power of two, 4 to 128 bytes); a piece at any byte address becomes one
  INCR burst of the aligned beats it touches (``ceil((addr % W + bytes) / W)``), split in two
  where it would cross a 4 KB boundary (A3.4.1); ``size`` is the full bus width, ``cache``
  0b0011 (normal, non-cacheable, bufferable), ``prot``, ``lock``, ``qos`` and ``id`` zero;
* writes: the address and the data channel are driven together (a master must not wait for
  ``awready`` before ``wvalid``, A3.3.1), strobes mark the piece's bytes, and the piece is done
  when the write response arrives, so a command ends only when its data is in memory;
* one burst in flight per direction (loads and stores run side by side): a piece takes the
  slave's latency plus about four cycles, not one, so an AXI core runs slower than the
  executor's ideal memory (docs/core.md gives the figure);
* ``SLVERR`` / ``DECERR`` responses, and an ``rlast`` on the wrong beat, set the sticky
  ``error`` output (bit 3 of STATUS in :class:`AxiCore`); the data is used as it came, and
  an early ``rlast`` ends its burst (the bridge never waits for beats that will not come);
* a piece of 0 bytes is answered at once, with no AXI transfer; a bus so narrow that a row
  needs bursts of more than 256 beats is refused;
* reset is the ``sync`` domain's (Amaranth's active-high ``rst``: drive it from ``~ARESETn``);
  the valids are low while it is high (A3.1.2).

:class:`AxiCore` is :class:`~hw.core.rtl.core.Core` with the bridge on its memory ports: the
CSR bus and an ``axi`` master port.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.core.rtl.core import CSR, Core, csr_layout
from hw.core.rtl.engines import _mask, mem_read_signature, mem_write_signature

__all__ = ["axi4_signature", "AxiBridge", "AxiCore", "BURST_INCR", "CACHE"]

BURST_INCR = 0b01
CACHE = 0b0011          # AxCACHE: normal, non-cacheable, bufferable
_PAGE = 4096            # a burst must not cross a 4 KB boundary


def _address(addr: int, id_: int) -> wiring.Signature:
    return wiring.Signature({"valid": Out(1), "ready": In(1), "id": Out(id_), "addr": Out(addr),
                             "len": Out(8), "size": Out(3), "burst": Out(2), "lock": Out(1),
                             "cache": Out(4), "prot": Out(3), "qos": Out(4)})


def axi4_signature(data_bytes: int, addr: int = 32, id_: int = 1) -> wiring.Signature:
    """An AXI4 master's ports: the ``ar``, ``r``, ``aw``, ``w`` and ``b`` channels, each with
    ``valid`` and ``ready`` and the signals of the specification (lower case, no prefix: Verilog
    names are ``axi__ar__addr`` and so on)."""
    bits = 8 * data_bytes
    return wiring.Signature({
        "ar": Out(_address(addr, id_)),
        "r": Out(wiring.Signature({"valid": In(1), "ready": Out(1), "id": In(id_),
                                   "data": In(bits), "resp": In(2), "last": In(1)})),
        "aw": Out(_address(addr, id_)),
        "w": Out(wiring.Signature({"valid": Out(1), "ready": In(1), "data": Out(bits),
                                   "strb": Out(data_bytes), "last": Out(1)})),
        "b": Out(wiring.Signature({"valid": In(1), "ready": Out(1), "id": In(id_),
                                   "resp": In(2)})),
    })


def _check_data_bytes(component, data_bytes: int) -> None:
    if data_bytes not in (4, 8, 16, 32, 64, 128):
        component._MustUse__silence = True     # never elaborated: no "unused" warning
        raise ValueError(f"AxiBridge: data_bytes = {data_bytes!r}: allowed are 4, 8, 16, 32, "
                         "64 and 128 (AXI4 data buses of 32 to 1024 bits)")


class AxiBridge(wiring.Component):
    """The DMA streams of a core with ``row``-byte rows (flipped ``mem_rd``, ``mem_rd_data``,
    ``mem_wr``) to an AXI4 master (``axi``) of ``data_bytes`` per beat (module docstring).
    ``clear`` (high for a cycle) clears the sticky ``error``."""

    def __init__(self, row: int, data_bytes: int = 8):
        _check_data_bytes(self, data_bytes)
        self.row, self.data_bytes = row, data_bytes
        # the most beats a piece of at most `row` bytes can touch, at any alignment
        self.max_beats = (row - 1) // data_bytes + 2 if row > 1 else 1
        if self.max_beats > 256:
            self._MustUse__silence = True
            raise ValueError(f"AxiBridge: data_bytes = {data_bytes}: a {row}-byte row needs "
                             f"bursts of up to {self.max_beats} beats, AXI4 allows 256: use a "
                             "wider bus")
        super().__init__({
            "mem_rd": In(mem_read_signature(row)), "mem_rd_data": Out(8 * row),
            "mem_wr": In(mem_write_signature(row)),
            "axi": Out(axi4_signature(data_bytes)), "clear": In(1), "error": Out(1),
        })

    def _piece(self, m: Module, addr, nbytes, name: str):
        """Combinational: a piece's byte offset in its first beat, its first beat's address and
        how many beats it touches."""
        w = self.data_bytes
        shift = w.bit_length() - 1
        off = Signal(range(w), name=f"{name}_off")
        base = Signal(32, name=f"{name}_base")
        beats = Signal(range(self.max_beats + 1), name=f"{name}_beats")
        m.d.comb += [off.eq(addr[:shift]), base.eq(Cat(Const(0, shift), addr[shift:])),
                     beats.eq(((off + nbytes - 1) >> shift) + 1)]
        return off, base, beats

    def _segment(self, m: Module, addr, left, name: str):
        """Combinational: the beats of the next burst from ``addr``: the ``left`` beats, or up
        to the 4 KB boundary."""
        shift = self.data_bytes.bit_length() - 1
        to_page = Signal(range(_PAGE // self.data_bytes + 1), name=f"{name}_to_page")
        seg = Signal(range(self.max_beats + 1), name=f"{name}_seg")
        m.d.comb += [to_page.eq((_PAGE - addr[:12]) >> shift),
                     seg.eq(Mux(left < to_page, left, to_page))]
        return seg

    def _burst_done(self, m: Module, addr, left, seg, again: str):
        """After a burst's last beat or response: step past its beats; then the piece is
        done, or its second burst (state ``again``) follows."""
        shift = self.data_bytes.bit_length() - 1
        m.d.sync += [left.eq(left - seg), addr.eq(addr + (seg << shift))]
        with m.If(left == seg):
            m.next = "DONE"
        with m.Else():
            m.next = again

    def elaborate(self, platform):
        m = Module()
        w, nb = self.data_bytes, self.max_beats
        shift = w.bit_length() - 1
        axi = self.axi
        error = Signal()
        m.d.comb += self.error.eq(error)
        with m.If(self.clear):
            m.d.sync += error.eq(0)
        for ch in (axi.ar, axi.aw):
            m.d.comb += [ch.size.eq(shift), ch.burst.eq(BURST_INCR), ch.cache.eq(CACHE)]

        # --- reads: IDLE -> AR -> R (-> AR: the rest of a piece split at 4 KB) -> DONE.
        # r_addr and r_left (the next burst's address, the piece's beats from there) hold
        # still for a burst, so r_seg (its beats) does too.
        rd = self.mem_rd
        r_off, r_base, r_beats = self._piece(m, rd.payload.addr, rd.payload.bytes, "rd")
        r_off_q = Signal.like(r_off)
        r_addr, r_left = Signal(32), Signal(range(nb + 1))
        r_seg = self._segment(m, r_addr, r_left, "rd")
        r_j, r_k = Signal(range(nb)), Signal(range(nb))   # beat in the burst, in the piece
        r_buf = Signal(8 * w * nb)
        m.d.comb += [axi.ar.addr.eq(r_addr), axi.ar.len.eq(r_seg - 1),
                     self.mem_rd_data.eq((r_buf >> (r_off_q << 3))[:8 * self.row])]
        with m.FSM(name="rd_fsm"):
            with m.State("IDLE"):
                with m.If(rd.valid & (rd.payload.bytes == 0)):
                    m.next = "DONE"                 # nothing to read
                with m.Elif(rd.valid):
                    m.d.sync += [r_off_q.eq(r_off), r_addr.eq(r_base), r_left.eq(r_beats),
                                 r_k.eq(0)]
                    m.next = "AR"
            with m.State("AR"):
                m.d.comb += axi.ar.valid.eq(~ResetSignal())      # low in reset (A3.1.2)
                with m.If(axi.ar.ready):
                    m.d.sync += r_j.eq(0)
                    m.next = "R"
            with m.State("R"):
                m.d.comb += axi.r.ready.eq(1)
                with m.If(axi.r.valid):
                    with m.Switch(r_k):
                        for k in range(nb):
                            with m.Case(k):
                                m.d.sync += r_buf[8 * w * k:8 * w * (k + 1)].eq(axi.r.data)
                    final = r_j == r_seg - 1
                    m.d.sync += [r_k.eq(r_k + 1), r_j.eq(r_j + 1)]
                    with m.If((axi.r.resp != 0) | (axi.r.last != final)):
                        m.d.sync += error.eq(1)
                    # an early rlast ends the burst too (flagged above): never wait for
                    # beats the slave will not send
                    with m.If(final | axi.r.last):
                        self._burst_done(m, r_addr, r_left, r_seg, "AR")
            with m.State("DONE"):
                m.d.comb += rd.ready.eq(1)
                m.next = "IDLE"

        # --- writes: IDLE -> AW+W (address and data side by side) -> B (-> AW+W) -> DONE
        wr = self.mem_wr
        w_off, w_base, w_beats = self._piece(m, wr.payload.addr, wr.payload.bytes, "wr")
        w_addr, w_left = Signal(32), Signal(range(nb + 1))
        w_seg = self._segment(m, w_addr, w_left, "wr")
        w_j, w_k = Signal(range(nb)), Signal(range(nb))
        w_buf, s_buf = Signal(8 * w * nb), Signal(w * nb)
        aw_done, w_done = Signal(), Signal()
        m.d.comb += [axi.aw.addr.eq(w_addr), axi.aw.len.eq(w_seg - 1),
                     axi.w.data.eq(w_buf.word_select(w_k, 8 * w)),
                     axi.w.strb.eq(s_buf.word_select(w_k, w)),
                     axi.w.last.eq(w_j == w_seg - 1)]
        with m.FSM(name="wr_fsm"):
            with m.State("IDLE"):
                with m.If(wr.valid & (wr.payload.bytes == 0)):
                    m.next = "DONE"                 # nothing to write
                with m.Elif(wr.valid):
                    m.d.sync += [w_buf.eq(wr.payload.data << (w_off << 3)),
                                 s_buf.eq(_mask(wr.payload.bytes, 0, self.row) << w_off),
                                 w_addr.eq(w_base), w_left.eq(w_beats), w_k.eq(0), w_j.eq(0),
                                 aw_done.eq(0), w_done.eq(0)]
                    m.next = "AW_W"
            with m.State("AW_W"):
                m.d.comb += [axi.aw.valid.eq(~aw_done & ~ResetSignal()),
                             axi.w.valid.eq(~w_done & ~ResetSignal())]
                aw_now = aw_done | axi.aw.ready
                with m.If(axi.aw.ready):
                    m.d.sync += aw_done.eq(1)
                w_last_now = Signal()
                m.d.comb += w_last_now.eq(w_done | (axi.w.ready & axi.w.last))
                with m.If(~w_done & axi.w.ready):
                    m.d.sync += [w_k.eq(w_k + 1), w_j.eq(w_j + 1)]
                    with m.If(axi.w.last):
                        m.d.sync += w_done.eq(1)
                with m.If(aw_now & w_last_now):
                    m.next = "B"
            with m.State("B"):
                m.d.comb += axi.b.ready.eq(1)
                with m.If(axi.b.valid):
                    with m.If(axi.b.resp != 0):
                        m.d.sync += error.eq(1)
                    m.d.sync += [w_j.eq(0), aw_done.eq(0), w_done.eq(0)]
                    self._burst_done(m, w_addr, w_left, w_seg, "AW_W")
            with m.State("DONE"):
                m.d.comb += wr.ready.eq(1)
                m.next = "IDLE"
        return m


class AxiCore(wiring.Component):
    """:class:`~hw.core.rtl.core.Core` (same arguments) with an :class:`AxiBridge` of
    ``data_bytes`` per beat on its memory ports: ports ``csr``, ``csr_rdata`` and ``axi``.
    STATUS gains bit 3: an AXI error response since the start."""

    def __init__(self, program, mutation: str | None = None, *, data_bytes: int = 8, **kw):
        _check_data_bytes(self, data_bytes)
        self.core = Core(program, mutation, **kw)
        self.program, self.geo, self.row = program, self.core.geo, self.core.row
        self.bridge = AxiBridge(self.core.row, data_bytes)
        super().__init__({"csr": In(csr_layout()), "csr_rdata": Out(32),
                          "axi": Out(axi4_signature(data_bytes))})

    def elaborate(self, platform):
        m = Module()
        core, bridge = self.core, self.bridge
        m.submodules.core, m.submodules.bridge = core, bridge
        wiring.connect(m, core.mem_rd, bridge.mem_rd)
        wiring.connect(m, core.mem_wr, bridge.mem_wr)
        wiring.connect(m, wiring.flipped(self.axi), bridge.axi)
        start = self.csr.we & (self.csr.addr == CSR["CONTROL"]) & self.csr.wdata[0]
        m.d.comb += [core.mem_rd_data.eq(bridge.mem_rd_data), core.csr.eq(self.csr),
                     bridge.clear.eq(start),
                     self.csr_rdata.eq(core.csr_rdata | Mux(self.csr.addr == CSR["STATUS"],
                                                            bridge.error << 3, 0))]
        return m
