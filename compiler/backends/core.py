"""Lowering a compiled :class:`~hw.program.Program` to the RTL core's command queues
(:class:`hw.core.isa.CoreProgram`).

The core (:mod:`hw.core.rtl`) has four engines, as the executor does: the load DMA, the array,
the store DMA and the vector engine. Each runs its own queue of command words in order. A
command starts when its engine is free and its dependencies are done; since every engine
finishes its commands in order, "command d is done" is "d's engine has finished at least
``position(d) + 1`` commands", so a command word carries, per engine, the number of that
engine's commands that must be done before it starts (``wait0..wait3``), the scheme of
Gemmini's decoupled load / execute / store queues. The check is four comparisons, in one cycle.

Scratchpads are physical here. Each of the three (ifmap, filter, ofmap) is two halves, the
ping and pong buffers the compiler double-buffers tiles in (``double_buffer``); every tile
starts at byte 0 of its half, packed as the DMA box lays it out. The lowering assigns the
halves as the compiler does (:mod:`compiler.backends.systolic_vector`: within an op, each new
tile of a scratchpad takes the other half; each op starts at half 0), and reads each
consumer's half from the command that produced its data. A half is overwritten only after its
last reader and writer are done: where the program's dependencies do not already say so
(commands of independent ops), the lowering adds the dependency (:attr:`CoreProgram.added`)
and :attr:`CoreProgram.program` carries it, so the executor schedules the same program.

What the core runs (anything else is a one-line :class:`CoreError`): a one-core int8 chip with
ideal DRAM, the model's input and output in DRAM, every scratchpad double-buffered with one
port, and vector lanes that fill one ifmap row with int8 values (``lanes x 1 B``); commands
``LOAD`` and ``STORE`` of any box, and ``VECTOR`` commands of standalone ReLU, add (two
streamed operands) and max or average pooling whose channel tiles are whole beats of lanes.
"""

from __future__ import annotations

import numpy as np

from compiler.backends.systolic_vector import vector_plan
from compiler.ir import Activation, Binary, Cast, Graph, Pool
from hw.chip import ChipConfig
from hw.core.isa import (
    DEFAULT_QUANT, MAX_POOL_WINDOW, VOP, CoreError, CoreGeometry, CoreProgram, FIELDS, Op, check_word, geometry,
)
from hw.program import Engine, Kind, Operand, Program

__all__ = ["lower"]

_ENGINES = len(Engine)


def _fail(msg: str):
    raise CoreError(msg)


def _word(**values) -> dict:
    word = dict.fromkeys(FIELDS, 0)
    for key, value in values.items():
        word[key] = int(value)
    return word


