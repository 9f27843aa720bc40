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
    (indexed like the program), the cycles the run took, the conflict flag and (AXI port) the
    error flag."""

    memory: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cycles: int
    conflict: bool
    axi_error: bool = False


def run(core: CoreProgram, memory: np.ndarray, *, mutation: str | None = None,
        max_cycles: int = 200_000, vcd_path=None, load: str = "init", port: str = "stream",
        stall: float = 0.0, latency: int = 2, data_bytes: int = 8, seed: int = 0) -> CoreRun:
    """Run ``core``'s program with ``memory`` (uint8) as DRAM; a copy is returned changed.
    ``load``: ``"init"`` (the queues are the memories' initial contents) or ``"csr"`` (the
    testbench writes them through the CSRs first, as a host would). ``port``: ``"stream"``
    (the core's own memory streams, answered in the cycle they are accepted; with ``stall``
    > 0 each ``ready`` is held low with that chance per cycle, drawn from ``seed``) or
    ``"axi"`` (:class:`~hw.core.rtl.axi.AxiCore` with ``data_bytes`` per beat, answered by
    :class:`~hw.core.axi_sim.AxiMemory` with ``latency`` and ``stall``, which checks the
    protocol)."""
    from amaranth.sim import Simulator

    from hw.core.rtl.core import CSR, Core, command_writes

    if port not in ("stream", "axi"):
        raise ValueError(f"cosim.run: port = {port!r}: allowed are 'stream' and 'axi'")
    if not 0.0 <= stall < 1.0:
        raise ValueError(f"cosim.run: stall = {stall!r}: allowed is 0 <= stall < 1")
    mem = np.array(memory, dtype=np.uint8, copy=True)
    if port == "axi":
        from hw.core.axi_sim import AxiMemory
        from hw.core.rtl.axi import AxiCore

        dut = AxiCore(core, mutation=mutation, preload=load == "init", data_bytes=data_bytes)
        slave = AxiMemory(dut.axi, mem, data_bytes, latency=latency, stall=stall, seed=seed)
    else:
        dut = Core(core, mutation=mutation, preload=load == "init")
    rng = np.random.default_rng(seed)
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
            if port == "axi":
                slave.step(ctx)
                await ctx.tick()
                continue
            rd_ready = stall == 0.0 or rng.random() >= stall
            wr_ready = stall == 0.0 or rng.random() >= stall
            ctx.set(dut.mem_rd.ready, rd_ready)
            ctx.set(dut.mem_wr.ready, wr_ready)
            if rd_ready and ctx.get(dut.mem_rd.valid):
                addr, nbytes = ctx.get(dut.mem_rd.payload.addr), ctx.get(dut.mem_rd.payload.bytes)
                ctx.set(dut.mem_rd_data, int.from_bytes(mem[addr:addr + nbytes].tobytes(),
                                                        "little"))
            if wr_ready and ctx.get(dut.mem_wr.valid):
                addr = ctx.get(dut.mem_wr.payload.addr)
                nbytes = ctx.get(dut.mem_wr.payload.bytes)
                value = ctx.get(dut.mem_wr.payload.data) & ((1 << (8 * nbytes)) - 1)
                mem[addr:addr + nbytes] = np.frombuffer(value.to_bytes(nbytes, "little"),
                                                        np.uint8)
            await ctx.tick()
        else:
            raise RuntimeError(f"the core did not finish within {max_cycles} cycles")
        out["cycles"] = csr_read(ctx, CSR["CYCLES"])
        if port == "axi":
            slave.check_idle()
        status = csr_read(ctx, CSR["STATUS"])
        out["conflict"], out["axi_error"] = bool(status & 4), bool(status & 8)
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
    return CoreRun(mem, start, end, int(out["cycles"]), out["conflict"], out["axi_error"])
