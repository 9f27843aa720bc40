"""A compiled program run on the RTL core, checked against the executor and the models.

:func:`verify` lowers a program (:func:`compiler.backends.core.lower`), lays out DRAM with the
given values (:func:`dram_image`), runs the core (:mod:`hw.core.cosim` in Amaranth's simulator,
or :mod:`hw.core.cocotb_run` in Verilator), and compares (1) every stored tensor with
:func:`reference` (matrix ops on the register-level model, everything else by
:mod:`hw.vector.functional`) bit for bit, and (2) every command's start and end cycle with
:func:`hw.executor.execute` given the core's durations (:mod:`hw.core.timing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compiler.backends.core import lower
from compiler.ir import Activation, Binary, Cast, Conv2d, Gemm, Graph, Pool
from hw.chip import ChipConfig
from hw.core.cosim import CoreRun, run
from hw.core.isa import CoreProgram
from hw.core.timing import durations
from hw.program import Engine, Program
from hw.vector import functional as F

__all__ = ["Verification", "verify", "dram_image", "reference", "tensor_of", "im2col",
           "stored_outputs"]


def _nbytes(program: Program) -> int:
    cols = program.columns
    ends = cols["addr"] + (cols["n2"] - 1) * cols["stride2"] + (cols["n1"] - 1) * cols["stride1"] \
        + cols["chunk_bytes"]
    return int(ends.max()) if len(program) else 0


def im2col(x: np.ndarray, conv: Conv2d) -> np.ndarray:
    """The ``M x K`` matrix of a convolution's input ``x`` (NHWC): one row per output pixel,
    its window's ``(ky, kx, channel)`` values in that order (zeros for padding)."""
    n, h, w, c = x.shape
    kh, kw = conv.kernel_h, conv.kernel_w
    xp = np.pad(x, ((0, 0), (conv.pad_top, conv.pad_bottom), (conv.pad_left, conv.pad_right),
                    (0, 0)))
    cols = []
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * conv.dilation_h, kx * conv.dilation_w
            cols.append(xp[:, y0:y0 + (conv.out_h - 1) * conv.stride_h + 1:conv.stride_h,
                           x0:x0 + (conv.out_w - 1) * conv.stride_w + 1:conv.stride_w, :])
    return np.concatenate(cols, axis=3).reshape(n * conv.out_h * conv.out_w, kh * kw * c)


def _matrix_a(op, value: np.ndarray) -> np.ndarray:
    if isinstance(op, Conv2d):
        return im2col(value.reshape(op.batch, op.in_h, op.in_w, op.in_channels), op)
    return value.reshape(op.m, op.k)


def dram_image(program: Program, graph: Graph, values: dict[str, np.ndarray]) -> np.ndarray:
    """DRAM before the run: each tensor of ``values`` (int8 arrays by tensor name: ``<input>``
    for the graph's input, op names for second operands, ``<op>.weights`` for a matrix op's
    ``K x N`` weights) at its address in ``program``. A convolution that reads the graph's
    input reads it as its im2col matrix (the compiler's ``im2col`` lowering: the host writes
    it); weights are written tile by tile where the program's filter loads read them (the
    compiler's pre-tiled layout: each tile a row-major block)."""
    mem = np.zeros(_nbytes(program), np.uint8)
    ops = {op.name: op for op in graph.ops}
    first = next((op for op in graph.ops if not op.inputs), None)
    for name, value in values.items():
        if name not in program.tensors:
            raise ValueError(f"dram_image: {name!r}: not a tensor of program "
                             f"{program.model!r} ({', '.join(sorted(program.tensors))})")
        if name.endswith(".weights"):
            _write_weights(mem, program, ops[name[:-len(".weights")]], value)
            continue
        if name == "<input>" and isinstance(first, (Gemm, Conv2d)):
            value = _matrix_a(first, np.asarray(value))
        raw = np.ascontiguousarray(value, dtype=np.int8).view(np.uint8).ravel()
        addr = program.tensors[name]
        mem[addr:addr + raw.size] = raw
    return mem