def lower(program: Program, graph: Graph, chip: ChipConfig,
          quant: dict | None = None) -> CoreProgram:
    """The command queues that run ``program`` (compiled from ``graph`` for ``chip``) on the
    core (module docstring). ``quant``: per op name of a requantizing epilogue's anchor (the
    matrix op), ``(multiplier, shift, zero_point)`` as
    :func:`hw.vector.functional.quantize_multiplier` gives them (default
    :data:`DEFAULT_QUANT`)."""
    geo = geometry(chip)
    quant = dict(quant or {})
    cols = program.columns
    n = len(program)
    kinds, engines, operands = (cols[c].tolist() for c in ("kind", "engine", "operand"))
    layers = cols["layer"].tolist()
    ops = {op.name: op for op in graph.ops}
    # position of every command in its engine's queue
    position = [0] * n
    counts = [0] * _ENGINES
    for i, e in enumerate(engines):
        position[i] = counts[e]
        counts[e] += 1
    deps = [program.deps(i).tolist() for i in range(n)]
    half_of: dict[int, int] = {}       # command -> the half it wrote (LOAD, VECTOR)
    next_half: dict[tuple[int, int], int] = {}
    words: list[dict | None] = [None] * n
    plans: dict[int, tuple] = {}
    c_tile: dict[int, tuple] = {}      # layer -> the C tile its computes accumulate into
    for i in range(n):
        kind, lay = kinds[i], layers[i]
        sched = program.layers[lay]
        where = f"program {program.model!r}, command {i} ({Kind(kind).name} of {sched.name!r})"
        if kind == Kind.LOAD:
            spad = {Operand.IFMAP: 0, Operand.FILTER: 1}.get(Operand(operands[i]))
            if spad is None:
                _fail(f"{where}: operand {Operand(operands[i]).name}: the RTL core loads "
                      f"IFMAP and FILTER tiles")
            half = _take_half(next_half, lay, spad)
            half_of[i] = half
            words[i] = _transfer(Op.LOAD, cols, i, spad, half)
        elif kind == Kind.STORE:
            if operands[i] != Operand.OFMAP:
                _fail(f"{where}: operand {Operand(operands[i]).name}: the RTL core stores "
                      f"OFMAP tiles")
            src = [d for d in deps[i] if kinds[d] == Kind.VECTOR and layers[d] == lay]
            if len(src) != 1:
                _fail(f"{where}: it must depend on exactly one VECTOR of its op (a matrix "
                      f"op's output goes through a requantizing epilogue: a Cast to int8 "
                      f"after it, fused)")
            words[i] = _transfer(Op.STORE, cols, i, 2, half_of[src[0]])
        elif kind == Kind.COMPUTE:
            words[i] = _compute(program, cols, i, deps[i], kinds, operands, half_of, next_half,
                                c_tile, geo, chip, where)
            half_of[i] = words[i]["c_half"]
        elif kind == Kind.VECTOR and operands[i] == Operand.OFMAP:
            comp = [d for d in deps[i] if kinds[d] == Kind.COMPUTE]
            if len(comp) != 1:
                _fail(f"{where}: an epilogue must follow exactly one COMPUTE")
            half_of[i] = half_of[comp[0]]
            words[i] = _epilogue(program, graph, lay, cols, i, half_of[i], quant, geo, where)
        elif kind == Kind.VECTOR:
            op = ops.get(sched.name)
            half = _take_half(next_half, lay, 2)
            half_of[i] = half
            loads = {operands[d]: half_of[d] for d in deps[i] if kinds[d] == Kind.LOAD}
            if Operand.IFMAP not in loads or operands[i] != Operand.IFMAP:
                _fail(f"{where}: the RTL core's vector engine reads a tile loaded into the "
                      f"ifmap scratchpad")
            base = dict(src_half=loads[Operand.IFMAP], b_half=loads.get(Operand.FILTER, 0),
                        dst_half=half)
            words[i] = _vector(op, where, cols, i, base, geo, chip, plans)
        else:
            _fail(f"{where}: the RTL core runs LOAD, STORE, COMPUTE and VECTOR commands (set "
                  f"chip.model_input and chip.model_output to 'dram'; compile with "
                  f"keep_on_chip=False)")
        check_word(words[i], where)
    added = _buffer_hazards(program, kinds, deps, half_of, words)
    if added:
        program = _with_deps(program, deps)
    queues: list[list[dict]] = [[] for _ in range(_ENGINES)]
    index: list[list[int]] = [[] for _ in range(_ENGINES)]
    for i in range(n):
        w = words[i]
        for d in deps[i]:
            key = f"wait{engines[d]}"
            w[key] = max(w[key], position[d] + 1)
        queues[engines[i]].append(w)
        index[engines[i]].append(i)
    return CoreProgram(program, geo, queues, index, added)


