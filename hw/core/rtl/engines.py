"""The core's engines in Amaranth 0.5: the two DMA engines and the vector engine.

Every engine has the same handshake with the sequencer (:mod:`.core`): in the cycle ``start``
is high, ``cmd`` holds its command word (:func:`word_layout`) and the engine takes it; ``last``
is high in the command's final cycle, after which the engine takes the next one. Every engine
reaches the scratchpads through one read request (``rd``: the row of a half of a scratchpad,
its data in ``rdata`` the next cycle) and one write request (``wr``: a row with byte enables),
routed by the core. Buses are ``row`` bytes wide, the widest scratchpad row; a narrower
scratchpad takes the low bytes.

The cycles each command takes (:mod:`hw.core.timing` states them and the co-simulation holds
the two equal):

* ``LOAD``: ``setup`` cycles (the descriptor), then one *piece* per cycle: the part of a chunk
  of the DRAM box that falls in one scratchpad row. The memory port is a request stream
  (``mem_rd``: byte address and length, at most a row), answered in the cycle it is accepted
  (``mem_rd_data``, the bytes from lane 0); a memory that is not ready stalls the engine. Each
  piece is written to its row with byte enables, so any box lands packed from byte 0 of the
  half, whatever its alignment.
* ``STORE``: the same walk over the box, reading each piece's row one cycle ahead (the read of
  the first piece overlaps the last setup cycle) and writing it to the memory port
  (``mem_wr``: address, length and bytes from lane 0).
* ``VECTOR``: one beat per cycle from the cycle after its start, through the lanes
  (:class:`hw.vector.rtl.lane.VectorLanes`): a beat reads one ifmap row (``lanes`` int8) and,
  for an add, one filter row; results are written to the ofmap half ``1 + LATENCY`` cycles
  after their beat is read. Element-wise ops take ``ceil(elements / lanes)`` beats; pooling one
  beat per real (unpadded) window element per block of ``lanes`` channels.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.core.isa import FIELDS, SIGNED, VOP
from hw.vector.rtl.lane import LATENCY, VectorLanes

__all__ = ["word_layout", "read_layout", "write_layout", "mem_read_signature",
           "mem_write_signature", "LoadDma", "StoreDma", "VectorEngine", "ArrayEngine"]

_ROW_BITS = 16


def word_layout() -> data.StructLayout:
    """A command word (:data:`hw.core.isa.FIELDS`)."""
    return data.StructLayout({k: signed(b) if k in SIGNED else unsigned(b)
                              for k, b in FIELDS.items()})


def read_layout() -> data.StructLayout:
    return data.StructLayout({"en": 1, "spad": 2, "half": 1, "row": _ROW_BITS})


def write_layout(row: int) -> data.StructLayout:
    return data.StructLayout({"en": 1, "spad": 2, "half": 1, "row": _ROW_BITS,
                              "data": 8 * row, "mask": row})


def mem_read_signature(row: int) -> stream.Signature:
    """The load DMA's requests: a byte address and a length of at most ``row`` bytes."""
    return stream.Signature(data.StructLayout({"addr": 32, "bytes": _ROW_BITS + 1}))


def mem_write_signature(row: int) -> stream.Signature:
    """The store DMA's writes: address, length and the bytes from lane 0."""
    return stream.Signature(data.StructLayout({"addr": 32, "bytes": _ROW_BITS + 1,
                                               "data": 8 * row}))


def _engine_signature(row: int, extra: dict) -> dict:
    return {"start": In(1), "cmd": In(word_layout()), "busy": Out(1), "last": Out(1),
            "rd": Out(read_layout()), "rdata": In(8 * row), "wr": Out(write_layout(row)),
            **extra}


