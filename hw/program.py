"""Programs: the commands a chip runs for a workload, with their dependencies (one schedule per op).

A :class:`Program` is what the systolic backend (:mod:`compiler.backends.systolic`) hands to the
executor (:mod:`hw.executor`): one flat list of commands for the whole graph, stored column-wise
in numpy arrays (so the executor's inner loop reads plain arrays), plus one :class:`LayerSchedule`
per op saying which commands belong to it and which tiling produced them.

Engines (each runs its own commands strictly in program order, like Gemmini's load / execute /
store queues):

* ``load``   — DMA from DRAM or the host link into a scratchpad (and on-chip moves),
* ``array``  — the systolic array,
* ``store``  — DMA from the ofmap scratchpad to DRAM or the host link,
* ``vector`` — the vector engine (:mod:`hw.vector`): softmax, norms, activations, pooling, ...

A command starts when its engine has finished the previous command and every dependency has
finished. Dependencies always point to earlier commands.

Transfers describe a 3-level strided box in DRAM (``n2`` blocks of ``n1`` chunks of
``chunk_bytes`` contiguous bytes; chunk ``(i2, i1)`` starts at ``addr + i2*stride2 + i1*stride1``),
which covers every tile shape the tiler emits (matrix row blocks, NHWC patches, channel slices).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Engine", "Kind", "Operand", "Location", "Tiling", "LayerSchedule", "Program",
           "ProgramBuilder"]


class Engine(enum.IntEnum):
    LOAD = 0
    ARRAY = 1
    STORE = 2
    VECTOR = 3


class Kind(enum.IntEnum):
    LOAD = 0      # DRAM -> SRAM
    STORE = 1     # SRAM -> DRAM
    COMPUTE = 2   # array
    MOVE = 3      # SRAM -> SRAM (ofmap of one layer becomes the ifmap of the next)
    HOST_IN = 4   # host -> DRAM over the link
    HOST_OUT = 5  # DRAM -> host over the link
    VECTOR = 6    # vector engine


class Operand(enum.IntEnum):
    IFMAP = 0
    FILTER = 1
    OFMAP = 2
    PSUM = 3      # partial sums spilled to / reloaded from DRAM at accumulator precision
    NONE = 4
    RESIDUAL = 5  # a fused epilogue's residual tile, loaded next to its accumulators (ofmap)
    # (a STORE of operand NONE writes a tensor evicted from the shared L2 back to DRAM)


class Location(enum.IntEnum):
    DRAM = 0
    HOST = 1
    ONCHIP = 2
    L2 = 3        # the shared L2 of a multi-core chip (a load it serves, a store it keeps)


@dataclass(frozen=True)
class Tiling:
    """How one op was tiled. Extents are per GEMM of the op's matrix view (see
    :meth:`compiler.ir.Conv2d.gemm_shape`); ``order`` lists the tile loops outermost first."""

    lowering: str          # "gemm", "direct" (conv read as NHWC patches) or "im2col"
    group_tile: int        # GEMMs (groups / batch entries) per compute command
    m_tile: int            # output rows (GEMM) or output pixels (conv) per tile
    n_tile: int
    k_tile: int
    order: str             # e.g. "mnk": m outermost, k innermost
    tiles: int             # compute commands
    ifmap_tile_bytes: int  # largest tile in each scratchpad (one buffer)
    filter_tile_bytes: int
    ofmap_tile_bytes: int
    input_resident: bool   # the whole input was already on chip (kept from the previous layer)
    output_resident: bool  # the whole output stays on chip for the next layer
    estimated_cycles: int  # the tiler's own estimate (the executor's number is the real one)
    dataflow: str | None = None  # the layer's dataflow on a reconfigurable array (None: the chip's)
    nm: tuple[int, int] | None = None  # N:M its weights run with on sparse PEs (None: dense)
    # row-wise N:M: ((N, output channels), ...), largest N first, each N tile at its own N
    # (a compute's nm_n); nm is then the largest N below M
    nm_rows: tuple[tuple[int, int], ...] | None = None
    act_zeros: float = 0.0  # fraction of its streamed activations that are zero (gate MACs)
    # (format, bytes, elements): its weights kept in an unstructured-sparse format, decompressed
    # at the filter scratchpad's port (None: dense or N:M)
    weight_store: tuple[str, int, int] | None = None

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        if d["nm"] is None:     # dense layers' records read as they always have
            del d["nm"]
        if d["nm_rows"] is None:
            del d["nm_rows"]
        if not d["act_zeros"]:
            del d["act_zeros"]
        if d["weight_store"] is None:
            del d["weight_store"]
        return d


@dataclass(frozen=True)
class LayerSchedule:
    """The commands ``[first, last)`` of one op."""

    op_index: int
    name: str
    op: str
    first: int
    last: int
    macs: int
    tiling: Tiling | None
    # ``"<kind>:<anchor>"`` when the op runs in a fused group (compiler.fusion): the anchor's
    # commands do the whole group's work, the other members have none
    fused: str | None = None
    # cores running these commands, each on its own share of the op (compiler.backends.multicore)
    cores: int = 1


_INT_COLUMNS = ("engine", "kind", "operand", "location", "layer", "addr", "n2", "stride2", "n1",
                "stride1", "chunk_bytes", "count", "m", "n", "k", "left_stride", "top_stride",
                "tile_g", "tile_m", "tile_n", "tile_k", "va_bytes", "vb_bytes", "vout_bytes",
                "copies", "nm_n")
_LOCATION_AT = _INT_COLUMNS.index("location")


def _row(engine, kind, operand, location, layer, addr=0, n2=0, stride2=0, n1=0, stride1=0,
         chunk_bytes=0, count=0, m=0, n=0, k=0, left_stride=0, top_stride=0, tile_g=0, tile_m=0,
         tile_n=0, tile_k=0, va_bytes=0, vb_bytes=0, vout_bytes=0, copies=0, nm_n=0) -> list:
    """One command's row of :data:`_INT_COLUMNS` (its parameters, in that order)."""
    return [engine, kind, operand, location, layer, addr, n2, stride2, n1, stride1, chunk_bytes,
            count, m, n, k, left_stride, top_stride, tile_g, tile_m, tile_n, tile_k, va_bytes,
            vb_bytes, vout_bytes, copies, nm_n]


