"""Run a lowered program on the RTL core in Amaranth's simulator, against the executor and the
functional models.

:func:`run` drives the core as a host would: it fills an ideal memory (a numpy byte array
answering the DMA's requests in the cycle they are made), starts the program through the CSRs,
waits for ``STATUS.done`` and reads every command's start and end cycle back from the trace
CSRs. :func:`verify` compiles nothing itself: given a graph, its program, the chip and the
input values, it lowers the program, lays out DRAM (:func:`dram_image`), runs the core, and
compares (1) every op's output tensor in DRAM with :func:`reference` (the functional models
of :mod:`hw.vector.functional`, op by op) bit for bit, and (2) every command's start and end
with :func:`hw.executor.execute` given the core's durations (:mod:`hw.core.timing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compiler.ir import Activation, Binary, Graph, Pool
from hw.chip import ChipConfig
from hw.core.lower import CoreProgram, lower
from hw.core.timing import durations
from hw.program import Engine, Program
from hw.vector import functional as F

__all__ = ["CoreRun", "Verification", "run", "verify", "dram_image", "reference", "tensor_of"]

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
        max_cycles: int = 200_000, vcd_path=None) -> CoreRun:
    """Run ``core``'s program with ``memory`` (uint8) as DRAM; a copy is returned changed."""
    from amaranth.sim import Simulator

    from hw.core.rtl.core import CSR, Core

    mem = np.array(memory, dtype=np.uint8, copy=True)
    dut = Core(core, mutation=mutation)
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


def _nbytes(program: Program) -> int:
    cols = program.columns
    ends = cols["addr"] + (cols["n2"] - 1) * cols["stride2"] + (cols["n1"] - 1) * cols["stride1"] \
        + cols["chunk_bytes"]
    return int(ends.max()) if len(program) else 0


def dram_image(program: Program, graph: Graph, values: dict[str, np.ndarray]) -> np.ndarray:
    """DRAM before the run: each tensor of ``values`` (int8 arrays by tensor name: ``<input>``
    for the graph's input, op names for second operands) at its address in ``program``."""
    mem = np.zeros(_nbytes(program), np.uint8)
    for name, value in values.items():
        if name not in program.tensors:
            raise ValueError(f"dram_image: {name!r}: not a tensor of program "
                             f"{program.model!r} ({', '.join(sorted(program.tensors))})")
        raw = np.ascontiguousarray(value, dtype=np.int8).view(np.uint8).ravel()
        addr = program.tensors[name]
        mem[addr:addr + raw.size] = raw
    return mem


def tensor_of(memory: np.ndarray, program: Program, name: str, shape) -> np.ndarray:
    """Tensor ``name`` (int8, ``shape``) read from ``memory`` at its address."""
    addr = program.tensors[name]
    size = int(np.prod(shape))
    return memory[addr:addr + size].view(np.int8).reshape(shape).copy()


def _shape(op) -> tuple:
    if isinstance(op, Pool):
        return (op.batch, op.out_h, op.out_w, op.channels)
    return (op.elements,)


def _in_shape(op) -> tuple:
    if isinstance(op, Pool):
        return (op.batch, op.in_h, op.in_w, op.channels)
    return (op.elements,)


def reference(graph: Graph, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every op's output by the functional models (int8, saturated with ``to_dtype``)."""
    out = dict(values)
    for op in graph.ops:
        src = out[op.inputs[0] if op.inputs else "<input>"].reshape(_in_shape(op))
        if isinstance(op, Pool):
            kind = "max" if op.kind == "max" else "avg"
            y = F.pool2d(src, kind, (op.kernel_h, op.kernel_w), (op.stride_h, op.stride_w),
                         (op.pad_top, op.pad_left, op.pad_bottom, op.pad_right))
        elif isinstance(op, Activation) and op.fn == "relu":
            y = F.relu(src)
        elif isinstance(op, Binary) and op.fn == "add":
            y = F.binary("add", src, out[op.inputs[1]].reshape(src.shape))
        else:
            raise ValueError(f"reference: op {op.name!r} ({type(op).__name__}): no functional "
                             f"reference for it in the core's co-simulation")
        out[op.name] = F.to_dtype(y, "int8").astype(np.int8).reshape(_shape(op))
    return out


@dataclass
class Verification:
    """:func:`verify`'s outcome: the run, the executor's starts and ends, and the mismatches
    found (empty: bit-exact outputs and equal cycles)."""

    core: CoreProgram
    run: CoreRun
    expected_start: np.ndarray
    expected_end: np.ndarray
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def verify(program: Program, graph: Graph, chip: ChipConfig, values: dict[str, np.ndarray], *,
           mutation: str | None = None, max_cycles: int = 200_000) -> Verification:
    """Lower, run on the core, compare outputs and cycles (module docstring)."""
    from hw.executor import execute

    core = lower(program, graph, chip)
    result = execute(core.program, chip, durations=durations(core))
    want = reference(graph, values)
    got = run(core, dram_image(core.program, graph, values), mutation=mutation,
              max_cycles=max_cycles)
    found = []
    for op in graph.ops:
        value = tensor_of(got.memory, core.program, op.name, want[op.name].shape)
        if not np.array_equal(value, want[op.name]):
            k = int(np.flatnonzero(value.ravel() != want[op.name].ravel())[0])
            found.append(f"{op.name}: element {k} is {int(value.ravel()[k])}, the functional "
                         f"model gives {int(want[op.name].ravel()[k])}")
    t_start, t_end = result.trace.start, result.trace.finish
    for i in np.flatnonzero((got.start != t_start) | (got.end != t_end))[:5]:
        found.append(f"command {i}: the core ran it in cycles [{got.start[i]}, {got.end[i]}), "
                     f"the executor predicts [{t_start[i]}, {t_end[i]})")
    if got.conflict:
        found.append("two engines used one scratchpad port in the same cycle")
    return Verification(core, got, np.asarray(t_start), np.asarray(t_end), found)