class _BoxWalk:
    """The piece walk over a DMA box, shared by both DMA engines: registers and the piece the
    walk is at (module docstring). ``spad_row`` is the row bytes of the scratchpad the command
    names (a power of two), a signal."""

    def __init__(self, m: Module, cmd, start, row_bits: Signal, max_row: int):
        self.n2, self.n1 = Signal(16), Signal(16)
        self.stride2, self.stride1 = Signal(32), Signal(32)
        self.chunk = Signal(16)
        self.i2, self.i1 = Signal(16), Signal(16)
        self.addr2, self.addr1 = Signal(32), Signal(32)   # block and chunk bases
        self.off = Signal(16)                              # bytes into the chunk
        self.ptr = Signal(_ROW_BITS + 8)                   # byte address in the half
        self.spad, self.half = Signal(2), Signal(1)
        with m.If(start):
            m.d.sync += [self.n2.eq(cmd.n2), self.n1.eq(cmd.n1), self.stride2.eq(cmd.stride2),
                         self.stride1.eq(cmd.stride1), self.chunk.eq(cmd.chunk),
                         self.i2.eq(0), self.i1.eq(0), self.addr2.eq(cmd.dram_addr),
                         self.addr1.eq(cmd.dram_addr), self.off.eq(0), self.ptr.eq(0),
                         self.spad.eq(cmd.spad), self.half.eq(cmd.half)]
        # the piece: up to the end of the chunk and of the scratchpad row
        row_bytes = Signal(_ROW_BITS)
        m.d.comb += row_bytes.eq(1 << row_bits)
        self.byte = Signal(range(max_row))                 # byte of the piece in its row
        m.d.comb += self.byte.eq(self.ptr & (row_bytes - 1))
        room = row_bytes - self.byte
        left = self.chunk - self.off
        self.length = Signal(_ROW_BITS + 1)
        m.d.comb += self.length.eq(Mux(left < room, left, room))
        self.row = Signal(_ROW_BITS)
        m.d.comb += self.row.eq(self.ptr >> row_bits)
        self.addr = Signal(32)
        m.d.comb += self.addr.eq(self.addr1 + self.off)
        chunk_end = self.off + self.length == self.chunk
        self.final = Signal()
        m.d.comb += self.final.eq(chunk_end & (self.i1 + 1 == self.n1) & (self.i2 + 1 == self.n2))
        self._chunk_end = chunk_end

    def advance(self, m: Module):
        """Statements that step the walk past the current piece."""
        m.d.sync += self.ptr.eq(self.ptr + self.length)
        with m.If(self._chunk_end):
            m.d.sync += self.off.eq(0)
            with m.If(self.i1 + 1 == self.n1):
                m.d.sync += [self.i1.eq(0), self.i2.eq(self.i2 + 1),
                             self.addr2.eq(self.addr2 + self.stride2),
                             self.addr1.eq(self.addr2 + self.stride2)]
            with m.Else():
                m.d.sync += [self.i1.eq(self.i1 + 1), self.addr1.eq(self.addr1 + self.stride1)]
        with m.Else():
            m.d.sync += self.off.eq(self.off + self.length)


def _dma_front(m: Module, dma):
    """What both DMA engines share: the cycles since the start (counting up to ``setup``,
    1 in the cycle after the start) and the box walk."""
    cyc = Signal(range(dma.setup + 1))
    row_bits = Signal(4)
    with m.If(dma.start):
        m.d.sync += [dma.busy.eq(1), cyc.eq(1),
                     row_bits.eq(_row_bits_of(dma.cmd.spad, dma.rows))]
    with m.If(dma.busy & (cyc < dma.setup)):
        m.d.sync += cyc.eq(cyc + 1)
    return cyc, _BoxWalk(m, dma.cmd, dma.start, row_bits, dma.row)


def _row_bits_of(spad, rows: tuple[int, int, int]):
    """log2 of the row bytes of scratchpad ``spad`` (a signal)."""
    bits = [r.bit_length() - 1 for r in rows]
    return Mux(spad == 0, bits[0], Mux(spad == 1, bits[1], bits[2]))


def _mask(length, shift, width: int):
    """``length`` ones from bit ``shift``, ``width`` bits."""
    length = length[:width.bit_length()]
    return (((Const(1, width + 1) << length) - 1)[:width + 1] << shift)[:width]


