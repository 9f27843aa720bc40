"""Lowering of vector ops to the vector engine of a systolic chip: tiles through the scratchpads.

A standalone vector op (:data:`compiler.ir.VECTOR_OPS`, and a :class:`~compiler.ir.Move` that
copies bytes) is cut into tiles that run like a GEMM's, with the vector engine in the array's
place. Per tile:

* a ``LOAD`` of the main input into the **ifmap** scratchpad (and of a second operand, a norm's
  scale and shift or a broadcast tensor, into the **filter** scratchpad), double buffered: the
  next tile loads while this one computes;
* a ``VECTOR`` command on the vector engine, reading its operands from those scratchpads and
  writing the result into the **ofmap** scratchpad (its cycles: :mod:`hw.vector.timing`);
* a ``STORE`` of the result to DRAM.

Tiles follow the op's ``rows x cols`` view (:mod:`compiler.ir.vector`): a row-wise op (softmax,
norm, reduction) takes whole rows, so a row's statistics never leave the chip; pooling takes
output rows of one image with the input rows their windows need (the halo); an element-wise op
and a copy take any run of elements. A tile is as large as the three scratchpads' buffers allow.
A row too long for one buffer is cut into chunks and read from DRAM once per pass of the op
(a softmax's three passes read it three times), the multi-pass schedule a real unit would run;
each pass's share of the op's operations is charged per chunk.

A broadcast operand (a bias row, a per-channel scale) that fits one filter buffer is loaded once
and reused by every tile. Views (:data:`compiler.ir.VIEW_MOVES`) emit nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import VECTOR_OPS, Binary, Cast, Eltwise, Move, Norm, Pool, Reduce
from hw.chip import ChipConfig
from hw.program import Kind, Location, Operand, ProgramBuilder
from hw.vector.work import VectorWork

__all__ = ["VectorPlan", "vector_plan", "emit_vector_op", "tile_list", "is_vector_op",
           "flat_box", "pixel_box"]



def is_vector_op(op) -> bool:
    """The op is vector-engine work: a vector op or a move that copies bytes (not a view)."""
    return isinstance(op, VECTOR_OPS) or (isinstance(op, Move) and not op.is_view)


@dataclass(frozen=True)
class VectorPlan:
    """How a vector op is cut (module docstring).

    ``rows`` of ``cols`` elements (its view), ``tile_rows`` rows per tile, or, when one row does
    not fit, ``chunk`` elements of a row per tile (``chunk == cols`` otherwise). Bytes: the main
    input per element (``a_per_elem``), the output per row (``out_per_row``), the second operand
    the engine reads per element (``b_per_elem``), loaded with each tile when ``b_stream`` or
    once (``b_once_bytes``) and kept. ``pool``: ``(kernel_h, stride_h, pad_top, in_h,
    in_row_bytes)`` of a pooling op, whose tiles are output rows of one image and
    ``pool_channels`` of its channels (all of them unless one row of them does not fit)."""

    work: VectorWork
    rows: int
    cols: int
    tile_rows: int
    chunk: int
    a_per_elem: int
    out_per_row: int
    b_per_elem: int = 0
    b_stream: bool = False
    b_once_bytes: int = 0
    pool: tuple[int, int, int, int, int] | None = None
    pool_channels: int = 0


def _capacity(chip: ChipConfig, name: str) -> int:
    return chip.sram(name).tile_capacity_bytes


def vector_plan(op, chip: ChipConfig) -> VectorPlan:
    """The tiling of ``op`` on ``chip`` (module docstring)."""
    eb = chip.array.precision.bits // 8
    work, rows, cols = op.work(), op.rows, op.cols
    cap_a, cap_b, cap_c = (_capacity(chip, n) for n in ("ifmap", "filter", "ofmap"))
    if isinstance(op, Pool):
        kh, sh = op.kernel_h, op.stride_h
        # channels per tile: all, unless the input rows of one output row do not fit
        channels = min(op.channels, cap_a // (kh * op.in_w * eb), cap_c // (op.out_w * eb))
        if channels < 1:
            raise ValueError(f"pool {op.name!r}: the {kh} input rows of one channel of one "
                             f"output row ({kh * op.in_w * eb} B) do not fit {chip.name}'s "
                             f"ifmap buffer ({cap_a} B)")
        in_row = op.in_w * channels * eb
        out_per_row = op.out_w * channels * eb
        fit = min((cap_a - in_row * max(0, kh - sh)) // max(1, in_row * sh),
                  cap_c // out_per_row, op.out_h)
        return VectorPlan(work, rows, op.out_w * channels, int(fit), op.out_w * channels, 0,
                          out_per_row, pool=(kh, sh, op.pad_top, op.in_h, in_row),
                          pool_channels=channels)
    a_per_elem, out_per_row = eb, cols * eb
    b_per_elem, b_stream, b_once = 0, False, 0
    if isinstance(op, Cast):
        a_per_elem = op.input_bytes(eb) // op.elements
        out_per_row = cols * (op.output_bytes(eb) // op.elements)
    elif isinstance(op, Reduce):
        out_per_row = eb
    elif isinstance(op, Binary):
        b_per_elem = eb
        b_stream = op.other_elements == op.elements
        b_once = 0 if b_stream else op.other_elements * eb
    elif isinstance(op, Eltwise) and op.operands > 1:
        b_per_elem, b_stream = (op.operands - 1) * eb, True
    elif isinstance(op, Norm) and op.affine:
        b_per_elem, b_once = op.weight_elements // op.cols * eb, op.weight_elements * eb
    if b_once > cap_b:        # a broadcast operand too large to keep: streamed with the tiles
        b_stream, b_once = True, 0
    stream_b = b_per_elem if b_stream else 0
    whole = min(cap_a // (cols * a_per_elem),
                cap_b // (cols * stream_b) if stream_b else rows,
                cap_c // out_per_row)
    if whole >= 1:
        return VectorPlan(work, rows, cols, min(rows, whole), cols, a_per_elem, out_per_row,
                          b_per_elem, b_stream, b_once)
    out_per_elem = 0 if isinstance(op, Reduce) else out_per_row // cols
    chunk = min(cap_a // a_per_elem, cap_b // stream_b if stream_b else cols,
                cap_c // out_per_elem if out_per_elem else cols, cols)
    if chunk < 1:
        raise ValueError(f"vector op {op.name!r}: not even one element fits {chip.name}'s "
                         f"scratchpad buffers")
    return VectorPlan(work, rows, cols, 1, int(chunk), a_per_elem, out_per_row, b_per_elem,
                      b_stream, b_once)


def _split(work: VectorWork) -> VectorWork:
    """One pass's share of ``work`` (a chunked row: each pass runs over the row once)."""
    p = work.passes
    return VectorWork(work.name, per_element={o: c / p for o, c in work.per_element},
                      per_row={o: c / p for o, c in work.per_row},
                      reductions=-(-work.reductions // p), passes=1)


@dataclass(frozen=True)
class _Tile:
    a_box: tuple
    b_box: tuple | None       # a second operand streamed with this tile
    work: VectorWork
    rows: int
    cols: int
    a_bytes: int              # bytes the engine reads from the ifmap scratchpad per pass
    b_bytes: int              # bytes it reads from the filter scratchpad
    c_box: tuple | None       # the result stored (None: a pass that writes nothing)
    index: tuple

    @property
    def out_bytes(self) -> int:
        """Bytes the engine writes (and the store moves)."""
        if self.c_box is None:
            return 0
        _, n2, _, n1, _, chunk = self.c_box
        return n2 * n1 * chunk


def flat_box(addr: int, nbytes: int) -> tuple:
    """A DRAM box of ``nbytes`` contiguous bytes at ``addr`` (at least one)."""
    return (addr, 1, 0, 1, 0, max(1, int(nbytes)))


def pixel_box(addr: int, pixels: int, pixel_bytes: int, chunk: int) -> tuple:
    """``pixels`` NHWC pixels from ``addr``, ``chunk`` bytes of each (all when it is the pixel)."""
    if chunk == pixel_bytes:
        return flat_box(addr, pixels * pixel_bytes)
    return (addr, 1, 0, pixels, pixel_bytes, chunk)


def _tiles(op, p: VectorPlan, a_addr: int, b_addr: int, c_addr: int):
    """The tiles of ``op`` under plan ``p``, in order."""
    if p.pool is not None:
        kh, sh, pad, in_h, _ = p.pool
        eb = p.out_per_row // p.cols
        pixel, c = op.channels * eb, p.pool_channels
        t = 0
        for image in range(op.batch):
            for c0 in range(0, op.channels, c):
                cn = min(c, op.channels - c0)
                for r0 in range(0, op.out_h, p.tile_rows):
                    r = min(p.tile_rows, op.out_h - r0)
                    top = max(0, r0 * sh - pad)
                    bottom = min(in_h, (r0 + r - 1) * sh - pad + kh)
                    a_bytes = (bottom - top) * op.in_w * cn * eb
                    a_at = a_addr + (image * in_h + top) * op.in_w * pixel + c0 * eb
                    c_at = c_addr + (image * op.out_h + r0) * op.out_w * pixel + c0 * eb
                    yield _Tile(pixel_box(a_at, (bottom - top) * op.in_w, pixel, cn * eb), None,
                                p.work, r, op.out_w * cn, a_bytes, 0,
                                pixel_box(c_at, r * op.out_w, pixel, cn * eb), (c0, t, 0, 0))
                    t += 1
        return
    if p.chunk == p.cols:
        for t, r0 in enumerate(range(0, p.rows, p.tile_rows)):
            r = min(p.tile_rows, p.rows - r0)
            n = r * p.cols
            b_box = (flat_box(b_addr + r0 * p.cols * p.b_per_elem, n * p.b_per_elem)
                     if p.b_stream else None)
            yield _Tile(flat_box(a_addr + r0 * p.cols * p.a_per_elem, n * p.a_per_elem), b_box,
                        p.work, r, p.cols, n * p.a_per_elem, n * p.b_per_elem,
                        flat_box(c_addr + r0 * p.out_per_row, r * p.out_per_row), (0, t, 0, 0))
        return
    # chunked rows: every pass re-reads the row from DRAM; the last pass writes the output
    share = _split(p.work)
    reduce_out = p.out_per_row < p.cols     # one result per row (a reduction)
    per_elem_out = 0 if reduce_out else p.out_per_row // p.cols
    t = 0
    for row in range(p.rows):
        for pas in range(p.work.passes):
            final = pas == p.work.passes - 1
            for c0 in range(0, p.cols, p.chunk):
                n = min(p.chunk, p.cols - c0)
                base = row * p.cols + c0
                b_box = (flat_box(b_addr + base * p.b_per_elem, n * p.b_per_elem)
                         if p.b_stream else None)
                c_box = None
                if final and not reduce_out:
                    c_box = flat_box(c_addr + base * per_elem_out, n * per_elem_out)
                elif final and c0 + n == p.cols:
                    c_box = flat_box(c_addr + row * p.out_per_row, p.out_per_row)
                yield _Tile(flat_box(a_addr + base * p.a_per_elem, n * p.a_per_elem), b_box, share,
                            1, n, n * p.a_per_elem, n * p.b_per_elem, c_box, (0, t, pas, 0))
                t += 1


def emit_vector_op(pb: ProgramBuilder, layer: int, op, plan: VectorPlan, chip: ChipConfig, *,
                   a_addr: int, b_addr: int, c_addr: int, input_deps: list[int],
                   once_addr: int | None = None, sum_addr: int | None = None) -> int:
    """Append the commands of one vector op; returns its last command (the last store).

    ``input_deps`` are the commands that make its inputs readable in DRAM; ``b_addr`` is where
    its second operand lives (another op's output or constants), ``once_addr`` where the
    operand loaded once lives when both are used (default ``b_addr``). ``sum_addr``: a fused
    add + norm also stores the sum of its addends there (laid out as the main input)."""
    double = {n: chip.sram(n).double_buffer for n in ("ifmap", "filter", "ofmap")}
    cur = {"ifmap": 0, "filter": 0, "ofmap": 0}
    used = {"ifmap": False, "filter": False, "ofmap": False}
    last_use = {"ifmap": [None, None], "filter": [None, None]}
    c_free: list = [None, None]
    deps0 = list(input_deps)
    kept_b = None
    last = None

    def next_slot(buf: str) -> int:
        if used[buf] and double[buf]:
            cur[buf] ^= 1
        used[buf] = True
        return cur[buf]

    for tl in _tiles(op, plan, a_addr, b_addr, c_addr):
        s = next_slot("ifmap")
        deps = [pb.transfer(Kind.LOAD, Operand.IFMAP, Location.DRAM, layer, tl.a_box,
                            deps=deps0 + [last_use["ifmap"][s]], tile=tl.index)]
        sb = None
        if tl.b_box is not None:
            sb = next_slot("filter")
            deps.append(pb.transfer(Kind.LOAD, Operand.FILTER, Location.DRAM, layer, tl.b_box,
                                    deps=deps0 + [last_use["filter"][sb]], tile=tl.index,
                                    split_as=Operand.IFMAP))     # each core its own slice
        if plan.b_once_bytes and (tl.b_box is None or once_addr is not None):
            if kept_b is None:
                kept_b = pb.transfer(Kind.LOAD, Operand.FILTER, Location.DRAM, layer,
                                     flat_box(b_addr if once_addr is None else once_addr,
                                          plan.b_once_bytes), deps=deps0, tile=tl.index)
            deps.append(kept_b)
        sc = next_slot("ofmap")
        deps.append(c_free[sc])
        sum_bytes = tl.a_bytes if sum_addr is not None and tl.c_box is not None else 0
        v = pb.vector(layer, tl.work, tl.rows, tl.cols, tl.a_bytes, tl.b_bytes,
                      tl.out_bytes + sum_bytes, deps=deps, tile=tl.index)
        last_use["ifmap"][s] = v
        if sb is not None:
            last_use["filter"][sb] = v
        if tl.c_box is None:
            c_free[sc] = v
            continue
        last = pb.transfer(Kind.STORE, Operand.OFMAP, Location.DRAM, layer, tl.c_box, deps=[v],
                           tile=tl.index)
        if sum_bytes:
            last = pb.transfer(Kind.STORE, Operand.OFMAP, Location.DRAM, layer,
                               (sum_addr + tl.a_box[0] - a_addr, *tl.a_box[1:]), deps=[v],
                               tile=tl.index)
        c_free[sc] = last
    return last


def tile_list(op, plan: VectorPlan) -> list:
    """The tiles of ``op`` (rows, cols, work, bytes), as :func:`emit_vector_op` emits them."""
    return list(_tiles(op, plan, 0, 0, 0))
