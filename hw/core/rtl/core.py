"""The core's top level in Amaranth 0.5: sequencer, scratchpads, engines, CSRs.

Block diagram (in words)
------------------------
Four command queues (one memory per engine, the words of :mod:`hw.core.isa`) feed four
engines: the load DMA, the array, the store DMA and the vector engine (:mod:`.engines`). An engine takes the word at its queue's head when it is
idle and, for every engine e, ``done[e] >= wait_e``: the word's dependencies are counts of
commands done per engine, compared in the cycle the engine is free, so a command starts in the
very cycle its engine and its last dependency finish, as the executor (:mod:`hw.executor`)
schedules it. Each finished command writes its start and end cycle into its engine's trace
memory.

The three scratchpads are each two halves (ping and pong), one memory per half with one read
port (synchronous) and one write port with byte enables, ``row`` bytes wide. Engines reach
them through per-half multiplexers; two engines on one port of one half in the same cycle set
the sticky ``conflict`` flag (the lowering's dependencies make it impossible; the formal check
and every co-simulation hold it low).

External ports: the load DMA's read stream (``mem_rd``, ``mem_rd_data``) and the store DMA's
write stream (``mem_wr``), see :mod:`.engines`; and the CSR bus (``csr``): a register
address, a write strobe and data, and the read data of the addressed register in the same
cycle. Registers (32 bits, :data:`CSR`):

====  ===========  =====================================================================
0x00  CONTROL      write 1: start the program (clears the counters, queue pointers and flags)
0x01  STATUS       bit 0 running, bit 1 done, bit 2 conflict
0x02  CYCLES       cycles since the start; when done, the cycle the last command ended
0x04  DONE0..3     commands each engine has finished (0x04 + engine)
0x08  TRACE_SEL    write ``engine << 16 | command``: selects a trace entry
0x09  TRACE_START  the selected command's start cycle
0x0A  TRACE_END    its end cycle (the cycle its engine was free again)
0x0C  QLEN0..3     commands in each engine's queue (0x0C + engine; read/write)
0x10  CMD_SEL      write ``engine << 16 | index``: the queue entry CMD_COMMIT writes
0x11  CMD_DATA     write: the next 32 bits of a command word, lowest first (a shift register)
0x12  CMD_COMMIT   write: store the word shifted in into the selected entry
====  ===========  =====================================================================

A program is loaded through CMD_SEL, CMD_DATA and CMD_COMMIT (``ceil(W / 32)`` data writes
per word of W bits, :func:`command_writes`) and QLEN, or built into the queue memories'
initial contents when the core is generated for one program.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.core.isa import CoreProgram
from hw.core.rtl.engines import (
    ArrayEngine, LoadDma, StoreDma, VectorEngine, mem_read_signature, mem_write_signature,
    word_layout,
)
from hw.program import Engine

__all__ = ["Core", "CSR", "SEQUENCER_MUTATIONS", "csr_layout", "command_writes"]

#: CSR addresses.
CSR = {"CONTROL": 0x00, "STATUS": 0x01, "CYCLES": 0x02, "DONE": 0x04, "TRACE_SEL": 0x08,
       "TRACE_START": 0x09, "TRACE_END": 0x0A, "QLEN": 0x0C, "CMD_SEL": 0x10, "CMD_DATA": 0x11,
       "CMD_COMMIT": 0x12}
_ENGINES = len(Engine)


def csr_layout() -> data.StructLayout:
    return data.StructLayout({"addr": 8, "we": 1, "wdata": 32})


class Core(wiring.Component):
    """One core. ``program``: a lowered program; with ``preload`` its queues are the command
    memories' initial contents (else they start empty, to be loaded through the CSRs).
    ``depth``: entries per queue (default: the program's longest queue). ``mutation``: a
    broken vector lane (:data:`hw.vector.rtl.lane.MUTATIONS`) or sequencer
    (:data:`SEQUENCER_MUTATIONS`)."""

    def __init__(self, program: CoreProgram, mutation: str | None = None, *,
                 preload: bool = True, depth: int | None = None, formal: int = 0):
        self.program = program
        self.formal = formal      # > 0: abstract engines finishing within that many cycles
        self.geo = geo = program.geometry
        self.mutation = mutation
        self.preload = preload
        self.row = max(geo.row_bytes)
        need = max(1, *(len(q) for q in program.queues))
        if depth is not None and depth < need:
            raise ValueError(f"Core: depth = {depth}: the program needs {need} entries per queue")
        self.depths = [depth or need] * len(program.queues)
        super().__init__({
            "csr": In(csr_layout()), "csr_rdata": Out(32),
            "mem_rd": Out(mem_read_signature(self.row)), "mem_rd_data": In(8 * self.row),
            "mem_wr": Out(mem_write_signature(self.row)),
        })

    def elaborate(self, platform):
        m = Module()
        geo = self.geo
        lane_mutation = None if self.mutation in SEQUENCER_MUTATIONS else self.mutation
        if self.formal:
            from hw.core.rtl.abstract import AbstractEngine
            made = [AbstractEngine(self.row, self.formal, kind) for kind in
                    ("load", "store", "vector", "array")]
        else:
            made = [LoadDma(geo.row_bytes, geo.setup), StoreDma(geo.row_bytes, geo.setup),
                    VectorEngine(geo.row_bytes, geo.lanes, lane_mutation),
                    ArrayEngine(geo.array, geo.row_bytes)]
        load, store, vector, array = made
        m.submodules.load, m.submodules.store = load, store
        m.submodules.vector, m.submodules.array = vector, array
        engines = {Engine.LOAD: load, Engine.ARRAY: array, Engine.STORE: store,
                   Engine.VECTOR: vector}
        wiring.connect(m, wiring.flipped(self.mem_rd), load.mem_rd)
        wiring.connect(m, wiring.flipped(self.mem_wr), store.mem_wr)
        m.d.comb += load.mem_rd_data.eq(self.mem_rd_data)

        # --- control state
        run, done_flag, conflict = Signal(), Signal(), Signal()
        cycle = Signal(32)
        done = [Signal(16, name=f"done{e}") for e in range(_ENGINES)]
        pc = [Signal(16, name=f"pc{e}") for e in range(_ENGINES)]
        qlen = [Signal(16, name=f"qlen{e}",
                       init=len(self.program.queues[e]) if self.preload else 0)
                for e in range(_ENGINES)]
        width = word_layout().size
        staging = Signal(32 * -(-width // 32))
        cmd_e, cmd_i = Signal(2), Signal(16)
        csr = self.csr
        with m.If(csr.we & (csr.addr == CSR["CMD_DATA"])):
            m.d.sync += staging.eq(Cat(staging[32:], csr.wdata))
        with m.If(csr.we & (csr.addr == CSR["CMD_SEL"])):
            m.d.sync += [cmd_e.eq(csr.wdata[16:18]), cmd_i.eq(csr.wdata[:16])]
        commit = csr.we & (csr.addr == CSR["CMD_COMMIT"])
        started = [Signal(32, name=f"started{e}") for e in range(_ENGINES)]
        begin = Signal()
        m.d.comb += begin.eq(csr.we & (csr.addr == CSR["CONTROL"]) & csr.wdata[0])
        finished = Signal()         # every queue empty and every engine idle
        with m.If(run & ~finished):
            m.d.sync += cycle.eq(cycle + 1)

        # --- queues, dependency check, start
        traces = []
        idle_all = []
        for e in range(_ENGINES):
            words = self.program.queues[e]
            qmem = Memory(shape=word_layout(), depth=self.depths[e],
                          init=[_word_init(w) for w in words] if self.preload else [])
            m.submodules[f"queue{e}"] = qmem
            if not self.formal:     # the formal model runs the preloaded program only
                wq = qmem.write_port()
                m.d.comb += [wq.en.eq(commit & (cmd_e == e)), wq.addr.eq(cmd_i),
                             wq.data.eq(staging[:width])]
            port = qmem.read_port(domain="comb")
            m.d.comb += port.addr.eq(pc[e])
            word = port.data
            if not self.formal:
                tmem = Memory(shape=unsigned(64), depth=self.depths[e], init=[])
                m.submodules[f"trace{e}"] = tmem
                traces.append(tmem)
                tw = tmem.write_port()
            eng = engines.get(Engine(e))
            waits = [word[f"wait{j}"] for j in range(_ENGINES)]
            if self.formal:     # property: a command starts only once its dependencies are done
                from hw.core.rtl.abstract import dependencies_done
                dependencies_done(m, eng.start, done, list(waits))
            if self.mutation == "start-early" and e == Engine.STORE:
                waits[Engine.VECTOR] = waits[Engine.VECTOR] - 1
            ready = run & (pc[e] < qlen[e])
            for j in range(_ENGINES):
                ready = ready & (done[j] >= waits[j])
            go = ready & ~eng.busy
            m.d.comb += [eng.start.eq(go), eng.cmd.eq(word)]
            with m.If(go):
                m.d.sync += [pc[e].eq(pc[e] + 1), started[e].eq(cycle)]
            with m.If(run & eng.last):
                m.d.sync += done[e].eq(done[e] + 1)
                if not self.formal:
                    m.d.comb += [tw.en.eq(1), tw.addr.eq(done[e]),
                                 tw.data.eq(started[e] | ((cycle + 1) << 32))]
            idle_all.append((pc[e] >= qlen[e]) & ~eng.busy)
        all_idle = run
        for idle in idle_all:
            all_idle = all_idle & idle
        m.d.comb += finished.eq(all_idle)
        with m.If(finished):
            m.d.sync += [run.eq(0), done_flag.eq(1)]
        if self.formal:
            from hw.core.rtl.abstract import environment
            environment(m, self, engines, run, done_flag, CSR["CONTROL"])

        # --- scratchpads: two halves each, one read and one write port per half
        reads = [(store.rd, store.rdata), (vector.rd, vector.rdata), (vector.rd_b, vector.b_data),
                 (array.rd, array.rdata), (array.rd_b, array.b_data), (array.rd_c, array.c_data)]
        writes = [load.wr, vector.wr, array.wr]
        for s, row in enumerate(() if self.formal else geo.row_bytes):
            halves = []
            for h in range(2):
                mem = Memory(shape=unsigned(8 * row), depth=geo.half_rows[s], init=[])
                m.submodules[f"spad{s}_{h}"] = mem
                rp = mem.read_port()
                wp = mem.write_port(granularity=8)
                halves.append(rp)
                n_rd = 0
                for req, _ in reads:
                    hit = req.en & (req.spad == s) & (req.half == h)
                    with m.If(hit):
                        m.d.comb += rp.addr.eq(req.row)
                    n_rd = n_rd + hit
                n_wr = 0
                for req in writes:
                    hit = req.en & (req.spad == s) & (req.half == h)
                    with m.If(hit):
                        m.d.comb += [wp.addr.eq(req.row), wp.data.eq(req.data[:8 * row]),
                                     wp.en.eq(req.mask[:row])]
                    n_wr = n_wr + hit
                with m.If((n_rd > 1) | (n_wr > 1)):
                    m.d.sync += conflict.eq(1)
            # each reader gets the half it asked for in the previous cycle
            for k, (req, rdata) in enumerate(reads):
                was, was_half = Signal(name=f"rd{k}_was_s{s}"), Signal(name=f"rd{k}_half_s{s}")
                m.d.sync += [was.eq(req.en & (req.spad == s)), was_half.eq(req.half)]
                with m.If(was):
                    m.d.comb += rdata.eq(Mux(was_half, halves[1].data, halves[0].data))

        # --- CSRs
        sel_e, sel_i = Signal(2), Signal(16)
        trace_rd = []
        for e in range(_ENGINES if not self.formal else 0):
            p = traces[e].read_port(domain="comb")
            m.d.comb += p.addr.eq(sel_i)
            trace_rd.append(p.data)
        with m.If(csr.we):
            with m.If(csr.addr == CSR["TRACE_SEL"]):
                m.d.sync += [sel_e.eq(csr.wdata[16:18]), sel_i.eq(csr.wdata[:16])]
            for e in range(_ENGINES):
                with m.If(csr.addr == CSR["QLEN"] + e):
                    m.d.sync += qlen[e].eq(csr.wdata[:16])
        with m.If(begin):
            m.d.sync += [run.eq(1), done_flag.eq(0), conflict.eq(0), cycle.eq(0)]
            m.d.sync += [d.eq(0) for d in done] + [p.eq(0) for p in pc]
        rd = self.csr_rdata
        with m.Switch(csr.addr):
            with m.Case(CSR["STATUS"]):
                m.d.comb += rd.eq(run | (done_flag << 1) | (conflict << 2))
            with m.Case(CSR["CYCLES"]):
                m.d.comb += rd.eq(cycle)
            for e in range(_ENGINES):
                with m.Case(CSR["DONE"] + e):
                    m.d.comb += rd.eq(done[e])
                with m.Case(CSR["QLEN"] + e):
                    m.d.comb += rd.eq(qlen[e])
            if not self.formal:
                with m.Case(CSR["TRACE_START"]):
                    for e in range(_ENGINES):
                        with m.If(sel_e == e):
                            m.d.comb += rd.eq(trace_rd[e][:32])
                with m.Case(CSR["TRACE_END"]):
                    for e in range(_ENGINES):
                        with m.If(sel_e == e):
                            m.d.comb += rd.eq(trace_rd[e][32:])
        return m


def _word_init(word: dict) -> dict:
    return dict(word)


def command_writes(word: dict) -> list[int]:
    """The CMD_DATA values that load ``word`` (lowest 32 bits first)."""
    from amaranth.hdl import Const

    layout = word_layout()
    value = Const.cast(layout.const(word)).value
    return [(value >> (32 * k)) & 0xFFFFFFFF for k in range(-(-layout.size // 32))]


#: Deliberately broken sequencers the co-simulation must catch: ``name: what is wrong``.
SEQUENCER_MUTATIONS = {
    "start-early": "the store engine waits for one vector command fewer than its word says",
}