class LoadDma(wiring.Component):
    """DRAM -> scratchpad (module docstring). ``rows``: each scratchpad's row bytes;
    ``setup``: descriptor cycles (>= 2)."""

    def __init__(self, rows: tuple[int, int, int], setup: int):
        self.rows, self.setup = rows, setup
        self.row = max(rows)
        super().__init__(_engine_signature(self.row, {
            "mem_rd": Out(mem_read_signature(self.row)), "mem_rd_data": In(8 * self.row)}))

    def elaborate(self, platform):
        m = Module()
        cyc, walk = _dma_front(m, self)
        moving = self.busy & (cyc == self.setup)
        m.d.comb += [self.mem_rd.valid.eq(moving), self.mem_rd.payload.addr.eq(walk.addr),
                     self.mem_rd.payload.bytes.eq(walk.length)]
        fire = moving & self.mem_rd.ready
        bits = 8 * self.row
        m.d.comb += [
            self.wr.en.eq(fire), self.wr.spad.eq(walk.spad), self.wr.half.eq(walk.half),
            self.wr.row.eq(walk.row),
            self.wr.data.eq((self.mem_rd_data << (walk.byte << 3))[:bits]),
            self.wr.mask.eq(_mask(walk.length, walk.byte, self.row)),
        ]
        with m.If(fire):
            walk.advance(m)
            with m.If(walk.final):
                m.d.comb += self.last.eq(1)
                m.d.sync += self.busy.eq(0)
        return m


class StoreDma(wiring.Component):
    """Scratchpad -> DRAM (module docstring); arguments as :class:`LoadDma`."""

    def __init__(self, rows: tuple[int, int, int], setup: int):
        self.rows, self.setup = rows, setup
        self.row = max(rows)
        super().__init__(_engine_signature(self.row, {
            "mem_wr": Out(mem_write_signature(self.row))}))

    def elaborate(self, platform):
        m = Module()
        cyc, walk = _dma_front(m, self)
        # stage 1: the piece whose row was read last cycle, sent to memory
        s1 = Signal()
        s1_addr, s1_len, s1_row = Signal(32), Signal(_ROW_BITS + 1), Signal(_ROW_BITS)
        s1_byte = Signal(range(self.row))
        s1_final = Signal()
        stall = s1 & ~self.mem_wr.ready
        # stage 0: the walk reads its piece's row, from the last setup cycle on
        reading = self.busy & (cyc >= self.setup - 1) & ~stall & ~(s1 & s1_final)
        m.d.comb += [self.rd.en.eq(reading | stall), self.rd.spad.eq(walk.spad),
                     self.rd.half.eq(walk.half), self.rd.row.eq(Mux(stall, s1_row, walk.row))]
        with m.If(~stall):
            m.d.sync += s1.eq(reading & ~(s1 & s1_final))
            with m.If(reading):
                m.d.sync += [s1_addr.eq(walk.addr), s1_len.eq(walk.length),
                             s1_byte.eq(walk.byte), s1_row.eq(walk.row),
                             s1_final.eq(walk.final)]
                walk.advance(m)
        m.d.comb += [self.mem_wr.valid.eq(s1), self.mem_wr.payload.addr.eq(s1_addr),
                     self.mem_wr.payload.bytes.eq(s1_len),
                     self.mem_wr.payload.data.eq(self.rdata >> (s1_byte << 3))]
        with m.If(s1 & self.mem_wr.ready & s1_final):
            m.d.comb += self.last.eq(1)
            m.d.sync += [self.busy.eq(0), s1.eq(0), s1_final.eq(0)]
        return m


