"""Run a lowered program on the RTL core in Amaranth's simulator.

:func:`run` drives the core as a host would: it fills an ideal memory (a numpy byte array
answering the DMA's requests in the cycle they are made), optionally loads the program through
the CSRs, starts it, waits for ``STATUS.done`` and reads every command's start and end cycle
back from the trace CSRs. :mod:`npulab.core_verify` checks a run against the executor and the
models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw.core.isa import CoreProgram
from hw.program import Engine

__all__ = ["CoreRun", "run"]

CLOCK_PERIOD = 1e-8


@dataclass(frozen=True)
class CoreRun:
    """What the core did: the memory after the run, each command's start and end cycle
    (indexed like the program), the cycles the run took and the conflict flag."""

    memory: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cycles: int
    conflict: bool


def run(core: CoreProgram, memory: np.ndarray, *, mutation: str | None = None,
        max_cycles: int = 200_000, vcd_path=None, load: str = "init") -> CoreRun:
    """Run ``core``'s program with ``memory`` (uint8) as DRAM; a copy is returned changed.
    ``load``: ``"init"`` (the queues are the memories' initial contents) or ``"csr"`` (the
    testbench writes them through the CSRs first, as a host would)."""
    from amaranth.sim import Simulator

    from hw.core.rtl.core import CSR, Core, command_writes

    mem = np.array(memory, dtype=np.uint8, copy=True)
    dut = Core(core, mutation=mutation, preload=load == "init")
    n = len(core.program)
    start = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)
    out = {}

    async def csr_write(ctx, addr, value):
        ctx.set(dut.csr.addr, addr)
        ctx.set(dut.csr.wdata, value)
        ctx.set(dut.csr.we, 1)
        await ctx.tick()
        ctx.set(dut.csr.we, 0)

    def csr_read(ctx, addr):
        ctx.set(dut.csr.addr, addr)
        return ctx.get(dut.csr_rdata)

    async def bench(ctx):
        if load == "csr":
            for e, queue in enumerate(core.queues):
                for k, word in enumerate(queue):
                    await csr_write(ctx, CSR["CMD_SEL"], (e << 16) | k)
                    for value in command_writes(word):
                        await csr_write(ctx, CSR["CMD_DATA"], value)
                    await csr_write(ctx, CSR["CMD_COMMIT"], 1)
                await csr_write(ctx, CSR["QLEN"] + e, len(queue))
        await csr_write(ctx, CSR["CONTROL"], 1)
        ctx.set(dut.csr.addr, CSR["STATUS"])
        for t in range(max_cycles):
            if ctx.get(dut.csr_rdata) & 2:
                break
            ctx.set(dut.mem_rd.ready, 1)
            ctx.set(dut.mem_wr.ready, 1)
            if ctx.get(dut.mem_rd.valid):
                addr, nbytes = ctx.get(dut.mem_rd.payload.addr), ctx.get(dut.mem_rd.payload.bytes)
                ctx.set(dut.mem_rd_data, int.from_bytes(mem[addr:addr + nbytes].tobytes(),
                                                        "little"))
            if ctx.get(dut.mem_wr.valid):
                addr = ctx.get(dut.mem_wr.payload.addr)
                nbytes = ctx.get(dut.mem_wr.payload.bytes)
                value = ctx.get(dut.mem_wr.payload.data) & ((1 << (8 * nbytes)) - 1)
                mem[addr:addr + nbytes] = np.frombuffer(value.to_bytes(nbytes, "little"),
                                                        np.uint8)
            await ctx.tick()
        else:
            raise RuntimeError(f"the core did not finish within {max_cycles} cycles")
        out["cycles"] = csr_read(ctx, CSR["CYCLES"])
        out["conflict"] = bool(csr_read(ctx, CSR["STATUS"]) & 4)
        for e in range(len(Engine)):
            for k, i in enumerate(core.index[e]):
                await csr_write(ctx, CSR["TRACE_SEL"], (e << 16) | k)
                start[i] = csr_read(ctx, CSR["TRACE_START"])
                end[i] = csr_read(ctx, CSR["TRACE_END"])

    sim = Simulator(dut)
    sim.add_clock(CLOCK_PERIOD)
    sim.add_testbench(bench)
    if vcd_path is None:
        sim.run()
    else:
        with sim.write_vcd(str(vcd_path)):
            sim.run()
    return CoreRun(mem, start, end, int(out["cycles"]), out["conflict"])