# Enum members as plain ints: a member lookup on the class costs ~0.5 us on Python 3.11.
_E_LOAD, _E_ARRAY, _E_STORE, _E_VECTOR = (int(e) for e in Engine)
_K_LOAD, _K_STORE, _K_COMPUTE, _K_HOST_OUT, _K_VECTOR = (
    int(k) for k in (Kind.LOAD, Kind.STORE, Kind.COMPUTE, Kind.HOST_OUT, Kind.VECTOR))
_O_NONE = int(Operand.NONE)
_L_DRAM, _L_ONCHIP, _L_L2 = int(Location.DRAM), int(Location.ONCHIP), int(Location.L2)


@dataclass
class Program:
    """All commands of a graph on a chip, column-wise, plus the per-op layer schedules.

    Columns (int64 arrays, one entry per command): ``engine``, ``kind``, ``operand``,
    ``location`` (of the DRAM side: DRAM, HOST or ONCHIP), ``layer`` (index into ``layers``),
    transfer box ``addr, n2, stride2, n1, stride1, chunk_bytes``, compute shape ``count, m, n, k``
    with the byte strides of the vectors the array's left and top edges read per cycle
    (``left_stride``, ``top_stride``; element size = contiguous; bit strides for operands
    packed narrower than a byte, :mod:`hw.packing`), the tile indices
    ``tile_g/m/n/k``, and the dependency lists in CSR form (``dep_ptr``, ``dep_idx``).
    On a multi-core chip a transfer's ``copies`` is how many distinct copies of its box the
    layer's cores move to or from DRAM (:mod:`compiler.backends.multicore`; 1 otherwise).
    A compute's ``nm_n`` is 0, or in a row-wise N:M layer (``Tiling.nm_rows``) the N its tile
    runs at (the layer's M: dense).

    A ``VECTOR`` command runs ``works[count]`` (a :class:`~hw.vector.work.VectorWork`) on ``m``
    rows of ``n`` elements, reading ``va_bytes`` per pass from the scratchpad named by
    ``operand`` (ifmap; ofmap for an epilogue on accumulators) and ``vb_bytes`` from the filter
    scratchpad, and writing ``vout_bytes`` into the ofmap scratchpad.
    """

    model: str
    layers: list[LayerSchedule]
    columns: dict[str, np.ndarray]
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    notes: list[str] = field(default_factory=list)
    works: list = field(default_factory=list)
    # DRAM address of each tensor: op outputs by op name, "<input>" for the graph's input,
    # "<op>.weights" for an op's stored weights (what a run with real values lays out)
    tensors: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.columns["engine"].shape[0])

    def __getattr__(self, name):
        columns = self.__dict__.get("columns")
        if columns is not None and name in columns:
            return columns[name]
        raise AttributeError(name)

    def transfer_bytes(self, index: int) -> int:
        c = self.columns
        return int(c["n2"][index] * c["n1"][index] * c["chunk_bytes"][index])

    def deps(self, index: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[index]:self.dep_ptr[index + 1]]