class VectorEngine(wiring.Component):
    """The vector engine: a walk that reads beats from the scratchpads, the lanes, and the
    write-back into the ofmap half (module docstring). ``rows``: the scratchpads' row bytes;
    ``lanes``: the ifmap row bytes."""

    def __init__(self, rows: tuple[int, int, int], lanes: int, mutation: str | None = None):
        self.rows, self.lanes, self.mutation = rows, lanes, mutation
        self.row = max(rows)
        super().__init__(_engine_signature(self.row, {"rd_b": Out(read_layout()),
                                                      "b_data": In(8 * self.row)}))

    def elaborate(self, platform):
        m = Module()
        L, out_row = self.lanes, self.rows[2]
        m.submodules.lanes = lanes = VectorLanes(L, 8, mutation=self.mutation)
        cmd = Signal(word_layout())
        with m.If(self.start):
            m.d.sync += [cmd.eq(self.cmd), self.busy.eq(1)]
        pool = (cmd.vop == VOP["maxpool"]) | (cmd.vop == VOP["avgpool"])
        m.d.comb += [lanes.cfg.op.eq(cmd.vop), lanes.cfg.multiplier.eq(cmd.multiplier),
                     lanes.cfg.shift.eq(cmd.shift), lanes.cfg.zero_point.eq(cmd.zero_point),
                     lanes.cfg.relu.eq(cmd.relu), lanes.out.ready.eq(1)]

        # --- the beat walk (one beat per cycle while `walking`)
        walking = Signal()
        beat = Signal(20)                   # element-wise: beat index
        cb, oy, ox, ky, kx = (Signal(12, name=n) for n in ("cb", "oy", "ox", "ky", "kx"))

        def bounds(w, oy_, ox_):
            # a window's real rows [ky_lo, ky_hi) and columns [kx_lo, kx_hi) (no padding)
            y0 = ((w.r0 + oy_) * w.sh).as_signed() - w.pad_t
            x0 = (ox_ * w.sw).as_signed() - w.pad_l
            ky_lo = Mux(y0 < 0, -y0, 0)
            ky_hi = Mux(w.in_h - y0 < w.kh, w.in_h - y0, w.kh)
            kx_lo = Mux(x0 < 0, -x0, 0)
            kx_hi = Mux(w.in_w - x0 < w.kw, w.in_w - x0, w.kw)
            return y0, x0, ky_lo, ky_hi, kx_lo, kx_hi

        y0, x0, ky_lo, ky_hi, kx_lo, kx_hi = bounds(cmd, oy, ox)
        window_end = (ky + 1 >= ky_hi) & (kx + 1 >= kx_hi)
        last_ox = ox + 1 == cmd.out_w
        last_oy = oy + 1 == cmd.rows
        n_ox = Mux(last_ox, 0, ox + 1)
        n_oy = Mux(last_ox, Mux(last_oy, 0, oy + 1), oy)
        _, _, n_ky_lo, _, n_kx_lo, _ = bounds(cmd, n_oy, n_ox)
        n_beats = (cmd.elems + L - 1) >> (L.bit_length() - 1)
        final = Mux(pool, window_end & last_ox & last_oy & (cb + 1 == cmd.blocks),
                    beat + 1 == n_beats)

        _, _, ky_first, _, kx_first, _ = bounds(self.cmd, Const(0, 12), Const(0, 12))
        with m.If(self.start):
            m.d.sync += [walking.eq(1), beat.eq(0), cb.eq(0), oy.eq(0), ox.eq(0),
                         ky.eq(ky_first), kx.eq(kx_first)]
        # read address of this beat: pixel (y, x) of the tile's rows, block cb
        y = (y0 + ky - cmd.top).as_unsigned()
        x = (x0 + kx).as_unsigned()
        pix_row = Signal(_ROW_BITS)
        m.d.comb += pix_row.eq((y * cmd.in_w + x) * cmd.blocks + cb)
        src_row = Mux(pool, pix_row, beat)
        m.d.comb += [self.rd.en.eq(walking), self.rd.spad.eq(cmd.src),
                     self.rd.half.eq(cmd.src_half), self.rd.row.eq(src_row)]
        # the filter row of an add (the same beat's row of the second operand)
        m.d.comb += [self.rd_b.en.eq(walking & (cmd.vop == VOP["add"])), self.rd_b.spad.eq(1),
                     self.rd_b.half.eq(cmd.b_half), self.rd_b.row.eq(beat)]
        with m.If(walking):
            with m.If(final):
                m.d.sync += walking.eq(0)
            m.d.sync += beat.eq(beat + 1)
            with m.If(window_end):
                m.d.sync += [ox.eq(n_ox), oy.eq(n_oy), ky.eq(n_ky_lo), kx.eq(n_kx_lo)]
                with m.If(last_ox & last_oy):
                    m.d.sync += cb.eq(cb + 1)
            with m.Elif(kx + 1 >= kx_hi):
                m.d.sync += [ky.eq(ky + 1), kx.eq(kx_lo)]
            with m.Else():
                m.d.sync += kx.eq(kx + 1)

        # --- stage R: the beat's data arrives (rdata); its output place rides along
        out_off = Signal(_ROW_BITS + 8)      # byte offset of this beat's result in the half
        m.d.comb += out_off.eq(Mux(pool, ((oy * cmd.out_w + ox) * cmd.blocks + cb) * L,
                                   beat * L))
        produces = walking & Mux(pool, window_end, 1)
        valid_bytes = Mux(pool, L, Mux(cmd.elems - beat * L < L, cmd.elems - beat * L, L))
        r_valid, r_last, r_final = Signal(), Signal(), Signal()
        r_off, r_bytes = Signal(_ROW_BITS + 8), Signal(_ROW_BITS)
        m.d.sync += [r_valid.eq(walking), r_last.eq(produces), r_final.eq(walking & final),
                     r_off.eq(out_off), r_bytes.eq(valid_bytes)]
        wide = Signal()                     # int32 accumulators (an epilogue), not int8
        m.d.sync += wide.eq(cmd.src == 2)
        for i in range(L):
            byte = self.rdata.word_select(i, 8).as_signed()
            word = self.rdata.word_select(i, 32).as_signed() if 32 * L <= len(self.rdata) \
                else byte
            m.d.comb += [lanes.inp.payload.a[i].eq(Mux(wide, word, byte)),
                         lanes.inp.payload.b[i].eq(self.b_data.word_select(i, 8).as_signed())]
        m.d.comb += [lanes.inp.valid.eq(r_valid), lanes.inp.payload.last.eq(r_last)]
        # the place of each result, delayed as the lanes delay it
        pipe = [(r_last, r_off, r_bytes, r_final)]
        for s in range(LATENCY):
            v, o, b, f = Signal(name=f"p{s}_v"), Signal(_ROW_BITS + 8, name=f"p{s}_off"), \
                Signal(_ROW_BITS, name=f"p{s}_bytes"), Signal(name=f"p{s}_final")
            pv, po, pb, pf = pipe[-1]
            m.d.sync += [v.eq(pv), o.eq(po), b.eq(pb), f.eq(pf)]
            pipe.append((v, o, b, f))
        w_valid, w_off, w_bytes, w_final = pipe[-1]
        byte = w_off[:max(1, out_row.bit_length() - 1)]
        m.d.comb += [
            self.wr.en.eq(w_valid & lanes.out.valid), self.wr.spad.eq(2),
            self.wr.half.eq(cmd.dst_half), self.wr.row.eq(w_off >> (out_row.bit_length() - 1)),
            self.wr.data.eq((Cat(*lanes.out.payload) << (byte << 3))[:8 * self.row]),
            self.wr.mask.eq(_mask(w_bytes, byte, self.row)),
        ]
        with m.If(w_final):
            m.d.comb += self.last.eq(1)
            m.d.sync += self.busy.eq(0)
        return m


