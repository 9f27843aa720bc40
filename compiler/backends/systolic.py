"""The systolic backend: lower a graph to a :class:`~hw.program.Program` for a chip.

For every matrix op (:class:`~compiler.ir.Gemm`, :class:`~compiler.ir.Conv2d`) the tiler
(:mod:`compiler.backends.systolic_tiling`) picks tile sizes and a loop order; this module then
walks the loop nest and emits the commands:

* a ``LOAD`` of an A (ifmap) or B (filter) tile each time the tile changes; with double buffering
  tiles alternate between the two halves of the scratchpad, and a load waits only for the compute
  that last read the half it overwrites — so the next tile is prefetched while the current one
  computes;
* a ``COMPUTE`` per tile, after its operands are loaded and its accumulator half is free;
* a ``STORE`` when an output tile is complete (or a partial-sum spill at accumulator width when
  the loop order leaves the tile before the last K step; the tile is reloaded when resumed).

Between ops: tensors live in DRAM at addresses given by a bump allocator (NHWC activations,
row-major GEMM operands, weights pre-tiled by the compiler so each weight tile is one contiguous
block). A consumer's first load waits for the producer's last store. When an op's only consumer
is the next op, the whole output fits the ofmap scratchpad and the consumer can keep all of its
input in one ifmap tile, the tensor stays on chip: the producer stores nothing and the consumer
starts with an on-chip ``MOVE`` (ofmap -> ifmap scratchpad) instead of DRAM loads.

The network input arrives from the host over the link (``HOST_IN``) unless
``chip.model_input == "dram"``; outputs no op consumes go back to the host (``HOST_OUT``)
unless ``chip.model_output == "dram"``. Vector ops (pooling, activations, element-wise ops,
softmax, norms, reductions, casts) and moves that copy bytes run on the vector engine, tiled
through the scratchpads by :mod:`compiler.backends.systolic_vector`. On a chip whose vector
engine is ``ideal``, and for views (a reshape), they get no commands: their output is in DRAM as
soon as their inputs are (the matrix-only bound).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from compiler.backends.multicore import Placement, share_bytes_per_cycle, share_graph
from compiler.backends.systolic_fused import (
    Epilogue, add_norm_plan, attention_plan, attention_tiling_fields, emit_attention, epilogue,
)
from compiler.backends.systolic_vector import emit_vector_op, is_vector_op, vector_plan
from compiler.backends.systolic_tiling import (
    TileChoice, TileProblem, TilingError, choose_tiling, loop_nest, tile_sizes,
)
from compiler.fusion import PATTERNS, FusedGroup, find_groups
from compiler.ir import Binary, Conv2d, Gemm, Graph
from compiler.options import MAP_MODES, CompileOptions
from hw.chip import ChipConfig
from hw.packing import nbytes, size_bytes
from hw.sparsity import array_mix, array_nm, scale_mix, stored_weight_bytes
from hw.program import Kind, LayerSchedule, Location, Operand, ProgramBuilder, Program, Tiling
from hw.systolic.config import Dataflow
from hw.systolic.geometry import GemmDim, geometry

__all__ = ["compile_graph", "tile_problem"]

_ALIGN = 4096


class _Allocator:
    def __init__(self):
        self.top = 0

    def alloc(self, nbytes: int) -> int:
        addr = self.top
        self.top += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return addr


def tile_problem(op, chip: ChipConfig, options: CompileOptions) -> TileProblem:
    """The tiler's view of ``op`` on ``chip``: its GEMM (or direct convolution) extents in
    units, element and accumulator bytes (what :func:`compile_graph` tiles and the mapper
    searches)."""
    eb, bits = chip.elem_size, chip.array.precision.bits
    ab = -(-chip.array.acc_bits // 8)   # accumulators occupy whole bytes
    shape = op.gemm_shape()
    stored = op.stored_weights
    # N:M sparse stored weights run compressed on sparse PEs (dense elsewhere)
    nm = array_nm(options.weight_nm(op), chip.array.sparse_m) if stored else None
    nm, nm_rows = _row_wise(options, op, shape.n, chip.array.sparse_m, nm, stored)
    w_bits = options.w_bits_of(op) or 0
    b_bits = w_bits if 0 < w_bits < bits else 0     # stored narrower, widened on load
    if isinstance(op, Conv2d) and options.conv_lowering == "direct":
        return TileProblem(
            name=op.name, lowering="direct", count=shape.count, m=shape.m, n=shape.n, k=shape.k,
            elem_bytes=eb, acc_bytes=ab, batch=op.batch, out_h=op.out_h, out_w=op.out_w,
            in_h=op.in_h, in_w=op.in_w, in_channels=op.in_channels // op.groups,
            kernel_h=op.kernel_h, kernel_w=op.kernel_w, stride_h=op.stride_h,
            dilation_h=op.dilation_h, pad_top=op.pad_top, nm=nm, nm_rows=nm_rows, b_bits=b_bits,
            act_zeros=options.act_zeros_of(op),
            b_store=_stored_weights(op, shape, stored and nm is None, b_bits or bits, options))
    return TileProblem(
        name=op.name, lowering="im2col" if isinstance(op, Conv2d) else "gemm", count=shape.count,
        m=shape.m, n=shape.n, k=shape.k, elem_bytes=eb, acc_bytes=ab,
        b_is_weight=not (isinstance(op, Gemm) and len(op.inputs) >= 2),
        b_bits=b_bits, nm=nm, nm_rows=nm_rows, act_zeros=options.act_zeros_of(op),
        b_store=_stored_weights(op, shape, stored and nm is None, b_bits or bits, options))


def _row_wise(options: CompileOptions, op, channels: int, sparse_m: int, nm, stored: bool):
    """``(nm, nm_rows)`` of ``op`` (:class:`TileProblem`): row-wise N:M (the options' or the
    op's ``weight_nm_rows``) dealt over its ``channels`` output channels and run on PEs with
    groups of ``sparse_m`` (:func:`hw.sparsity.array_mix`); layer-wise when every channel runs
    with one N, dense when that N keeps every weight."""
    rows = options.weight_nm_rows(op) if stored and sparse_m else None
    if rows is None:
        return nm, None
    m = options.weight_nm(op)[1]
    mix = array_mix(scale_mix(rows, channels), m, sparse_m)
    sparse = [n for n, _ in mix if n < sparse_m]
    if not sparse:
        return None, None
    if len(mix) == 1:
        return (mix[0][0], sparse_m), None
    return (sparse[0], sparse_m), mix


def _stored_weights(op, shape, stored: bool, value_bits: int, options: CompileOptions):
    """``(format, bytes, elements)`` of ``op``'s weights in the sparse format the options keep
    them in (None: dense, or not stored weights)."""
    storage = options.weight_storage(op) if stored else None
    if storage is None:
        return None
    fmt, density = storage
    return (fmt, stored_weight_bytes(fmt, shape.k, shape.n, density, value_bits, shape.count),
            shape.count * shape.k * shape.n)


def compile_graph(graph: Graph, chip: ChipConfig, options: CompileOptions | None = None, *,
                  input_in_l2: bool = False, output_in_l2: bool = False) -> Program:
    """Tile every matrix op of ``graph`` for ``chip`` and emit the whole program. On a chip
    with several cores or an L2 (:mod:`compiler.backends.multicore`) the program is one core's
    share of every op, each layer saying how many cores run it, and its transfers are placed in
    the L2 or DRAM. A pipeline stage (:mod:`compiler.backends.stages`) on a chip with an L2
    finds its input there (``input_in_l2``) and leaves its output there (``output_in_l2``)
    when they fit (:meth:`~compiler.backends.multicore.Placement.hold`)."""
    options = options or CompileOptions()
    eb = chip.elem_size
    pb = ProgramBuilder(graph.name)
    whole = {op.name: op for op in graph.ops}
    splits = None
    if chip.multicore:
        graph, splits = share_graph(graph, chip, split_score(chip, options))
        pb.placement = place = Placement(chip)
        place.keep_final = output_in_l2
        if chip.cores > 1:      # an op's output is not where the next op's share reads it
            options = replace(options, keep_on_chip=False)
    alloc = _Allocator()
    ops = list(graph.ops)
    consumers = graph.readers()
    addr: dict[str, int] = {}
    ready: dict[str, int | None] = {}      # command whose completion makes the tensor readable
    resident: dict[str, int] = {}          # tensor kept on chip -> producer's last compute
    graph_input = "<input>"
    needs_input = [op for op in ops if not op.inputs]
    if needs_input:
        first = needs_input[0]
        in_bytes = first.input_bytes(eb)
        addr[graph_input] = alloc.alloc(in_bytes)
        if chip.model_input == "host":
            ready[graph_input] = pb.transfer(Kind.HOST_IN, Operand.IFMAP, Location.HOST, 0,
                                             (addr[graph_input], 1, 0, 1, 0, in_bytes))
        else:
            ready[graph_input] = None
        if input_in_l2 and splits is not None:
            place.hold(addr[graph_input], in_bytes, in_bytes * splits[first.name].cores)
    matrix = [i for i, op in enumerate(ops) if op.gemm_shape() is not None]
    groups = _fusable_groups(graph, chip, options)
    by_name = {op.name: op for op in ops}
    planned_resident_input = False
    last_reader = {src: i for i, o in enumerate(ops) for src in o.inputs}
    last_input_reader = max((i for i, o in enumerate(ops) if not o.inputs
                             or shortcut_is_input(o)), default=-1)
    for index, op in enumerate(ops):
        first_cmd = len(pb)
        group = groups.get(op.name)
        if splits is not None:
            pb.settle()
            for src in ops[index - 1].inputs if index else ():
                if last_reader.get(src) == index - 1 and src in addr:
                    place.release(addr[src])
            if index and index - 1 == last_input_reader and graph_input in addr:
                place.release(addr[graph_input])
            place.begin(splits[op.name])
        if group is not None and group.anchor != op.name:
            # its commands are the anchor's (fused); addr and ready were set with them
            planned_resident_input = False
            pb.layers.append(LayerSchedule(index, op.name, type(op).__name__, first_cmd,
                                           first_cmd, 0, None, _label(group)))
            continue
        if group is not None and group.kind in ("attention", "add_norm"):
            layer = _emit_group(pb, index, group, by_name, consumers, chip, options, alloc,
                                addr, ready, graph_input)
            _to_host(pb, index, by_name[group.members[-1]], consumers, chip, addr, ready, eb)
            planned_resident_input = False
            pb.layers.append(replace(layer, first=first_cmd, last=len(pb), fused=_label(group)))
            continue
        out_bytes = op.output_bytes(eb)
        addr[op.name] = alloc.alloc(out_bytes)
        _keep(pb, op, consumers, addr[op.name], eb)
        src = op.inputs[0] if op.inputs else graph_input
        if op.gemm_shape() is None:
            deps = [ready.get(name) for name in (op.inputs or (graph_input,))]
            deps = [d for d in deps if d is not None]
            if _on_vector_engine(op, chip):
                plan = vector_plan(op, chip)
                b_addr = _second_operand(op, addr, alloc, graph_input, plan)
                ready[op.name] = emit_vector_op(pb, index, op, plan, chip,
                                                a_addr=addr.get(src, 0), b_addr=b_addr,
                                                c_addr=addr[op.name], input_deps=deps)
                _to_host(pb, index, op, consumers, chip, addr, ready, eb)
            else:
                ready[op.name] = max(deps) if deps else None
            planned_resident_input = False
            pb.layers.append(LayerSchedule(index, op.name, type(op).__name__, first_cmd,
                                           len(pb), 0, None))
            continue
        problem = tile_problem(op, chip, options)
        epi = None
        c_addr = addr[op.name]
        if group is not None:       # an epilogue (and pool) on the output tiles
            epi, extra = epilogue(group, by_name, chip, addr, ready, alloc)
            problem = replace(problem, out_extra_bytes=extra)
            tail = group.members[-1]     # the tensor the group stores
            c_addr = addr[tail] = alloc.alloc(by_name[tail].output_bytes(eb))
            _keep(pb, by_name[tail], consumers, c_addr, eb)
        input_resident = planned_resident_input and src in resident
        # Can this op's output stay on chip for the next op?
        keep_out = False
        nxt = index + 1
        if (options.keep_on_chip and group is None and nxt in matrix
                and consumers[op.name] == [ops[nxt].name]
                and _tiled_alone(groups.get(ops[nxt].name), ops[nxt].name)
                and ops[nxt].inputs and ops[nxt].inputs[0] == op.name):
            nxt_problem = tile_problem(ops[nxt], chip, options)
            keep_out = _fits_resident_input(nxt_problem, chip, options)
        choice = None
        used = splits[op.name].cores if splits is not None else 1
        if keep_out:
            try:
                choice = _tile(problem, chip, options, input_resident, True, used)
            except ValueError:
                keep_out = False
        if choice is None:
            choice = _tile(problem, chip, options, input_resident, False, used)
        b_src = op.inputs[1] if len(op.inputs) >= 2 else None
        # pre-tiled weights (edge slack), as stored: a sparse format may exceed dense
        b_addr = addr[b_src] if b_src is not None else alloc.alloc(
            max(op.weight_bytes(eb), problem.b_tile(problem.k, problem.n, problem.count)) * 2)
        if b_src is None:
            pb.tensors[f"{op.name}.weights"] = b_addr
        held = (splits is not None and isinstance(op, Gemm) and op.w_in_l2
                and place.hold(b_addr, op.weight_bytes(eb) * 2, whole[op.name].weight_bytes(eb)))
        a_ready = [ready.get(src)]
        if b_src is not None:
            a_ready.append(ready.get(b_src))
        last_compute, last_store = _emit(
            pb, index, problem, choice, chip, options, alloc,
            a_addr=addr.get(src, 0), b_addr=b_addr, c_addr=c_addr,
            input_deps=[d for d in a_ready if d is not None],
            input_resident=resident.get(src) if input_resident else None,
            output_resident=keep_out, epi=epi)
        if held:
            place.release(b_addr)
        if keep_out:
            resident[op.name] = last_compute
            ready[op.name] = last_compute
        else:
            ready[op.name] = last_store
        out_name = op.name
        if group is not None:       # the group's tensors: only the last one is stored
            for name in group.fused:
                addr.setdefault(name, addr[op.name])
                ready[name] = last_store
            out_name = group.members[-1]
        planned_resident_input = keep_out
        _to_host(pb, index, by_name[out_name], consumers, chip, addr, ready, eb)
        pb.layers.append(LayerSchedule(
            index, op.name, type(op).__name__, first_cmd, len(pb), op.macs,
            Tiling(lowering=problem.lowering, group_tile=choice.group_tile,
                   m_tile=choice.m_units * problem.unit_pixels, n_tile=choice.n_tile,
                   k_tile=choice.k_units * problem.k_unit, order=choice.order, tiles=choice.tiles,
                   ifmap_tile_bytes=choice.ifmap_bytes, filter_tile_bytes=choice.filter_bytes,
                   ofmap_tile_bytes=choice.ofmap_bytes, input_resident=input_resident,
                   output_resident=keep_out, estimated_cycles=choice.estimated_cycles,
                   dataflow=None if choice.dataflow is None else choice.dataflow.value,
                   nm=problem.nm, nm_rows=problem.nm_rows, act_zeros=problem.act_zeros,
                   weight_store=problem.b_store),
            _label(group)))
    if splits is not None:      # each layer: its cores, and the whole op's MACs
        pb.settle()
        pb.layers = [replace(ls, cores=splits[ls.name].cores,
                             macs=whole[ls.name].macs if ls.name in whole else 0)
                     for ls in pb.layers]
    pb.tensors.update(addr)
    return pb.build()


def _keep(pb: ProgramBuilder, op, consumers: dict, addr: int, eb: int) -> None:
    """On a chip with an L2: ``op``'s output (at ``addr``) may stay in it for its readers."""
    if pb.placement is not None and (consumers[op.name] or pb.placement.keep_final):
        pb.placement.begin(pb.placement.split, (addr, op.output_bytes(eb)))


def _to_host(pb: ProgramBuilder, index: int, op, consumers: dict, chip: ChipConfig, addr: dict,
             ready: dict, eb: int) -> None:
    """Send ``op``'s output back over the link when no op reads it (``model_output = host``)."""
    if not consumers[op.name] and chip.model_output == "host":
        pb.transfer(Kind.HOST_OUT, Operand.OFMAP, Location.HOST, index,
                    (addr[op.name], 1, 0, 1, 0, op.output_bytes(eb)), deps=[ready[op.name]])


def _on_vector_engine(op, chip: ChipConfig) -> bool:
    """The op runs on the vector engine (module docstring)."""
    return not chip.vector.ideal and is_vector_op(op)


def _fusable_groups(graph: Graph, chip: ChipConfig, options: CompileOptions) -> dict:
    """The fused groups (:func:`compiler.fusion.find_groups`) this chip can run: none without
    fusion or on an ideal vector engine (whose ops cost nothing anyway); a group whose tiles do
    not fit the scratchpads (a pool on a grouped conv) runs unfused, or loses its pool."""
    if not options.fusion or chip.vector.ideal:
        return {}
    by_name = {op.name: op for op in graph.ops}
    readers = graph.readers()
    out: dict[str, FusedGroup] = {}
    patterns = options.fusion if isinstance(options.fusion, tuple) else PATTERNS
    for group in {g.anchor: g for g in find_groups(graph, patterns).values()}.values():
        members = group.members
        try:
            if group.kind == "attention":
                attention_plan(by_name[members[0]], by_name[members[-1]], chip)
            elif group.kind == "add_norm":
                add_norm_plan(by_name[members[0]], by_name[members[1]], chip,
                              len(readers[members[0]]) > 1)
            elif (group.kind == "conv_pool"       # pools per output tile: one GEMM (no groups)
                  and tile_problem(by_name[members[0]], chip, options).count != 1):
                members = members[:-1]
                group = FusedGroup("epilogue", group.anchor, members)
        except TilingError:
            continue
        if len(members) > 1:
            for m in members:
                out[m] = group
    return out


def _label(group: FusedGroup | None) -> str | None:
    """A fused op's :attr:`~hw.program.LayerSchedule.fused`."""
    return None if group is None else f"{group.kind}:{group.anchor}"


def _tiled_alone(group: FusedGroup | None, name: str) -> bool:
    """The op's input is read through its own GEMM tiles (it may then stay on chip): not a
    fused attention, nor an op fused into another."""
    return group is None or (group.anchor == name and group.kind in ("epilogue", "conv_pool"))


def _emit_group(pb: ProgramBuilder, index: int, group: FusedGroup, by_name: dict,
                readers: dict, chip: ChipConfig, options: CompileOptions, alloc: _Allocator,
                addr: dict, ready: dict, graph_input: str) -> LayerSchedule:
    """Emit a fused attention or add + norm group; sets every member's ``addr`` and
    ``ready``; returns the anchor's layer schedule (its command range is set by the caller)."""
    eb = chip.elem_size
    members = [by_name[m] for m in group.members]
    tail = members[-1]

    def deps(name):
        d = ready.get(name)
        return [] if d is None else [d]

    if group.kind == "attention":
        scores, context = members[0], tail
        plan = attention_plan(scores, context, chip)
        q, k = (scores.inputs + (graph_input, graph_input))[:2]
        v = context.inputs[1]
        addr[tail.name] = alloc.alloc(tail.output_bytes(eb))
        _keep(pb, tail, readers, addr[tail.name], eb)
        df = chip.array.dataflow
        _, last = emit_attention(
            pb, index, plan, chip,
            lambda m, n, k_: _edge_strides(df, options, m, n, k_, chip.array.precision.bits),
            q_addr=addr[q], k_addr=addr[k], v_addr=addr[v], o_addr=addr[tail.name],
            q_deps=deps(q), k_deps=deps(k), v_deps=deps(v),
            extra=members[2].work() if len(members) == 4 else None)   # a dropout on P
        gemms = [m for m in members if m.gemm_shape() is not None]
        macs = sum(m.macs for m in gemms)
        # zero activations of the two products, weighted by their MACs
        zeros = sum(m.macs * options.act_zeros_of(m) for m in gemms) / macs
        tiling = Tiling(**attention_tiling_fields(plan, chip), act_zeros=zeros)
    else:
        add, norm = members
        store_sum = len(readers[add.name]) > 1
        plan = add_norm_plan(add, norm, chip, store_sum)
        a = add.inputs[0] if add.inputs else graph_input
        b = add.inputs[1] if len(add.inputs) >= 2 else graph_input
        if b not in addr:           # a residual with no producer in the graph: constants
            addr[b] = alloc.alloc(add.output_bytes(eb))
        if store_sum:
            addr[add.name] = alloc.alloc(add.output_bytes(eb))
        addr[norm.name] = alloc.alloc(norm.output_bytes(eb))
        _keep(pb, norm, readers, addr[norm.name], eb)
        last = emit_vector_op(
            pb, index, norm, plan, chip, a_addr=addr[a], b_addr=addr[b], c_addr=addr[norm.name],
            input_deps=deps(a) + deps(b), once_addr=alloc.alloc(max(1, plan.b_once_bytes)),
            sum_addr=addr[add.name] if store_sum else None)
        macs, tiling = 0, None
    for m in group.members:
        addr.setdefault(m, addr[tail.name])
        ready[m] = last
    return LayerSchedule(index, group.anchor, type(members[0]).__name__, 0, 0, macs, tiling)


def shortcut_is_input(op) -> bool:
    """A same-size binary op with one producer reads the graph input as its second operand (a
    residual add whose shortcut is the network input lists only its other producer)."""
    return isinstance(op, Binary) and len(op.inputs) == 1 and op.other_elements == op.elements


def _second_operand(op, addr: dict, alloc: _Allocator, graph_input: str, plan) -> int:
    """Where a vector op's second operand lives: its second producer's output, the graph input
    (a residual add whose shortcut is the network input lists only its other producer), or a
    region of constants (a norm's scale and shift, a broadcast bias)."""
    if len(op.inputs) >= 2:
        return addr[op.inputs[1]]
    if shortcut_is_input(op) and graph_input in addr:
        return addr[graph_input]
    return alloc.alloc(max(plan.b_once_bytes, nbytes(op.output_elements, plan.b_bits), 1))


def _tile(problem: TileProblem, chip: ChipConfig, options: CompileOptions, input_resident: bool,
          output_resident: bool, used: int = 1) -> TileChoice:
    """The op's tiling: the tiler's, or the mapper's when ``options.map`` is set (on a
    multi-core chip at the rate one of the ``used`` cores streams at, as it chose the split:
    :func:`compiler.backends.multicore.share_bytes_per_cycle`)."""
    if options.map is None or problem.packed_groups:
        # (a conv whose groups share packed bytes takes every group per tile: the tiler's)
        return _tiled(problem, chip, input_resident, output_resident, options.loop_order,
                      options.objective)
    rate = share_bytes_per_cycle(chip, used) if chip.multicore else None
    try:
        return _mapped(replace(problem, name=""), chip, options.map, options.tech,
                       options.loop_order, input_resident, output_resident, rate)
    except TilingError:
        # the same message, naming the op
        choose_tiling(problem, chip, input_resident=input_resident,
                      output_resident=output_resident, order=options.loop_order)
        raise


def _tiled(problem: TileProblem, chip: ChipConfig, input_resident: bool, output_resident: bool,
           order: str | None, objective: str) -> TileChoice:
    """The tiler's choice, memoised per op shape: identical layers (long SCALE-Sim topologies
    repeat a few shapes thousands of times) are tiled once. The choice depends on the shape,
    not the name; a shape that does not fit is tiled again under its name for the message."""
    try:
        return _tiled_shape(replace(problem, name=""), chip, input_resident, output_resident,
                            order, objective)
    except ValueError:
        return choose_tiling(problem, chip, input_resident=input_resident,
                             output_resident=output_resident, order=order, objective=objective)


@functools.lru_cache(maxsize=4096)
def _tiled_shape(problem: TileProblem, chip: ChipConfig, input_resident: bool,
                 output_resident: bool, order: str | None, objective: str) -> TileChoice:
    return choose_tiling(problem, chip, input_resident=input_resident,
                         output_resident=output_resident, order=order, objective=objective)


@functools.lru_cache(maxsize=256)
def _mapped(problem: TileProblem, chip: ChipConfig, mode: str, tech: str, order: str | None,
            input_resident: bool, output_resident: bool,
            rate: float | None = None) -> TileChoice:
    """The mapper's choice, memoised per op shape (networks repeat layer shapes); ``rate``:
    the bytes a cycle its tiles stream at (default the DRAM's)."""
    from compiler.mapper import map_op
    dataflows = tuple(Dataflow) if chip.array.reconfigurable else None
    choice = map_op(problem, chip, MAP_MODES[mode], tech=tech, orders=order, dataflows=dataflows,
                    input_resident=input_resident, output_resident=output_resident,
                    bytes_per_cycle=rate).tile_choice
    # The dataflow travels with the layer only when the array can switch it.
    return replace(choice, dataflow=choice.dataflow if chip.array.reconfigurable else None)


def split_score(chip: ChipConfig, options: CompileOptions | None):
    """The mapper's ranking of an op's splits (:func:`compiler.backends.multicore.choose_split`'s
    ``score``) when ``options.map`` is set on a multi-core chip, else None (the estimate's)."""
    if options is None or options.map is None or chip.cores == 1:
        return None
    return functools.partial(_split_key, chip=chip, options=options)


def _split_key(op, share, split, *, chip: ChipConfig, options: CompileOptions):
    if tile_problem(share, chip, options).packed_groups:
        return 0.0, 0.0     # the tiler maps it (_tile): every split ties, the estimate's first
    return _mapper_key(share, split.cores, split.k,
                       -(-op.output_elements // split.cores) if split.k > 1 else 0, chip,
                       options)


@functools.lru_cache(maxsize=4096)
def _mapper_key(share, used: int, parts_k: int, sum_elements: int, chip: ChipConfig,
                options) -> tuple[float, float]:
    """``(objective, latency)`` of a split whose share ``share`` runs on ``used`` cores: the
    mapper's best mapping of the share at one core's rate
    (:func:`~compiler.backends.multicore.share_bytes_per_cycle`), its energy times the cores, and for a K split the sum's ``sum_elements`` per core (``k``
    partials read and one written per element) at that rate and the DRAM's energy per bit."""
    from compiler.mapper import map_op
    from hw.energy import load_technology
    from hw.energy.rates import HardwareFacts, energy_rates
    objective = MAP_MODES[options.map]
    rate = share_bytes_per_cycle(chip, used)
    dataflows = tuple(Dataflow) if chip.array.reconfigurable else None
    best = map_op(tile_problem(share, chip, options), chip, objective, tech=options.tech,
                  orders=options.loop_order, dataflows=dataflows, keep=1,
                  bytes_per_cycle=rate).best
    latency, energy = float(best.latency_cycles), best.energy_j * used
    if parts_k > 1:
        nbytes = size_bytes((parts_k + 1) * sum_elements, chip.elem_size)
        latency += nbytes / rate
        energy += nbytes * used * 8 * energy_rates(
            load_technology(options.tech), HardwareFacts.systolic(chip)).dram_pj_per_bit * 1e-12
    seconds = latency / chip.clock_hz
    value = {"latency": latency, "energy": energy, "edp": energy * seconds}[objective]
    return value, latency


def _fits_resident_input(p: TileProblem, chip: ChipConfig, options: CompileOptions) -> bool:
    if p.input_bytes > chip.ifmap_sram.capacity_bytes:
        return False
    try:
        _tiled(p, chip, True, False, options.loop_order, options.objective)
    except ValueError:
        return False
    return True


def _edge_strides(df: Dataflow, options: CompileOptions, mt: int, nt: int, kt: int,
                  bits: int) -> tuple[int, int]:
    """Strides of the vectors the left and top edges read per cycle (see CompileOptions):
    contiguous when ``matched``, else as in the row-major A and B tiles. In bytes; in bits for
    operands packed narrower than a byte (:class:`~hw.program.Program`)."""
    unit = bits if bits % 8 else bits // 8
    if options.sram_layout == "matched":
        return unit, unit
    left, top = geometry(df).row_major_edge_strides(mt, nt, kt)
    return left * unit, top * unit


def _emit(pb: ProgramBuilder, layer: int, p: TileProblem, choice: TileChoice, chip: ChipConfig,
          options: CompileOptions, alloc: _Allocator, *, a_addr: int, b_addr: int, c_addr: int,
          input_deps: list[int], input_resident: int | None, output_resident: bool,
          epi: Epilogue | None = None):
    """Walk the loop nest of one op and append its commands. Returns (last compute, last store).
    ``epi``: a fused epilogue run on each finished output tile before it is stored."""
    bits, ab = p.elem_bits, p.acc_bytes
    double = {name: chip.sram(name).double_buffer for name in ("ifmap", "filter", "ofmap")}
    mtiles = p.m_tiles(choice.m_units)
    ntiles = tile_sizes(p.n, choice.n_tile)
    ktiles = tile_sizes(p.k_units, choice.k_units)
    gtiles = tile_sizes(p.count, choice.group_tile)
    trips = {"m": len(mtiles), "n": len(ntiles), "k": len(ktiles)}
    flow = choice.dataflow or chip.array.dataflow
    # row-wise N:M: a compute per N, cut at the folds where the array spreads N in space (OS,
    # WS: its columns), exactly where it streams N in time (IS)
    fold = geometry(flow).per_dim(chip.array.rows, chip.array.cols, 1)[GemmDim.N]
    segments = functools.partial(p.n_segments, fold=fold)
    psum_addr = None
    if trips["k"] > 1:
        loops = [d for d in choice.order if trips[d] > 1]
        if loops[-1] != "k":
            tile_bytes = choice.m_units * p.unit_pixels * choice.n_tile * ab
            psum_addr = alloc.alloc(trips["m"] * trips["n"] * tile_bytes)
    # Per-buffer bookkeeping: which tile each half holds and who used it last.
    slots = {"a": [None, None], "b": [None, None]}
    last_use = {"a": [None, None], "b": [None, None], "c": [None, None]}
    cur = {"a": 0, "b": 0, "c": 0}
    load_of = {"a": None, "b": None}
    c_slot_free = [None, None]      # command after which the C half is free (store done)
    c_key = None
    c_visits: dict[tuple, int] = {}
    last_compute = None
    last_store = None
    move_cmd = None
    if input_resident is not None:
        in_bytes = p.input_bytes
        move_cmd = pb.transfer(Kind.MOVE, Operand.IFMAP, Location.ONCHIP, layer,
                               (0, 1, 0, 1, 0, in_bytes), deps=[input_resident])
    for gi, (g0, gsz) in enumerate(gtiles):
        for idx in loop_nest(choice.order, trips):
            mi, ni, ki = idx["m"], idx["n"], idx["k"]
            m_first, m_units, a_rows = mtiles[mi]
            n0, nsz = ntiles[ni]
            k0, ksz = ktiles[ki]
            mt = m_units * p.unit_pixels
            kt = ksz * p.k_unit
            tile = (gi, mi, ni, ki)
            # --- A (ifmap) tile
            a_key = (gi, mi, ki)
            if move_cmd is not None:
                a_load = move_cmd
            elif a_key != slots["a"][cur["a"]]:
                if slots["a"][cur["a"]] is not None and double["ifmap"]:
                    cur["a"] ^= 1
                s = cur["a"]
                deps = list(input_deps) + [last_use["a"][s]]
                a_load = pb.transfer(Kind.LOAD, Operand.IFMAP, Location.DRAM, layer,
                                     _a_box(p, a_addr, g0, gsz, m_first, m_units, a_rows, k0, ksz),
                                     deps=deps, tile=tile)
                slots["a"][s] = a_key
                load_of["a"] = a_load
            a_load = move_cmd if move_cmd is not None else load_of["a"]
            # --- B (filter) tile
            b_key = (gi, ki, ni)
            if b_key != slots["b"][cur["b"]]:
                if slots["b"][cur["b"]] is not None and double["filter"]:
                    cur["b"] ^= 1
                s = cur["b"]
                deps = [last_use["b"][s]] + (list(input_deps) if not p.b_is_weight else [])
                box = _b_box(p, b_addr, g0, gsz, k0, ksz, n0, nsz, trips, choice,
                             segments(n0, nsz))
                load_of["b"] = pb.transfer(Kind.LOAD, Operand.FILTER, Location.DRAM, layer, box,
                                           deps=deps, tile=tile)
                slots["b"][s] = b_key
            # --- C (ofmap) tile
            key = (gi, mi, ni)
            cdeps = [a_load, load_of["b"]]
            if key != c_key:
                if c_key is not None and double["ofmap"]:
                    cur["c"] ^= 1
                s = cur["c"]
                cdeps.append(c_slot_free[s])
                c_was_free = c_slot_free[s]
                visits = c_visits.get(key, 0)
                if visits and psum_addr is not None:
                    cdeps.append(pb.transfer(
                        Kind.LOAD, Operand.PSUM, Location.DRAM, layer,
                        _psum_box(psum_addr, p, choice, mi, ni, trips, mt, nsz, gsz, ab),
                        deps=[c_slot_free[s], last_store], tile=tile))
                elif not visits and epi is not None and epi.preload:
                    # the residual initialises the accumulators (C = A B + D)
                    cdeps.append(epi.load_residual(
                        pb, layer, _c_box(p, epi.residual_addr, g0, gsz, m_first, m_units, n0, nsz),
                        c_slot_free[s], tile))
                c_visits[key] = visits + 1
                c_key = key
            for s0, ssz, nm in segments(n0, nsz):    # one compute, or one per N (row-wise)
                left, top = _edge_strides(flow, options, mt, ssz, kt, bits)
                comp = pb.compute(layer, gsz, mt, ssz, kt, left, top, deps=cdeps, tile=tile,
                                  nm_n=_nm_n(p, nm))
            last_use["a"][cur["a"]] = comp
            last_use["b"][cur["b"]] = comp
            last_compute = comp
            # Leaving the C tile after this step?
            last_k = ki == trips["k"] - 1
            leaving = _leaves_c_tile(choice.order, trips, idx)
            if last_k and epi is not None:
                last_store = epi.emit_tile(
                    pb, layer, p, comp, tile, c_was_free, c_addr,
                    lambda base, e: _c_box(p if e == p.elem_bytes else _with_bytes(p, e), base,
                                           g0, gsz, m_first, m_units, n0, nsz),
                    m_first, m_units, n0, nsz, gsz)
                c_slot_free[cur["c"]] = last_store
            elif last_k and not output_resident:
                last_store = pb.transfer(Kind.STORE, Operand.OFMAP, Location.DRAM, layer,
                                         _c_box(p, c_addr, g0, gsz, m_first, m_units, n0, nsz),
                                         deps=[comp], tile=tile)
                c_slot_free[cur["c"]] = last_store
            elif last_k:
                c_slot_free[cur["c"]] = comp
            elif leaving:
                last_store = pb.transfer(
                    Kind.STORE, Operand.PSUM, Location.DRAM, layer,
                    _psum_box(psum_addr, p, choice, mi, ni, trips, mt, nsz, gsz, ab),
                    deps=[comp], tile=tile)
                c_slot_free[cur["c"]] = last_store
    return last_compute, (last_store if last_store is not None else last_compute)


def _nm_n(p: TileProblem, nm) -> int:
    """A compute's ``nm_n`` (:class:`~hw.program.Program`): 0, the layer's N:M, or for
    row-wise N:M the N its segment runs at (M: dense)."""
    if p.nm_rows is None:
        return 0
    return p.nm[1] if nm is None else nm[0]


@functools.lru_cache(maxsize=64)
def _with_bytes(p: TileProblem, elem_bytes: int) -> TileProblem:
    """``p`` with another element size (an epilogue that casts its output)."""
    return replace(p, elem_bytes=elem_bytes)


def _leaves_c_tile(order: str, trips: dict[str, int], idx: dict[str, int]) -> bool:
    """True when the next step of the nest works on another (m, n) tile (or there is none)."""
    nxt = dict(idx)
    for d in reversed(order):          # increment like an odometer, resetting inner loops
        if nxt[d] + 1 < trips[d]:
            nxt[d] += 1
            return (nxt["m"], nxt["n"]) != (idx["m"], idx["n"])
        nxt[d] = 0
    return True


def _a_box(p: TileProblem, base: int, g0: int, gsz: int, m_first: int, m_units: int,
           a_rows: int, k0: int, ksz: int):
    """The DMA box of an A tile. Rows (pixels for ``direct``) of packed operands are padded to
    whole bytes and tiles cut them at whole bytes (:mod:`hw.packing`)."""
    bits = p.elem_bits
    if p.lowering == "direct":
        c_total = p.count * p.in_channels
        image, row = divmod(m_first, p.out_h)
        top = max(0, row * p.stride_h - p.pad_top) if m_units < p.out_h else 0
        pixel = nbytes(c_total, bits)
        addr = (base + ((image * p.in_h + top) * p.in_w) * pixel
                + (g0 * p.in_channels + k0) * bits // 8)
        if gsz * ksz == c_total:
            return addr, 1, 0, 1, 0, a_rows * p.in_w * pixel
        return addr, a_rows, p.in_w * pixel, p.in_w, pixel, nbytes(gsz * ksz, bits)
    row_bytes = nbytes(p.k, bits)
    addr = base + (g0 * p.m + m_first) * row_bytes + k0 * bits // 8
    if ksz == p.k:
        if m_units == p.m:
            return addr, 1, 0, 1, 0, gsz * p.m * row_bytes
        return addr, 1, 0, 1, 0, m_units * row_bytes
    return addr, 1, 0, m_units, row_bytes, nbytes(ksz, bits)


def _b_box(p: TileProblem, base: int, g0: int, gsz: int, k0: int, ksz: int, n0: int, nsz: int,
           trips, choice: TileChoice, segments):
    kt = ksz * p.k_unit
    if p.b_is_weight:
        block = p.b_tile(choice.k_units * p.k_unit, choice.n_tile)
        index = (g0 * trips["k"] + k0 // choice.k_units) * trips["n"] + n0 // choice.n_tile
        # one pre-tiled block per group, each whole bytes (the tiler counts the same)
        if p.nm_rows is None:
            return base + index * block, 1, 0, 1, 0, gsz * p.b_tile(kt, nsz)
        # row-wise N:M: each segment stored at its own N (the block keeps the largest's room)
        stored = gsz * sum(p.b_bytes_of(kt, ssz, 1, nm) for _, ssz, nm in segments)
        return base + index * block, 1, 0, 1, 0, stored
    bits = p.elem_bits          # a second activation: rows of n, packed rows whole bytes
    row = nbytes(p.n, bits)
    addr = base + (g0 * p.k + k0) * row + n0 * bits // 8
    if nsz == p.n:
        return addr, 1, 0, 1, 0, gsz * kt * row
    return addr, 1, 0, kt, row, nbytes(nsz, bits)


def _c_box(p: TileProblem, base: int, g0: int, gsz: int, m_first: int, m_units: int, n0: int,
           nsz: int):
    bits = p.elem_bits          # packed rows (pixels) padded to whole bytes
    pixels = m_units * p.unit_pixels
    n_total = p.count * p.n
    if p.lowering == "direct":
        pixel = nbytes(n_total, bits)
        addr = base + m_first * p.out_w * pixel + (g0 * p.n + n0) * bits // 8
        if gsz * nsz == n_total:
            return addr, 1, 0, 1, 0, pixels * pixel
        return addr, 1, 0, pixels, pixel, nbytes(gsz * nsz, bits)
    row = nbytes(p.n, bits)
    addr = base + (g0 * p.m + m_first) * row + n0 * bits // 8
    if nsz == p.n:
        return addr, 1, 0, 1, 0, gsz * pixels * row
    return addr, 1, 0, pixels, row, nbytes(nsz, bits)


def _psum_box(base: int, p: TileProblem, choice: TileChoice, mi: int, ni: int, trips, mt: int,
              nsz: int, gsz: int, ab: int):
    tile_bytes = choice.m_units * p.unit_pixels * choice.n_tile * ab
    return base + (mi * trips["n"] + ni) * tile_bytes, 1, 0, 1, 0, gsz * mt * nsz * ab