def _compute(program, cols, i, deps, kinds, operands, half_of, next_half, c_tile, geo, chip,
             where) -> dict:
    lay = int(cols["layer"][i])
    m, n, k, count = (int(cols[c][i]) for c in ("m", "n", "k", "count"))
    arr = chip.array
    if arr.dataflow.value != "ws" or arr.rows != geo.lanes or arr.cols != geo.lanes:
        _fail(f"{where}: the RTL core's array is weight-stationary, vector.lanes x "
              f"vector.lanes ({arr.dataflow.value}, {arr.rows} x {arr.cols})")
    if arr.overflow.value != "wrap" or arr.sparse_m or arr.macs_per_pe != 1:
        _fail(f"{where}: the RTL core's array is dense int8 with wrapping accumulators")
    if count != 1 or int(cols["nm_n"][i]):
        _fail(f"{where}: count = {count}: the RTL core computes one GEMM per command, dense")
    lanes = geo.lanes
    for name, value in (("k", k), ("n", n)):
        if value % lanes:
            _fail(f"{where}: {name} = {value}: the RTL core reads whole rows: tiles' K and N "
                  f"must be multiples of vector.lanes = {lanes}")
    if int(cols["left_stride"][i]) != 1 or int(cols["top_stride"][i]) != 1:
        _fail(f"{where}: the RTL core reads contiguous edges (sram_layout = 'matched')")
    loads = {operands[d]: d for d in deps if kinds[d] == Kind.LOAD}
    if Operand.IFMAP not in loads or Operand.FILTER not in loads:
        _fail(f"{where}: a compute must follow the LOADs of its A and B tiles")
    key = tuple(int(cols[c][i]) for c in ("tile_g", "tile_m", "tile_n"))
    prev = c_tile.get(lay)
    if prev is not None and prev[0] == key:
        half, acc = prev[1], 1
    else:
        half, acc = _take_half(next_half, lay, 2), 0
        c_tile[lay] = (key, half)
    if m * n * 4 > geo.half_rows[2] * geo.row_bytes[2]:
        _fail(f"{where}: a {m} x {n} int32 tile does not fit an ofmap half")
    return _word(op=Op.COMPUTE, m=m, n=n, k=k, a_half=half_of[loads[Operand.IFMAP]],
                 b_half=half_of[loads[Operand.FILTER]], c_half=half, acc=acc)


def _epilogue(program, graph, lay, cols, i, half, quant, geo, where) -> dict:
    """A requantizing epilogue on accumulators: its group's members must be ReLU and a Cast
    to int8 (fused with the matrix op, :mod:`compiler.fusion`)."""
    sched = program.layers[lay]
    ops = {op.name: op for op in graph.ops}
    members = [ops[ls.name] for ls in program.layers
               if ls.fused == sched.fused and ls.name != sched.name]
    relu, cast = False, None
    for op in members:
        if isinstance(op, Activation) and op.fn == "relu" and cast is None:
            relu = True
        elif isinstance(op, Cast) and op.dst == "int8" and cast is None:
            cast = op
        else:
            _fail(f"{where}: a fused {type(op).__name__} ({op.name!r}): the RTL core's "
                  f"epilogue is ReLU and a Cast to int8")
    if cast is None:
        _fail(f"{where}: the epilogue has no Cast to int8: the RTL core requantizes every "
              f"matrix op's int32 accumulators to int8")
    if geo.row_bytes[2] != 4 * geo.lanes:
        _fail(f"{where}: ofmap rows of {geo.row_bytes[2]} bytes: an epilogue reads one row "
              f"of vector.lanes int32 per beat (4 x {geo.lanes})")
    multiplier, shift, zp = quant.get(sched.name, DEFAULT_QUANT)
    return _word(op=Op.VECTOR, vop=VOP["requant"], src=2, src_half=half, dst_half=half,
                 elems=int(cols["m"][i]) * int(cols["n"][i]), multiplier=multiplier,
                 shift=shift, zero_point=zp, relu=relu)


def _take_half(next_half: dict, layer: int, spad: int) -> int:
    """The half a new tile of ``spad`` takes in op ``layer``: 0 first, then alternating."""
    key = (layer, spad)
    half = next_half.get(key, 0)
    next_half[key] = half ^ 1
    return half


def _transfer(op: int, cols, i: int, spad: int, half: int) -> dict:
    return _word(op=op, dram_addr=cols["addr"][i], n2=cols["n2"][i], stride2=cols["stride2"][i],
                 n1=cols["n1"][i], stride1=cols["stride1"][i], chunk=cols["chunk_bytes"][i],
                 spad=spad, half=half)