class _FoldCursor:
    """A walk over an array command's folds in the register model's order (row folds
    innermost, :func:`hw.systolic.mapping.fold_geometry`): the fold's first row and column,
    the rows and columns it uses, and ``advance`` to the next (``done`` after the last)."""

    def __init__(self, m: Module, cmd, rows: int, cols: int, row_folds, col_folds, name: str):
        self.rf, self.cf = Signal(12, name=f"{name}_rf"), Signal(12, name=f"{name}_cf")
        self.done = Signal(name=f"{name}_done")
        self.row_folds, self.col_folds = row_folds, col_folds
        self.r0, self.c0 = self.rf * rows, self.cf * cols
        self.ru = Mux(cmd.k - self.r0 < rows, cmd.k - self.r0, rows)
        self.cu = Mux(cmd.n - self.c0 < cols, cmd.n - self.c0, cols)
        self.last_row_fold = self.rf + 1 == row_folds
        self.last = self.last_row_fold & (self.cf + 1 == col_folds)

    def reset(self) -> list:
        return [self.rf.eq(0), self.cf.eq(0), self.done.eq(0)]

    def advance(self, m: Module) -> None:
        with m.If(self.last_row_fold):
            m.d.sync += self.rf.eq(0)
            with m.If(self.cf + 1 == self.col_folds):
                m.d.sync += self.done.eq(1)
            with m.Else():
                m.d.sync += self.cf.eq(self.cf + 1)
        with m.Else():
            m.d.sync += self.rf.eq(self.rf + 1)