def _write_weights(mem: np.ndarray, program: Program, op, w: np.ndarray) -> None:
    from hw.program import Kind, Operand

    index = next(i for i, ls in enumerate(program.layers) if ls.name == op.name)
    tiling = program.layers[index].tiling
    cols = program.columns
    w = np.asarray(w, dtype=np.int8)
    for i in range(program.layers[index].first, program.layers[index].last):
        if cols["kind"][i] != Kind.LOAD or cols["operand"][i] != Operand.FILTER:
            continue
        k0, n0 = int(cols["tile_k"][i]) * tiling.k_tile, int(cols["tile_n"][i]) * tiling.n_tile
        block = w[k0:k0 + tiling.k_tile, n0:n0 + tiling.n_tile]
        if int(cols["chunk_bytes"][i]) != block.size or int(cols["n1"][i] * cols["n2"][i]) != 1:
            raise ValueError(f"dram_image: {op.name!r}: filter load {i} reads "
                             f"{int(cols['chunk_bytes'][i])} bytes, its tile has {block.size}")
        addr = int(cols["addr"][i])
        mem[addr:addr + block.size] = np.ascontiguousarray(block).view(np.uint8).ravel()


def tensor_of(memory: np.ndarray, program: Program, name: str, shape) -> np.ndarray:
    """Tensor ``name`` (int8, ``shape``) read from ``memory`` at its address."""
    addr = program.tensors[name]
    size = int(np.prod(shape))
    return memory[addr:addr + size].view(np.int8).reshape(shape).copy()


def _shape(op) -> tuple:
    if isinstance(op, Pool):
        return (op.batch, op.out_h, op.out_w, op.channels)
    if isinstance(op, Conv2d):
        return (op.batch * op.out_h * op.out_w, op.out_channels)
    if isinstance(op, Gemm):
        return (op.m, op.n)
    return (op.elements,)


def _in_shape(op) -> tuple:
    if isinstance(op, Pool):
        return (op.batch, op.in_h, op.in_w, op.channels)
    return (op.elements,)


def reference(graph: Graph, values: dict[str, np.ndarray], chip: ChipConfig | None = None,
              quant: dict | None = None) -> dict[str, np.ndarray]:
    """Every op's output by the models: matrix ops on the register-level model
    (:func:`hw.systolic.regmodel.run_gemm`, int32 accumulators), ReLU, add and pooling by
    :mod:`hw.vector.functional` rounded to int8 with ``to_dtype``, a Cast to int8 of
    accumulators by :func:`~hw.vector.functional.requantize_fixed` with ``quant[anchor]``."""
    from hw.core.isa import DEFAULT_QUANT
    from hw.systolic.regmodel import run_gemm

    quant = dict(quant or {})
    out = dict(values)
    wide: dict[str, str] = {}       # int32 tensors -> the matrix op they come from
    for op in graph.ops:
        src_name = op.inputs[0] if op.inputs else "<input>"
        src = out[src_name]
        if isinstance(op, (Gemm, Conv2d)):
            acc = run_gemm(chip.array, _matrix_a(op, src), values[f"{op.name}.weights"]).output
            out[op.name] = acc.reshape(_shape(op)).astype(np.int64)
            wide[op.name] = op.name
            continue
        if src_name in wide and isinstance(op, Activation) and op.fn == "relu":
            out[op.name] = np.maximum(src, 0)
            wide[op.name] = wide[src_name]
            continue
        if src_name in wide and isinstance(op, Cast):
            multiplier, shift, zp = quant.get(wide[src_name], DEFAULT_QUANT)
            out[op.name] = F.requantize_fixed(src, multiplier, shift, zp)
            continue
        src = src.reshape(_in_shape(op))
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