class ProgramBuilder:
    """Appends commands; :meth:`build` freezes them into a :class:`Program`."""

    def __init__(self, model: str):
        self.model = model
        self._rows: list[list[int]] = []      # one row of _INT_COLUMNS per command
        self._deps: list[int] = []
        self._dep_ptr: list[int] = [0]
        self.layers: list[LayerSchedule] = []
        self.notes: list[str] = []
        self.works: list = []
        self.tensors: dict = {}
        self._work_index: dict = {}
        # a multi-core chip's compiler.backends.multicore.Placement: routes every transfer
        self.placement = None

    def __len__(self) -> int:
        return len(self._dep_ptr) - 1

    def _add(self, deps, row: list) -> int:
        """Append a command (its :func:`_row`) that waits for ``deps`` (None entries skipped);
        its index. Values are converted to int64 in :meth:`build`."""
        self._rows.append(row)
        index = len(self._dep_ptr) - 1
        out = self._deps
        for d in deps:
            if d is not None:
                assert 0 <= d < index, (d, index)
                out.append(d)
        self._dep_ptr.append(len(out))
        return index

    def transfer(self, kind: Kind, operand: Operand, location: Location, layer: int, box,
                 deps=(), tile=(0, 0, 0, 0), split_as: Operand | None = None) -> int:
        """``box = (addr, n2, stride2, n1, stride1, chunk_bytes)``. ``split_as``: the operand
        whose split across cores this data follows, when not its own (a vector op's second
        operand streamed with its tiles is split like the first, not shared like weights)."""
        engine = _E_STORE if kind == _K_STORE or kind == _K_HOST_OUT else _E_LOAD
        addr, n2, s2, n1, s1, chunk = box
        g, m, n, k = tile
        copies = 1
        place = self.placement
        if place is not None:
            location, copies = place.route(kind, operand if split_as is None else split_as,
                                           location, box)
        index = self._add(deps, _row(engine, kind, operand, location, layer, addr, n2, s2, n1,
                                     s1, chunk, tile_g=g, tile_m=m, tile_n=n, tile_k=k,
                                     copies=copies))
        if place is not None:
            if kind == _K_STORE and location == _L_L2:
                place.stored(index)
            elif kind == _K_LOAD and location == _L_DRAM and place.capacity:
                place.pending(index, box, copies)
            for w_addr, w_bytes, w_after in place.evicted():   # kept tensors written back
                self._add([w_after], _row(_E_STORE, _K_STORE, _O_NONE, _L_DRAM,
                                          layer, w_addr, n2=1, n1=1, chunk_bytes=w_bytes,
                                          copies=1))
        return index

    def compute(self, layer: int, count: int, m: int, n: int, k: int, left_stride: int,
                top_stride: int, deps=(), tile=(0, 0, 0, 0), nm_n: int = 0) -> int:
        """A ``COMPUTE``; ``nm_n``: 0 (it runs with its layer's ``Tiling.nm``), or the N its
        tile of a row-wise N:M layer runs at (the layer's M: dense)."""
        g, tm, tn, tk = tile
        return self._add(deps, _row(_E_ARRAY, _K_COMPUTE, _O_NONE, _L_ONCHIP, layer, count=count,
                                    m=m, n=n, k=k, left_stride=left_stride,
                                    top_stride=top_stride, tile_g=g, tile_m=tm, tile_n=tn,
                                    tile_k=tk, nm_n=nm_n))

    def vector(self, layer: int, work, rows: int, cols: int, a_bytes: int, b_bytes: int,
               out_bytes: int, deps=(), tile=(0, 0, 0, 0), source: Operand = Operand.IFMAP) -> int:
        """A ``VECTOR`` command: ``work`` on ``rows x cols`` elements (see :class:`Program`)."""
        index = self._work_index.get(work)
        if index is None:
            index = self._work_index[work] = len(self.works)
            self.works.append(work)
        g, tm, tn, tk = tile
        return self._add(deps, _row(_E_VECTOR, _K_VECTOR, source, _L_ONCHIP, layer, count=index,
                                    m=rows, n=cols, va_bytes=a_bytes, vb_bytes=b_bytes,
                                    vout_bytes=out_bytes, tile_g=g, tile_m=tm, tile_n=tn,
                                    tile_k=tk))

    def settle(self) -> None:
        """End of an op on a chip with an L2: the loads its L2 serves become ``L2`` loads."""
        if self.placement is not None:
            rows = self._rows
            for index in self.placement.resolve():
                rows[index][_LOCATION_AT] = _L_L2

    def build(self) -> Program:
        table = np.array(self._rows, dtype=np.int64).reshape(len(self._rows), len(_INT_COLUMNS))
        columns = {name: np.ascontiguousarray(table[:, i]) for i, name in enumerate(_INT_COLUMNS)}
        return Program(model=self.model, layers=list(self.layers), columns=columns,
                       dep_ptr=np.asarray(self._dep_ptr, dtype=np.int64),
                       dep_idx=np.asarray(self._deps, dtype=np.int64), notes=list(self.notes),
                       works=list(self.works), tensors=dict(self.tensors))