def _vector(op, where: str, cols, i: int, base: dict, geo: CoreGeometry, chip: ChipConfig,
            plans: dict) -> dict:
    lanes = geo.lanes
    rows, cols_ = int(cols["m"][i]), int(cols["n"][i])
    if isinstance(op, Activation) and op.fn == "relu":
        return _word(op=Op.VECTOR, vop=VOP["relu"], elems=rows * cols_, **base)
    if isinstance(op, Binary) and op.fn == "add" and op.other_elements == op.elements:
        return _word(op=Op.VECTOR, vop=VOP["add"], elems=rows * cols_, **base)
    if isinstance(op, Pool):
        plan = plans.get(id(op))
        if plan is None:
            plan = plans[id(op)] = (vector_plan(op, chip), {"tile": 0})
        p, state = plan
        if op.kernel_h * op.kernel_w > MAX_POOL_WINDOW:
            _fail(f"{where}: a {op.kernel_h}x{op.kernel_w} window: the RTL core's lanes pool "
                  f"windows of at most {MAX_POOL_WINDOW} elements")
        # the tile: the same walk as compiler.backends.systolic_vector._tiles (images, then
        # channel tiles, then output row tiles; the last channel tile may be narrower)
        t = state["tile"]
        state["tile"] += 1
        row_tiles = -(-op.out_h // p.tile_rows)
        c_index, r_index = divmod(t % (-(-op.channels // p.pool_channels) * row_tiles), row_tiles)
        cn = min(p.pool_channels, op.channels - c_index * p.pool_channels)
        if cn % lanes:
            _fail(f"{where}: {cn} channels in this tile: the RTL core pools whole beats of "
                  f"vector.lanes = {lanes} channels")
        r0 = r_index * p.tile_rows
        top = max(0, r0 * op.stride_h - op.pad_top)
        if rows != min(p.tile_rows, op.out_h - r0) or cols_ != op.out_w * cn:
            _fail(f"{where}: its {rows} x {cols_} outputs are not the pool's tile {t}")
        return _word(op=Op.VECTOR, vop=VOP["maxpool" if op.kind == "max" else "avgpool"],
                     in_h=op.in_h, in_w=op.in_w, top=top, r0=r0, rows=rows, out_w=op.out_w,
                     kh=op.kernel_h, kw=op.kernel_w, sh=op.stride_h, sw=op.stride_w,
                     pad_t=op.pad_top, pad_l=op.pad_left, blocks=cn // lanes, **base)
    name = type(op).__name__ if op is not None else "?"
    _fail(f"{where}: a {name} op: the RTL core's vector engine runs ReLU, add and max or "
          f"average pooling")


def _buffer_hazards(program: Program, kinds, deps, half_of, words) -> list[tuple[int, int]]:
    """Dependencies the physical halves need beyond the program's: a command that writes a
    half waits for that half's previous readers and writer. Adds them to ``deps``."""
    last_writer: dict[tuple[int, int], int] = {}
    readers: dict[tuple[int, int], list[int]] = {}
    added = []
    reach = _Reach(deps, [w["op"] for w in words])
    for i, w in enumerate(words):
        reads, writes = _touches(kinds[i], w)
        for key in writes:
            for d in readers.pop(key, []) + [last_writer.get(key, -1)]:
                if d >= 0 and d != i and not reach.before(d, i):
                    deps[i].append(d)
                    added.append((i, d))
            last_writer[key] = i
        for key in reads:
            readers.setdefault(key, []).append(i)
    return added


def _touches(kind: int, w: dict):
    """``(reads, writes)``: the (scratchpad, half) pairs a command reads and writes."""
    if kind == Kind.LOAD:
        return [], [(w["spad"], w["half"])]
    if kind == Kind.STORE:
        return [(2, w["half"])], []
    if kind == Kind.COMPUTE:
        return [(0, w["a_half"]), (1, w["b_half"]), (2, w["c_half"])], [(2, w["c_half"])]
    reads = [(w["src"], w["src_half"])]
    if w["vop"] == VOP["add"]:
        reads.append((1, w["b_half"]))
    return reads, [(2, w["dst_half"])]


class _Reach:
    """Whether command d is done before command i starts, by the dependencies and engine
    order (a depth-first walk, memoised per i)."""

    def __init__(self, deps, engine_of):
        self.deps, self.engine_of = deps, engine_of

    def before(self, d: int, i: int) -> bool:
        if self.engine_of[d] == self.engine_of[i] and d < i:
            return True                 # the same engine runs them in order
        seen, stack = set(), list(self.deps[i])
        while stack:
            j = stack.pop()
            if j == d:
                return True
            if j in seen or j < d:
                continue
            seen.add(j)
            stack.extend(self.deps[j])
        return False


def _with_deps(program: Program, deps) -> Program:
    ptr = np.zeros(len(deps) + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.array([d for ds in deps for d in ds], np.int64)
    return Program(program.model, program.layers, program.columns, ptr, idx,
                   list(program.notes), list(program.works), dict(program.tensors))
