"""A compiled :class:`~hw.program.Program` as the core's command queues (:class:`CoreProgram`).

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

from dataclasses import dataclass, field

import numpy as np

from compiler.backends.systolic_vector import vector_plan
from compiler.ir import Activation, Binary, Graph, Pool
from hw.chip import ChipConfig
from hw.program import Engine, Kind, Operand, Program
from hw.systolic.config import Precision

__all__ = ["CoreError", "CoreGeometry", "CoreProgram", "FIELDS", "SIGNED", "SPADS",
           "Op", "VOP", "core_chip", "geometry", "lower"]


class CoreError(ValueError):
    """A program or chip the core cannot run (one line: what, where, what is allowed)."""


#: Scratchpads, in the order of the command field ``spad``.
SPADS = ("ifmap", "filter", "ofmap")


class Op:
    """Command opcodes (the ``op`` field)."""
    LOAD = 0
    STORE = 1
    COMPUTE = 2
    VECTOR = 3


#: Vector operations (the ``vop`` field), numbered as :class:`hw.vector.rtl.lane.VecOp`.
VOP = {"requant": 0, "relu": 1, "add": 2, "maxpool": 3, "avgpool": 4}

#: The command word: field -> bits, in order (all unsigned but :data:`SIGNED`).
FIELDS = {
    "op": 2, "wait0": 16, "wait1": 16, "wait2": 16, "wait3": 16,
    # transfers: the DRAM box and the scratchpad side
    "dram_addr": 32, "n2": 16, "stride2": 32, "n1": 16, "stride1": 32, "chunk": 16,
    "spad": 2, "half": 1,
    # vector: operation, halves, elements (element-wise) or the pooling window walk
    "vop": 3, "src_half": 1, "b_half": 1, "dst_half": 1, "elems": 20,
    "in_h": 12, "in_w": 12, "top": 12, "r0": 12, "rows": 12, "out_w": 12,
    "kh": 5, "kw": 5, "sh": 5, "sw": 5, "pad_t": 5, "pad_l": 5, "blocks": 8,
    "multiplier": 31, "shift": 6, "zero_point": 8, "relu": 1, "src": 2,
    # compute: a tile of m x k times k x n into the accumulators (acc: add to partial sums)
    "m": 16, "n": 16, "k": 16, "a_half": 1, "c_half": 1, "acc": 1,
}
SIGNED = frozenset({"shift", "zero_point"})
_ENGINES = len(Engine)


@dataclass(frozen=True)
class CoreGeometry:
    """The core's sizes on a chip: scratchpad row bytes (one access per cycle) and rows per
    half, vector lanes, DMA setup cycles."""

    row_bytes: tuple[int, int, int]
    half_rows: tuple[int, int, int]
    lanes: int
    setup: int
    array: object = None          # the chip's ArrayConfig


@dataclass
class CoreProgram:
    """The command queues of one program: ``queues[engine]`` lists command words (dicts of
    :data:`FIELDS`), ``index[engine]`` the program index of each; ``program`` is the program
    with the dependencies the physical buffers add (``added``: ``(command, dependency)``)."""

    program: Program
    geometry: CoreGeometry
    queues: list[list[dict]]
    index: list[list[int]]
    added: list[tuple[int, int]] = field(default_factory=list)

    def words(self, engine: int) -> list[dict]:
        return self.queues[engine]


def core_chip(lanes: int = 8, kib: float = 1.0, setup: int = 4,
              overrides=()) -> ChipConfig:
    """A chip the core can be: an ``lanes x lanes`` WS int8 array, ``lanes`` vector lanes,
    ifmap and filter rows of ``lanes`` bytes (one bank), ofmap rows of ``4 x lanes`` bytes
    (four banks: a row of int32 accumulators), ``kib`` KiB per scratchpad, ideal DRAM with
    the model's input and output in it, ``setup`` DMA descriptor cycles; then ``overrides``
    (``--set`` style)."""
    from hw.configfile import load_chip_config

    return load_chip_config(None, [
        f"array.rows={lanes}", f"array.cols={lanes}", f"vector.lanes={lanes}",
        "dram.preset=ideal", "chip.model_input=dram", "chip.model_output=dram",
        f"dma.descriptor_setup_cycles={setup}", "chip.name=npulab-core",
        *(f"sram.{s}.capacity_kib={kib}" for s in SPADS), "sram.banks=1",
        f"sram.bank_width_bytes={lanes}", "sram.ofmap.banks=4", *overrides])


def _fail(msg: str):
    raise CoreError(msg)


def geometry(chip: ChipConfig) -> CoreGeometry:
    """The core's sizes on ``chip``; a :class:`CoreError` for a chip the core cannot be."""
    name = chip.name
    checks = [
        (not chip.multicore, "chip.cores", chip.cores, "1 and no [l2]"),
        (chip.dram.is_ideal, "dram.ideal", chip.dram.is_ideal, "true (dram.preset = 'ideal')"),
        (chip.model_input == "dram", "chip.model_input", chip.model_input, "'dram'"),
        (chip.model_output == "dram", "chip.model_output", chip.model_output, "'dram'"),
        (chip.array.precision is Precision.INT8, "array.precision", chip.array.precision.value,
         "'int8'"),
        (chip.array.acc_bits == 32, "array.acc_bits", chip.array.acc_bits, "32"),
        (not chip.vector.ideal, "vector.ideal", chip.vector.ideal, "false"),
        (chip.dma.descriptor_setup_cycles >= 2, "dma.descriptor_setup_cycles",
         chip.dma.descriptor_setup_cycles, ">= 2"),
    ]
    for name_ in SPADS:
        s = chip.sram(name_)
        checks.append((s.double_buffer, f"sram.{name_}.double_buffer", s.double_buffer, "true"))
        checks.append((s.ports == 1, f"sram.{name_}.ports", s.ports, "1"))
    for ok, key, value, allowed in checks:
        if not ok:
            _fail(f"chip {name!r}: {key} = {value!r}: the RTL core needs {allowed}")
    rows = tuple(chip.sram(n).bytes_per_cycle for n in SPADS)
    lanes = chip.vector.lanes
    if rows[0] != lanes or rows[1] != lanes:
        _fail(f"chip {name!r}: vector.lanes = {lanes}: the RTL core needs one int8 per lane per "
              f"ifmap and filter row ({rows[0]} and {rows[1]} bytes)")
    if rows[2] < lanes:
        _fail(f"chip {name!r}: sram.ofmap rows of {rows[2]} bytes: the RTL core needs at least "
              f"vector.lanes = {lanes}")
    halves = tuple(chip.sram(n).tile_capacity_bytes // r for n, r in zip(SPADS, rows))
    return CoreGeometry(rows, halves, lanes, chip.dma.descriptor_setup_cycles, chip.array)


def _word(**values) -> dict:
    word = dict.fromkeys(FIELDS, 0)
    for key, value in values.items():
        word[key] = int(value)
    return word


def _check_range(word: dict, where: str) -> None:
    for key, bits in FIELDS.items():
        value = word[key]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if key in SIGNED else (0, (1 << bits) - 1)
        if not lo <= value <= hi:
            _fail(f"{where}: field {key} = {value}: must fit {bits} bits ({lo}..{hi})")


#: The default requantization of an epilogue: a scale of 1/2 (``multiplier = 2**30``).
DEFAULT_QUANT = (1 << 30, 0, 0)


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
        _check_range(words[i], where)
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
    from compiler.ir import Cast

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
        cn = p.pool_channels
        if cn % lanes:
            _fail(f"{where}: {cn} channels per tile: the RTL core pools whole beats of "
                  f"vector.lanes = {lanes} channels")
        # the tile: the same walk as compiler.backends.systolic_vector._tiles
        t = state["tile"]
        state["tile"] += 1
        per_image = -(-op.channels // cn) * -(-op.out_h // p.tile_rows)
        r0 = (t % per_image) % -(-op.out_h // p.tile_rows) * p.tile_rows
        top = max(0, r0 * op.stride_h - op.pad_top)
        if rows != min(p.tile_rows, op.out_h - r0):
            _fail(f"{where}: its {rows} output rows are not the pool's tile {t}")
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
