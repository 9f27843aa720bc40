"""The cocotb testbench of the core's Verilog (run by :func:`hw.core.cocotb_run.run`).

It does what :func:`hw.core.cosim.run` does in Amaranth's simulator, through the generated
Verilog's ports: an ideal memory (a numpy byte array) answers the load DMA's requests in the
cycle they are made and takes the store DMA's writes; the CSRs start the program, report
``STATUS.done`` and give back every command's start and end cycle. Inputs are driven on the
falling edge, after the design has settled, and sampled by the rising edge.

Files, in the folder ``NPULAB_COCOTB_DIR`` names: ``memory.npy`` (uint8, DRAM before the run)
and ``meta.json`` (``queues``: commands per engine; ``words``: each command's CMD_DATA values,
per engine; ``max_cycles``) in; ``result.npz``
(``memory``, ``start[engine][k]``, ``end``, ``cycles``, ``status``) out. A team that uses
cocotb can copy this module next to the Verilog and drive the core the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

# CSR addresses (hw.core.rtl.core.CSR) and the port layouts (LSB first)
CONTROL, STATUS, CYCLES, TRACE_SEL, TRACE_START, TRACE_END = 0x00, 0x01, 0x02, 0x08, 0x09, 0x0A
QLEN, CMD_SEL, CMD_DATA, CMD_COMMIT = 0x0C, 0x10, 0x11, 0x12


def _csr(addr: int, we: int = 0, wdata: int = 0) -> int:
    return addr | (we << 8) | (wdata << 9)


@cocotb.test()
async def run_program(dut):
    folder = Path(os.environ["NPULAB_COCOTB_DIR"])
    mem = np.load(folder / "memory.npy")
    meta = json.loads((folder / "meta.json").read_text())
    row_bits = len(dut.mem_rd_data)
    cocotb.start_soon(Clock(dut.clk, 10, units="ns").start())
    dut.rst.value = 1
    dut.csr.value = 0
    dut.mem_rd__ready.value = 1
    dut.mem_wr__ready.value = 1
    dut.mem_rd_data.value = 0
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    for engine, words in enumerate(meta["words"]):    # load the program through the CSRs
        for k, slices in enumerate(words):
            for addr, value in [(CMD_SEL, (engine << 16) | k)] + [(CMD_DATA, v) for v in slices] \
                    + [(CMD_COMMIT, 1)]:
                dut.csr.value = _csr(addr, 1, value)
                await FallingEdge(dut.clk)
        dut.csr.value = _csr(QLEN + engine, 1, len(words))
        await FallingEdge(dut.clk)
    dut.csr.value = _csr(CONTROL, 1, 1)
    await FallingEdge(dut.clk)
    dut.csr.value = _csr(STATUS)
    for _ in range(meta["max_cycles"]):
        if int(dut.csr_rdata.value) & 2:
            break
        if int(dut.mem_rd__valid.value):
            payload = int(dut.mem_rd__payload.value)
            addr, nbytes = payload & 0xFFFFFFFF, payload >> 32
            dut.mem_rd_data.value = int.from_bytes(mem[addr:addr + nbytes].tobytes(), "little")
        if int(dut.mem_wr__valid.value):
            payload = int(dut.mem_wr__payload.value)
            addr, nbytes = payload & 0xFFFFFFFF, (payload >> 32) & 0x1FFFF
            data = (payload >> 49) & ((1 << (8 * nbytes)) - 1)
            mem[addr:addr + nbytes] = np.frombuffer(data.to_bytes(nbytes, "little"), np.uint8)
        await FallingEdge(dut.clk)
    else:
        raise AssertionError(f"the core did not finish within {meta['max_cycles']} cycles")
    status = int(dut.csr_rdata.value)
    dut.csr.value = _csr(CYCLES)
    await FallingEdge(dut.clk)
    cycles = int(dut.csr_rdata.value)
    start, end = [], []
    for engine, count in enumerate(meta["queues"]):
        s, e = [], []
        for k in range(count):
            dut.csr.value = _csr(TRACE_SEL, 1, (engine << 16) | k)
            await FallingEdge(dut.clk)
            dut.csr.value = _csr(TRACE_START)
            await FallingEdge(dut.clk)
            s.append(int(dut.csr_rdata.value))
            dut.csr.value = _csr(TRACE_END)
            await FallingEdge(dut.clk)
            e.append(int(dut.csr_rdata.value))
        start.append(s)
        end.append(e)
    np.savez(folder / "result.npz", memory=mem, cycles=cycles, status=status,
             start=np.array([v for s in start for v in s], np.int64),
             end=np.array([v for e in end for v in e], np.int64), row_bits=row_bits)