def stored_outputs(program: Program) -> list[str]:
    """The ops whose outputs the program stores: every op but the members of a fused group
    other than its last."""
    names, last_of = [], {}
    for ls in program.layers:
        if ls.fused is None:
            names.append(ls.name)
        else:
            last_of[ls.fused] = ls.name
    return names + list(last_of.values())


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
           quant: dict | None = None, mutation: str | None = None,
           max_cycles: int = 200_000, sim: str = "amaranth",
           memory: dict | None = None) -> Verification:
    """Lower, run on the core, compare outputs and cycles (module docstring). ``values``:
    the graph's input and every matrix op's weights (``<op>.weights``, ``K x N`` int8);
    ``quant``: each requantizing epilogue's ``(multiplier, shift, zero_point)`` by matrix op.
    ``sim``: ``"amaranth"`` (the simulator in Python) or ``"verilator"`` (the generated
    Verilog through the cocotb testbench, :mod:`hw.core.cocotb_run`). ``memory``: how the
    Amaranth run's memory answers, :func:`hw.core.cosim.run`'s ``port``, ``stall``,
    ``latency``, ``data_bytes`` and ``seed`` (default: the ideal stream memory). The
    executor is told the AXI port's cycles (:func:`hw.core.timing.durations`), so without
    stalls every start and end must still match. Stalls lengthen the DMA commands only, so
    with them every command must start and end no earlier than the executor predicts and
    every array and vector command must take exactly its predicted cycles; outputs stay
    bit-exact either way."""
    if sim not in ("amaranth", "verilator"):
        raise ValueError(f"verify: sim = {sim!r}: must be 'amaranth' or 'verilator'")
    from hw.executor import execute

    for op in graph.ops:
        if isinstance(op, (Gemm, Conv2d)) and f"{op.name}.weights" not in values:
            raise ValueError(f"verify: values has no {op.name!r}.weights: give every matrix "
                             f"op's K x N int8 weights")
    if "<input>" not in values:
        raise ValueError("verify: values has no '<input>': give the graph's input")
    core = lower(program, graph, chip, quant)
    want = reference(graph, values, chip, quant)
    image = dram_image(core.program, graph, values)
    memory = dict(memory or {})
    if set(memory) - {"port", "stall", "latency", "data_bytes", "seed"}:
        raise ValueError(f"verify: memory = {memory!r}: allowed keys are port, stall, latency, "
                         "data_bytes and seed")
    if memory and sim != "amaranth":
        raise ValueError("verify: memory: only the Amaranth run ('amaranth') models a slower "
                         "memory")
    # the executor knows the AXI port's cycles when its slave never stalls (hw.core.timing)
    axi = ((memory.get("data_bytes", 8), memory.get("latency", 2))
           if memory.get("port") == "axi" else None)
    exact = not memory.get("stall", 0.0)
    result = execute(core.program, chip, durations=durations(core, axi))
    if sim == "verilator":
        from hw.core import cocotb_run

        got = cocotb_run.run(core, image, mutation=mutation, max_cycles=max_cycles)
    else:
        got = run(core, image, mutation=mutation, max_cycles=max_cycles, **memory)
    found = []
    for name in stored_outputs(core.program):
        value = tensor_of(got.memory, core.program, name, want[name].shape)
        if not np.array_equal(value, want[name]):
            k = int(np.flatnonzero(value.ravel() != want[name].ravel())[0])
            found.append(f"{name}: element {k} is {int(value.ravel()[k])}, the models give "
                         f"{int(want[name].ravel()[k])}")
    t_start, t_end = np.asarray(result.trace.start), np.asarray(result.trace.finish)
    if exact:
        wrong = (got.start != t_start) | (got.end != t_end)
    else:
        dma = np.zeros(len(t_start), bool)
        dma[list(core.index[Engine.LOAD]) + list(core.index[Engine.STORE])] = True
        wrong = ((got.start < t_start) | (got.end < t_end)
                 | (~dma & (got.end - got.start != t_end - t_start)))
    for i in np.flatnonzero(wrong)[:5]:
        found.append(f"command {i}: the core ran it in cycles [{got.start[i]}, {got.end[i]}), "
                     f"the executor predicts [{t_start[i]}, {t_end[i]})")
    if got.conflict:
        found.append("two engines used one scratchpad port in the same cycle")
    if got.axi_error:
        found.append("the AXI port saw an error response")
    return Verification(core, got, np.asarray(t_start), np.asarray(t_end), found)