class ArrayEngine(wiring.Component):
    """The array engine: the weight-stationary :class:`~hw.systolic.rtl.array.SystolicArray`
    (with output de-skew) and the controller that feeds it from the scratchpads and writes
    its outputs into the ofmap half (module docstring of :mod:`hw.core.timing`).

    The controller runs the register model's handshakes (:mod:`hw.systolic.regmodel`): the
    weight port writes one row of a fold per cycle and may start fold f+1 once fold f's
    ``first`` has reached PE (0, C-1); the feeder streams a fold's T vectors once the port has
    written that fold's row 0. Each scratchpad read is issued one cycle before the array needs
    it (the SRAM's read cycle), so the array runs the model's cycles one cycle after the
    command starts. Row m of a fold leaves the de-skew ``R + C - 1`` cycles after it entered;
    for K folds after the first (or every fold, when the command continues a tile whose
    partial sums are already in the half: ``acc``) it is added to the partial sums read one
    cycle earlier."""

    def __init__(self, cfg, rows: tuple[int, int, int]):
        from hw.systolic.rtl.array import SystolicArray

        self.cfg, self.rows = cfg, rows
        self.row = max(rows)
        self._array_cls = SystolicArray
        super().__init__(_engine_signature(self.row, {
            "rd_b": Out(read_layout()), "b_data": In(8 * self.row),
            "rd_c": Out(read_layout()), "c_data": In(8 * self.row)}))

    def elaborate(self, platform):
        m = Module()
        R, C = self.cfg.rows, self.cfg.cols
        acc_bits = self.cfg.acc_bits
        m.submodules.array = arr = self._array_cls(self.cfg, deskew=True)
        cmd = Signal(word_layout())
        with m.If(self.start):
            m.d.sync += [cmd.eq(self.cmd), self.busy.eq(1)]
        active = self.busy
        row_folds = Signal(12)
        col_folds = Signal(12)
        m.d.comb += [row_folds.eq((cmd.k + R - 1) // R), col_folds.eq((cmd.n + C - 1) // C)]

        # --- weight port: fold cursor, the row it writes
        port = _FoldCursor(m, cmd, R, C, row_folds, col_folds, "port")
        l_row = Signal(range(R + 1), init=R)        # R: idle
        row0_loaded = Signal(16)
        # --- feeder: fold cursor, step
        feed = _FoldCursor(m, cmd, R, C, row_folds, col_folds, "feed")
        streaming, step = Signal(), Signal(16)
        feed_fold = Signal(16)
        # firsts presented, and how many have reached PE (0, C-1)
        first_now = Signal()
        hist = [Signal(name=f"first_hist{i}") for i in range(C - 1)]
        reached_reg = Signal(16)
        reached = reached_reg + (hist[-1] if hist else first_now)
        m.d.sync += reached_reg.eq(reached)
        if hist:
            m.d.sync += hist[0].eq(first_now)
            for a, b in zip(hist, hist[1:]):
                m.d.sync += b.eq(a)
        with m.If(self.start):
            m.d.sync += port.reset() + feed.reset() + [
                l_row.eq(R), row0_loaded.eq(0), streaming.eq(0), step.eq(0), feed_fold.eq(0),
                reached_reg.eq(0)]
            m.d.sync += [h.eq(0) for h in hist]

        # feeder decision for this (read) cycle
        begin_feed = active & ~streaming & ~feed.done & (row0_loaded > feed_fold)
        feeding = begin_feed | (active & streaming)
        cur_step = Mux(begin_feed, 0, step)
        m.d.comb += first_now.eq(feeding & (cur_step == 0))
        with m.If(feeding):
            last_step = cur_step + 1 == cmd.m
            m.d.sync += [streaming.eq(~last_step), step.eq(Mux(last_step, 0, cur_step + 1))]
            with m.If(last_step):
                m.d.sync += feed_fold.eq(feed_fold + 1)
                feed.advance(m)
        ifmap_row = self.rows[0].bit_length() - 1
        m.d.comb += [self.rd.en.eq(feeding), self.rd.spad.eq(0), self.rd.half.eq(cmd.a_half),
                     self.rd.row.eq((cur_step * cmd.k + feed.r0) >> ifmap_row)]

        # weight port decision
        port_idle = l_row == R
        begin_port = (active & port_idle & ~port.done
                      & ((row0_loaded == 0) | (reached >= row0_loaded)))
        writing = begin_port | (active & ~port_idle)
        cur_row = Mux(begin_port, 0, l_row)
        with m.If(writing):
            with m.If(cur_row == 0):
                m.d.sync += row0_loaded.eq(row0_loaded + 1)
            with m.If(cur_row + 1 == R):
                m.d.sync += l_row.eq(R)
                port.advance(m)
            with m.Else():
                m.d.sync += l_row.eq(cur_row + 1)
        filter_row = self.rows[1].bit_length() - 1
        m.d.comb += [self.rd_b.en.eq(writing & (cur_row < port.ru)), self.rd_b.spad.eq(1),
                     self.rd_b.half.eq(cmd.b_half),
                     self.rd_b.row.eq(((port.r0 + cur_row) * cmd.n + port.c0) >> filter_row)]

        # --- presentation: the control bits registered with the read, meeting its data
        p_x, p_w = Signal(), Signal()
        p_first, p_ru = Signal(), Signal(range(R + 1))
        p_wrow, p_wru, p_wcu = Signal(range(R + 1)), Signal(range(R + 1)), Signal(range(C + 1))
        m.d.sync += [p_x.eq(feeding), p_first.eq(first_now), p_ru.eq(feed.ru),
                     p_w.eq(writing), p_wrow.eq(cur_row), p_wru.eq(port.ru), p_wcu.eq(port.cu)]
        for i in range(R):
            m.d.comb += [arr.x_in[i].value.eq(self.rdata.word_select(i, 8).as_signed()),
                         arr.x_in[i].valid.eq(p_x & (i < p_ru)),
                         arr.x_in[i].first.eq(p_x & p_first)]
        m.d.comb += [arr.w_en.eq(p_w), arr.w_row.eq(p_wrow[:max(1, (R - 1).bit_length())])]
        for j in range(C):
            m.d.comb += [arr.w_in[j].value.eq(self.b_data.word_select(j, 8).as_signed()),
                         arr.w_in[j].valid.eq(p_w & (p_wrow < p_wru) & (j < p_wcu))]

        # --- outputs: the row's place rides a delay line of R + C - 1 cycles from the read
        out_row = self.rows[2].bit_length() - 1
        place = Signal(_ROW_BITS)
        m.d.comb += place.eq(((cur_step * cmd.n + feed.c0) << 2) >> out_row)
        accumulate = (feed.rf > 0) | cmd.acc
        is_last = feeding & (cur_step + 1 == cmd.m) & feed.last
        stages = [(feeding, place, accumulate, feed.cu, is_last)]
        for s in range(1 + R + C - 1):
            v, pl, ac, cu, fin = (Signal(name=f"o{s}_v"), Signal(_ROW_BITS, name=f"o{s}_row"),
                                  Signal(name=f"o{s}_acc"), Signal(range(C + 1), name=f"o{s}_cu"),
                                  Signal(name=f"o{s}_last"))
            pv, ppl, pac, pcu, pfin = stages[-1]
            m.d.sync += [v.eq(pv), pl.eq(ppl), ac.eq(pac), cu.eq(pcu), fin.eq(pfin)]
            stages.append((v, pl, ac, cu, fin))
        rv, rpl, rac, _, _ = stages[-2]           # one cycle before the write: read old sums
        m.d.comb += [self.rd_c.en.eq(rv & rac), self.rd_c.spad.eq(2),
                     self.rd_c.half.eq(cmd.c_half), self.rd_c.row.eq(rpl)]
        wv, wpl, wac, wcu, wfin = stages[-1]
        words = []
        for j in range(C):
            old = self.c_data.word_select(j, 32).as_signed()
            new = arr.out[j].value
            total = Mux(wac, old + new, new)
            words.append(total[:acc_bits])
        m.d.comb += [self.wr.en.eq(wv), self.wr.spad.eq(2), self.wr.half.eq(cmd.c_half),
                     self.wr.row.eq(wpl), self.wr.data.eq(Cat(*words)),
                     self.wr.mask.eq(_mask(wcu << 2, 0, self.row))]
        with m.If(wv & wfin):
            m.d.comb += self.last.eq(1)
            m.d.sync += self.busy.eq(0)
        return m
