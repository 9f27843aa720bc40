"""Many cores: split each op over the cores of a chip, and place its transfers in the shared L2.

Split. Every op is divided into equal *shares*, one per core: a matrix op along its output rows
(``m``: GEMM rows; a convolution's images, or its output rows when there are fewer images than
parts), its output columns (``n``: GEMM columns, a convolution's output channels) and its
independent GEMMs (``g``: a batched GEMM's batch, attention heads, a convolution's groups); a
vector op along its rows (a pooling along its images or channels, an element-wise op along its
elements). A GEMM whose output has fewer array-sized tiles than the chip has cores may also be
split along K (``k``: split-K, as cuBLAS does): each core computes partial sums over its slice
of K, and a vector op after it (:func:`share_graph` adds it, :data:`REDUCE_SUFFIX`) adds the
``k`` partial sums of each output element. A share is ``ceil(extent / parts)`` along each split
dimension. The split uses ``cores_used = parts_m x parts_n x parts_g x parts_k <= cores`` cores
and is the one minimising::

    max(share compute cycles, share bytes / (per-core network bandwidth x 0.8))

(a K split then adds its sum, ``(parts_k + 1) x outputs / cores_used`` elements over the same
bandwidth; the share's compute from the systolic timing engine, its bytes read and written
once, the tiler's streaming efficiency :data:`~compiler.backends.systolic_tiling.DRAM_EFFICIENCY`; ties:
fewer bytes on the network in all, then fewer cores, then the smaller ``(m, n, g, k)``): the choice
is deterministic and does not depend on the L2, so adding an L2 only changes where bytes come
from. Ops of a fused group take their anchor's split, so the group still fuses.

Symmetric cores. The cores of a split run the same commands on their own data, in lockstep, so
the compiler emits the commands of ONE core's share (the largest; the other cores' shares are
costed as that one) and the layer's :attr:`~hw.program.LayerSchedule.cores` says how many
cores run them. The executor books every shared resource (the L2, the network, DRAM) for all of
them: a transfer of ``b`` bytes is ``b x cores`` bytes on the network, and in DRAM it is
``b x copies``, where ``copies`` counts the distinct tiles the cores fetch (:class:`Placement`):
an ``m``-split shares the weights (B) between the cores of a row, an ``n``-split the inputs (A).
A chip with one core and no L2 compiles exactly as before.

L2 (:class:`Placement`, the compiler's bookkeeping of what the L2 holds; a least-recently-used
set of whole tiles and tensors, each as big as all the cores' copies of it):

* a load of a tile the L2 holds, or of bytes of a tensor kept there, is served by the L2
  (``Location.L2``); otherwise it comes from DRAM and the tile is kept for its next use (its
  other cores then read it from the L2: one DRAM copy per distinct tile);
* an op's output stays in the L2 (its stores go to ``Location.L2``, no DRAM write) when it has
  readers, all of it fits half the L2 and the chip keeps outputs (``l2.keep_outputs``); a kept
  tensor evicted before its readers ran is written back to DRAM then;
* without an L2 every core fetches its own copy from DRAM (``copies = cores``).
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, replace

from compiler.backends.systolic_tiling import DRAM_EFFICIENCY
from compiler.fusion import find_groups
from compiler.ir import Binary, Conv2d, Gemm, Graph
from compiler.ir.vector import Eltwise, Pool, _Elementwise, _Rows
from hw.chip import ChipConfig
from hw.packing import granule, size_bytes
from hw.program import Kind, Location, Operand
from hw.systolic.mapping import K_CYCLES
from hw.systolic.timing import tile_counters

__all__ = ["Split", "ONE", "REDUCE_SUFFIX", "MAPPER_SPLITS", "choose_split", "op_estimate",
           "share_bytes_per_cycle", "share_graph", "with_sums", "Placement"]


@dataclass(frozen=True)
class Split:
    """Parts along output rows (``m``), output columns (``n``), independent GEMMs (``g``) and
    the reduction dimension (``k``: each core sums a slice of K into partial sums, which a
    vector op adds up, :data:`REDUCE_SUFFIX`)."""

    m: int = 1
    n: int = 1
    g: int = 1
    k: int = 1

    @property
    def cores(self) -> int:
        return self.m * self.n * self.g * self.k

    def copies(self, operand: int) -> int:
        """Distinct tiles the cores fetch of ``operand`` (module docstring): inputs differ along
        ``m``, ``g`` and ``k``, weights along ``n``, ``g`` and ``k``, outputs everywhere."""
        if operand == Operand.IFMAP:
            return self.m * self.g * self.k
        if operand == Operand.FILTER:
            return self.n * self.g * self.k
        return self.cores


#: A K-split op ``X`` becomes ``X`` (each core's partial sums over its slice of K) and the
#: vector op ``X`` + this suffix that adds the ``k`` partial sums of every output element,
#: split over the same cores; ``X``'s readers read the sum.
REDUCE_SUFFIX = ".ksum"
#: Smallest slice of K a core takes in a K split (elements).
MIN_K_SHARE = 1024


#: One core does it all.
ONE = Split()


def _values(limit: int) -> list[int]:
    """Part counts worth trying up to ``limit``: every ``floor(limit / i)`` (the counts that
    use the cores best for each count of the other dimensions), ascending."""
    return sorted({limit // i for i in range(1, limit + 1)})


def _matrix_extents(op) -> tuple[int, int, int, int, int, int]:
    """``(g, m_units, m_unit_elems, n, k, n_parts)``: what a matrix op splits along (a grouped
    convolution keeps each group's channels together: ``n_parts = 1``)."""
    if isinstance(op, Conv2d):
        n = op.out_channels // op.groups
        k = op.in_channels // op.groups * op.kernel_h * op.kernel_w
        return op.groups, op.batch * op.out_h, op.out_w, n, k, n if op.groups == 1 else 1
    return op.batch, op.m, 1, op.n, op.k, op.n


@functools.lru_cache(maxsize=4096)
def _ranked_splits(g: int, mu: int, unit: int, n: int, k: int, n_parts: int, k_split: bool,
                   chip: ChipConfig) -> tuple[Split, ...]:
    """Every split worth trying, best estimate first (module docstring's key)."""
    cores = chip.cores
    keyed = []
    for pg in _values(min(cores, g)):
        for pm in _values(min(cores // pg, mu)):
            # K parts first (then the columns take the cores left), or none
            k_parts = min(cores // (pg * pm), k // MIN_K_SHARE) if k_split else 1
            for pk in _values(max(1, k_parts)):
                pn = max(1, min(cores // (pg * pm * pk), n_parts))
                split = Split(m=pm, n=pn, g=pg, k=pk)
                est, share_bytes = _estimate(g, mu, unit, n, k, split, chip)
                used = split.cores
                keyed.append(((est, used * share_bytes, used, pm, pn, pg, pk), split))
    keyed.sort(key=lambda item: item[0])
    return tuple(dict.fromkeys(split for _, split in keyed))


def _estimate(g: int, mu: int, unit: int, n: int, k: int, split: Split,
              chip: ChipConfig) -> tuple[float, int]:
    """``(estimated cycles, share bytes)`` of a matrix op's share under ``split`` (module
    docstring)."""
    arr, eb = chip.array, chip.elem_size
    gs, ms, ns, ks = (-(-g // split.g), -(-mu // split.m) * unit, -(-n // split.n),
                      -(-k // split.k))
    compute = int(tile_counters(arr, ms, ns, ks, gs)[K_CYCLES])
    used = split.cores
    share_bytes = size_bytes(gs * (ms * ks + ks * ns + ms * ns), eb)
    per_core = _per_core_bandwidth(chip, used)
    est = max(compute, share_bytes / per_core)
    if split.k > 1:           # then the sum: k partials read, one output written per element
        sum_bytes = size_bytes((split.k + 1) * -(-g * mu * unit * n // used), eb)
        share_bytes += sum_bytes
        est += sum_bytes / per_core
    return est, share_bytes


def _network_share(chip: ChipConfig, used: int) -> float:
    """Bytes a cycle the network carries for one of ``used`` cores: its port or its share of
    the whole network, whichever is less."""
    return min(chip.noc.link_bytes_per_cycle, chip.noc.aggregate_bytes_per_cycle(used) / used)


def _per_core_bandwidth(chip: ChipConfig, used: int) -> float:
    """Bytes a cycle one of ``used`` cores streams: its network share at the tiler's streaming
    efficiency."""
    return _network_share(chip, used) * DRAM_EFFICIENCY


def choose_split(op, chip: ChipConfig, k_split: bool = True, score=None) -> Split:
    """The split of ``op`` over ``chip``'s cores (module docstring); ``k_split=False`` never
    splits K (a fused group's anchor: its epilogue needs whole sums). ``score``, if given,
    ranks a matrix op's :data:`MAPPER_SPLITS` best-estimated splits instead of the estimate:
    ``score(op, share, split)`` is a sortable key, lower is better (the mapper's:
    :func:`compiler.backends.systolic.split_score`)."""
    if chip.cores == 1:
        return ONE
    if op.gemm_shape() is not None:
        g, mu, unit, n, k, n_parts = _matrix_extents(op)
        arr = chip.array
        # K is split only when the output has fewer array-sized tiles than the chip has cores
        # (as cuBLAS and CUTLASS choose split-K: otherwise the rows and columns fill them)
        few = g * -(-mu * unit // arr.rows) * -(-n // arr.cols) < chip.cores
        ranked = _ranked_splits(g, mu, unit, n, k, n_parts,
                                k_split and isinstance(op, Gemm) and few, chip)
        if score is None or len(ranked) == 1:
            return ranked[0]
        keys = [(score(op, _share(op, sp, g=granule(chip.array.precision.bits)), sp), i)
                for i, sp in enumerate(ranked[:MAPPER_SPLITS])]
        return ranked[min(keys)[1]]
    parts = min(chip.cores, _vector_units(op))
    return Split(m=max(1, parts))


#: Splits the mapper maps per op (the best-estimated ones): ``--map`` searches the split too.
MAPPER_SPLITS = 4


def share_bytes_per_cycle(chip: ChipConfig, used: int) -> float:
    """Bytes a cycle one of ``used`` cores streams tiles at: its network port, its share of the
    network, and its share of what is below the cores (the L2's bandwidth, or the DRAM's
    streaming rate), whichever is least (the mapper's rate for an op's share)."""
    from compiler.mapper.search import stream_bytes_per_cycle
    if chip.l2.present:
        below = chip.l2.bytes_per_cycle
    elif chip.dram.is_ideal:
        below = math.inf
    else:
        below = stream_bytes_per_cycle(chip.dram, chip.dma.max_outstanding, chip.clock_mhz)
    return min(_network_share(chip, used), below / used)


def op_estimate(op, chip: ChipConfig) -> float:
    """Estimated cycles of ``op`` split over ``chip``'s cores (:func:`choose_split`): a matrix
    op's :func:`_estimate` (its share's compute or bytes through its network port), a vector
    op's share of work on its core's vector unit or its share of bytes, whichever is longer
    (the stage planner's cost, :mod:`compiler.backends.stages`)."""
    split = choose_split(op, chip)
    if op.gemm_shape() is not None:
        g, mu, unit, n, k, _ = _matrix_extents(op)
        return _estimate(g, mu, unit, n, k, split, chip)[0]
    eb = chip.elem_size
    share = _share(op, split)
    moved = (share.input_bytes(eb) + share.output_bytes(eb)) / _per_core_bandwidth(
        chip, split.cores)
    work = _vector_cycles(share, chip) if hasattr(share, "work") else 0.0
    return max(work, moved)


def _vector_cycles(op, chip: ChipConfig) -> float:
    """Cycles one core's vector unit takes for ``op``'s per-element work (0 on an ideal
    vector engine)."""
    if chip.vector.ideal:
        return 0.0
    return sum(count * op.output_elements / chip.vector.ops_per_cycle(kind)
               for kind, count in op.work().per_element)


def _vector_units(op) -> int:
    """How many parts a vector op can be cut into."""
    if isinstance(op, Pool):
        return op.batch if op.batch > 1 else op.channels
    if isinstance(op, _Rows):
        return op.rows
    if isinstance(op, _Elementwise):
        return max(1, op.elements // 1024)   # at least a KiB-sized piece per core
    return 1


def _part(extent: int, parts: int, g: int) -> int:
    """One of ``parts`` shares of an innermost dimension of ``extent`` operands: whole bytes of
    operands packed ``g`` per byte (:func:`hw.packing.granule`; 1: a plain ceiling share)."""
    share = -(-extent // parts)
    return min(extent, -(-share // g) * g)


def _share(op, split: Split, fraction: float | None = None, g: int = 1):
    """``op``'s share under ``split`` (one core's part). ``fraction`` (of the elements) shares
    an element-wise op like the op it follows in a fused group. ``g``: operands per byte of a
    chip whose operands are packed (:mod:`hw.packing`): shares of a matrix op's innermost
    dimensions (N, K; a conv's output channels) are whole bytes."""
    if split.cores == 1 and fraction is None:
        return op
    if isinstance(op, Gemm):
        n = _part(op.n, split.n, g)
        return replace(op, batch=-(-op.batch // split.g), m=-(-op.m // split.m), n=n,
                       k=_part(op.k, split.k, g), **op.rows_for(n))
    if isinstance(op, Conv2d):
        cin, cout = op.in_channels // op.groups, op.out_channels // op.groups
        groups = _part(op.groups, split.g, g // math.gcd(g, math.gcd(cin, cout)))
        out_channels = cout * groups if op.groups > 1 else _part(op.out_channels, split.n, g)
        out = replace(op, groups=groups, in_channels=cin * groups,
                      out_channels=out_channels, **op.rows_for(out_channels))
        if split.m > 1 and op.batch >= split.m:
            return replace(out, batch=-(-op.batch // split.m))
        if split.m > 1:           # output rows: a middle share (no padding, its halo rows)
            rows = -(-op.out_h // split.m)
            in_h = min(op.in_h + op.pad_top + op.pad_bottom,
                       (rows - 1) * op.stride_h + op.dilation_h * (op.kernel_h - 1) + 1)
            return replace(out, in_h=in_h, pad_top=0, pad_bottom=0)
        return out
    if fraction is not None and isinstance(op, _Elementwise):
        return _elements(op, max(1, math.ceil(op.elements * fraction)))
    parts = split.cores
    if isinstance(op, Pool):
        if op.batch > 1:
            return replace(op, batch=-(-op.batch // parts))
        return replace(op, channels=-(-op.channels // parts))
    if isinstance(op, _Rows):
        return replace(op, rows=-(-op.rows // parts))
    if isinstance(op, _Elementwise):
        return _elements(op, -(-op.elements // parts))
    return op


def _elements(op, elements: int):
    """``op`` cut to ``elements`` outputs. A broadcast ``Binary`` (a bias row of
    ``other_elements``) keeps whole rows: a share of at least one row is rounded up to whole
    rows (so the row still divides it), a smaller share reads that part of one row."""
    if isinstance(op, Binary) and op.other_elements == op.elements:
        return replace(op, elements=elements, other_elements=elements)
    if isinstance(op, Binary) and op.other_elements is not None:
        row = op.other_elements
        if elements < row:
            return replace(op, elements=elements, other_elements=elements)
        return replace(op, elements=min(op.elements, -(-elements // row) * row))
    return replace(op, elements=elements)


def share_graph(graph: Graph, chip: ChipConfig, score=None) -> tuple[Graph, dict[str, Split]]:
    """One core's share of every op (module docstring) and each op's split. A fused group's
    members take the anchor's split; a group whose shares would no longer fuse (their sizes
    stop matching) runs on one core. ``score``: :func:`choose_split`'s (the mapper's, which
    then chooses among the best splits too)."""
    if chip.cores == 1:
        return graph, {op.name: ONE for op in graph.ops}
    pack = granule(chip.array.precision.bits)      # packed operands: shares of whole bytes
    by_name = {op.name: op for op in graph.ops}
    groups = {g.anchor: g for g in find_groups(graph).values()}
    splits: dict[str, Split] = {}
    shares: dict[str, object] = {}
    unfused: set[str] = set()
    for op in graph.ops:
        if op.name in splits:
            continue
        group = next((g for g in groups.values() if op.name in g.members), None)
        if group is None:
            splits[op.name] = choose_split(op, chip, score=score)
            shares[op.name] = _share(op, splits[op.name], g=pack)
            continue
        members = [by_name[m] for m in group.members]
        split = _group_split(group.kind, members, chip, score)
        if split is None:                    # unfused: each op split on its own
            for m in members:
                splits[m.name] = choose_split(m, chip, score=score)
                shares[m.name] = _share(m, splits[m.name], g=pack)
            unfused.add(group.anchor)
            continue
        anchor_share = _share(members[0], split, g=pack)
        fraction = (anchor_share.output_elements / members[0].output_elements
                    if members[0].output_elements else 1.0)
        for m in members:
            splits[m.name] = split
            shares[m.name] = (anchor_share if m is members[0]
                              else _share(m, split, None if m.gemm_shape() is not None
                                          or not isinstance(m, _Elementwise) else fraction,
                                          g=pack))
    out = Graph(graph.name, tuple(shares[op.name] for op in graph.ops), batch=graph.batch,
                tokens=graph.tokens)
    # groups must survive the split: any that does not runs unsplit (a K split is never in a
    # group: the ops of a group are ungrouped ones' splits only when they are the anchor's)
    after = {g.anchor: g for g in find_groups(out).values()}
    # (an unfused group is meant to break; if its shares happen to fuse again, the split
    # members would disagree about their cores: it too runs unsplit)
    broken = [g for a, g in groups.items() if (after.get(a) != g) != (a in unfused)]
    if broken:
        for g in broken:
            for m in g.members:
                splits[m] = ONE
                shares[m] = by_name[m]
        out = Graph(graph.name, tuple(shares[op.name] for op in graph.ops), batch=graph.batch,
                    tokens=graph.tokens)
    if any(sp.k > 1 for sp in splits.values()):
        out = _with_sums(out, by_name, splits, share=True)
    return out, splits


def with_sums(graph: Graph, chip: ChipConfig, score=None) -> Graph:
    """``graph`` with the whole sum op of every op :func:`share_graph` (with ``score``)
    splits along K: the ops a multi-core program's layers stand for, one per layer."""
    if chip.cores == 1:
        return graph
    _, splits = share_graph(graph, chip, score)
    if not any(sp.k > 1 for sp in splits.values()):
        return graph
    return _with_sums(graph, {op.name: op for op in graph.ops}, splits, share=False)


def _with_sums(graph: Graph, whole: dict, splits: dict[str, Split], share: bool) -> Graph:
    """After each K-split op, the vector op adding its partial sums (:data:`REDUCE_SUFFIX`):
    ``k`` operands of the op's outputs, split over the same cores (its ``share``: ``ceil(
    outputs / cores)`` elements of each partial); the op's readers read the sum instead."""
    ops, renamed = [], {}
    for op in graph.ops:
        split = splits[op.name]
        ops.append(replace(op, inputs=tuple(renamed.get(i, i) for i in op.inputs)))
        if split.k > 1:
            name = op.name + REDUCE_SUFFIX
            outputs = whole[op.name].output_elements
            ops.append(Eltwise(name=name, op="add", operands=split.k, inputs=(op.name,),
                               elements=-(-outputs // split.cores) if share else outputs))
            splits[name] = Split(m=split.cores)
            renamed[op.name] = name
    return Graph(graph.name, tuple(ops), batch=graph.batch, tokens=graph.tokens)


def _group_split(kind: str, members: list, chip: ChipConfig, score=None) -> Split | None:
    """A fused group's split: attention along its heads (the GEMMs' batch), add + norm along
    rows, an epilogue or conv + pool as its anchor (a pool only along images or channels).
    None: the group runs unfused, each op split on its own (a conv + pool whose conv is better
    split along output rows than along the few output channels a fused split leaves)."""
    anchor = members[0]
    if kind == "attention":
        return Split(g=max(1, min(chip.cores, anchor.batch)))
    if kind == "add_norm":
        return Split(m=max(1, min(chip.cores, members[1].rows)))
    split = choose_split(anchor, chip, k_split=False, score=score)
    if kind == "conv_pool" and isinstance(anchor, Conv2d) and split.m > 1 and anchor.batch < split.m:
        # pooled rows must stay with their conv rows: split the channels instead, unless the
        # conv split along rows costs less with the pool on its own
        fused = Split(n=max(1, min(chip.cores, anchor.out_channels if anchor.groups == 1 else 1)))
        pool = members[-1]
        if _conv_pool_cycles(anchor, pool, split, False, chip) < _conv_pool_cycles(
                anchor, pool, fused, True, chip):
            return None
        return fused
    return split


def _conv_pool_cycles(conv: Conv2d, pool, split: Split, fused: bool, chip: ChipConfig) -> float:
    """A lower bound of a conv + pool's cycles with the conv split by ``split``. Each op takes
    the larger of its compute (one core's share) and every core's bytes through what is below
    the cores (the L2, or DRAM) at the chip's bandwidth there. A core reads its rows of the
    input and its columns of the weights: the cores read the input ``split.n`` times and the
    weights ``split.m`` times. Fused, the pool runs inside the conv and the cores write the
    pooled output; apart, the conv's output goes out and the pool, on the vector units of the
    cores it is split over, reads it back and writes the pooled output."""
    eb = chip.elem_size
    below = chip.fetch_bytes_per_cycle * chip.cores * DRAM_EFFICIENCY
    g, mu, unit, n, k, _ = _matrix_extents(conv)
    compute = int(tile_counters(chip.array, -(-mu // split.m) * unit, -(-n // split.n), k,
                                -(-g // split.g))[K_CYCLES])
    out, pooled = conv.output_bytes(eb), pool.output_bytes(eb)
    moved = split.n * conv.input_bytes(eb) + split.m * size_bytes(g * k * n, eb)
    if fused:
        return max(compute, (moved + pooled) / below)
    vector = _vector_cycles(pool, chip) / choose_split(pool, chip).cores
    return max(compute, (moved + out) / below) + max(vector, (out + pooled) / below)


class Placement:
    """Where each transfer of a multi-core chip goes (module docstring): the current op's split
    and the L2's contents. :class:`~hw.program.ProgramBuilder` asks :meth:`route` for every
    transfer, reports the loads that may hit with :meth:`pending`, emits the write-backs of
    :meth:`evicted`, and :meth:`resolve` (at the end of each op) says which of them the L2
    serves.

    Tiles: the compiler knows the whole schedule of an op, so the L2 keeps tiles as Belady's
    optimal policy would (a miss is kept unless it is never read again; when the L2 is full
    the tile read again farthest in the future leaves): what a tile schedule tuned for the L2
    (cuBLAS's rasterisation, a TPU's CMEM allocation) achieves. Kept outputs (module
    docstring) take the L2 first, least recently used leaving first, and leave when their last
    reader has run (:meth:`release`)."""

    def __init__(self, chip: ChipConfig):
        self.capacity = chip.l2.capacity_bytes if chip.l2.present else 0
        self.keep_outputs = chip.l2.present and chip.l2.keep_outputs
        self.tensors: OrderedDict = OrderedDict()   # kept: addr -> (end, bytes, last store)
        self.kept_bytes = 0
        self.split = ONE
        self.keep: tuple[int, int] | None = None   # the current op's kept output (addr, bytes)
        self.writebacks: list[tuple[int, int, int]] = []
        self.loads: list[tuple[int, tuple, int]] = []   # this op's (command, tile key, bytes)
        #: keep the graph's output in the L2 too (a pipeline stage's, for the next stage)
        self.keep_final = False

    def begin(self, split: Split, keep: tuple[int, int] | None = None) -> None:
        """The next op's split, and its output ``(addr, share bytes)`` if it may stay in the
        L2."""
        self.split = split
        self.keep = None
        if keep is not None and self.keep_outputs and keep[1] * split.cores <= self.capacity // 2:
            self.keep = keep

    def route(self, kind: int, operand: int, location: int, box) -> tuple[int, int]:
        """``(location, copies)`` of a transfer the op emits at ``location``."""
        split = self.split
        if kind in (Kind.HOST_IN, Kind.HOST_OUT):
            return location, split.cores
        if kind not in (Kind.LOAD, Kind.STORE) or location != Location.DRAM:
            return location, 1
        if not self.capacity:
            return location, split.cores
        addr = box[0]
        if kind == Kind.STORE:
            if (self.keep is not None and operand == Operand.OFMAP
                    and self.keep[0] <= addr < self.keep[0] + self.keep[1]):
                return Location.L2, split.cores
            return location, split.cores
        copies = split.copies(operand)
        for start, (end, _, _) in self.tensors.items():
            if start <= addr < end:
                self.tensors.move_to_end(start)
                return Location.L2, copies
        return location, copies

    def pending(self, index: int, box, copies: int) -> None:
        """Load command ``index`` (from DRAM) may hit: :meth:`resolve` decides."""
        self.loads.append((index, tuple(box), box[1] * box[3] * box[5] * copies))

    def resolve(self) -> list[int]:
        """The loads of the op just emitted that the L2 serves (Belady's policy over the
        capacity the kept outputs leave)."""
        loads, self.loads = self.loads, []
        room = self.capacity - self.kept_bytes
        if not loads or room <= 0:
            return []
        nxt = [math.inf] * len(loads)
        seen: dict = {}
        for j in range(len(loads) - 1, -1, -1):
            key = loads[j][1]
            nxt[j] = seen.get(key, math.inf)
            seen[key] = j
        held: dict = {}                # key -> (bytes, next use)
        heap: list = []                # (-next use, key): the farthest first (lazy)
        used = 0
        hits = []
        for j, (index, key, nbytes) in enumerate(loads):
            if key in held:
                hits.append(index)
                held[key] = (held[key][0], nxt[j])
            elif nxt[j] != math.inf and nbytes <= room:
                held[key] = (nbytes, nxt[j])
                used += nbytes
            else:
                continue
            heapq.heappush(heap, (-nxt[j], j, key))
            while used > room:
                neg, _, old = heapq.heappop(heap)
                if old in held and held[old][1] == -neg:
                    used -= held.pop(old)[0]
        return hits

    def stored(self, index: int) -> None:
        """Command ``index`` stored (part of) the kept output: the tensor is in the L2."""
        addr, nbytes = self.keep
        total = nbytes * self.split.cores
        if addr not in self.tensors:
            self.tensors[addr] = (addr + nbytes, total, index)
            self.kept_bytes += total
            while self.kept_bytes > self.capacity // 2:
                old, (end, size, store) = self.tensors.popitem(last=False)
                self.kept_bytes -= size
                if store is not None:           # not a held input (hold)
                    self.writebacks.append((old, size, store))
        else:
            end, size, _ = self.tensors[addr]
            self.tensors[addr] = (end, size, index)
            self.tensors.move_to_end(addr)

    def hold(self, addr: int, nbytes: int, total: int) -> bool:
        """The graph's input (``nbytes`` of a share at ``addr``, ``total`` for every core) is in
        the L2 from the start, stored there by the pipeline stage before (if it fits the half
        of the L2 kept tensors may take). Evicted, it is not written back: its later loads
        come from DRAM."""
        if not self.keep_outputs or self.kept_bytes + total > self.capacity // 2:
            return False
        self.tensors[addr] = (addr + nbytes, total, None)
        self.kept_bytes += total
        return True

    def release(self, addr: int) -> None:
        """The tensor kept at ``addr`` has no reader left: it leaves the L2 unwritten."""
        if addr in self.tensors:
            self.kept_bytes -= self.tensors.pop(addr)[1]

    def evicted(self) -> list[tuple[int, int, int]]:
        """Kept tensors evicted since the last call: ``(addr, bytes of all copies, last
        store)``, each to be written back to DRAM."""
        out, self.writebacks = self.writebacks, []
        return out
