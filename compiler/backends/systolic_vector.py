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
from hw.packing import granule, nbytes
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
    not fit, ``chunk`` elements of a row per tile (``chunk == cols`` otherwise). Sizes: the main
    input's bits per element (``a_bits``), the output's bytes per row (``out_per_row``) and
    bits per element (``out_bits``; 0: one result per row, a reduction), the bits per element
    of the second operand the engine reads (``b_bits``), loaded with each tile when
    ``b_stream`` or once (``b_once_bytes``) and kept. Rows of operands packed narrower
    than a byte are padded to whole bytes (:mod:`hw.packing`). ``pool``: ``(kernel_h,
    stride_h, pad_top, in_h, in_row_bytes)`` of a pooling op, whose tiles are output rows of one
    image and ``pool_channels`` of its channels (all of them unless one row of them does not
    fit)."""

    work: VectorWork
    rows: int
    cols: int
    tile_rows: int
    chunk: int
    a_bits: int
    out_per_row: int
    b_bits: int = 0
    b_stream: bool = False
    b_once_bytes: int = 0
    pool: tuple[int, int, int, int, int] | None = None
    pool_channels: int = 0
    out_bits: int = 0


def _capacity(chip: ChipConfig, name: str) -> int:
    return chip.sram(name).tile_capacity_bytes


def vector_plan(op, chip: ChipConfig) -> VectorPlan:
    """The tiling of ``op`` on ``chip`` (module docstring)."""
    bits = chip.array.precision.bits
    g = granule(bits)
    work, rows, cols = op.work(), op.rows, op.cols
    cap_a, cap_b, cap_c = (_capacity(chip, n) for n in ("ifmap", "filter", "ofmap"))
    if isinstance(op, Pool):
        kh, sh = op.kernel_h, op.stride_h
        # channels per tile: all, unless the input rows of one output row do not fit (packed:
        # a whole number of bytes of channels)
        channels = op.channels
        if (kh * op.in_w * nbytes(channels, bits) > cap_a
                or op.out_w * nbytes(channels, bits) > cap_c):
            channels = min(cap_a * 8 // (kh * op.in_w * bits), cap_c * 8 // (op.out_w * bits))
            channels -= channels % g
        if channels < 1:
            raise ValueError(f"pool {op.name!r}: the {kh} input rows of one channel of one "
                             f"output row ({kh * op.in_w * nbytes(g, bits)} B) do not fit "
                             f"{chip.name}'s ifmap buffer ({cap_a} B)")
        in_row = op.in_w * nbytes(channels, bits)
        out_per_row = op.out_w * nbytes(channels, bits)
        fit = min((cap_a - in_row * max(0, kh - sh)) // max(1, in_row * sh),
                  cap_c // out_per_row, op.out_h)
        if fit < 1:
            raise ValueError(f"pool {op.name!r}: the {kh} input rows of {channels} channels of "
                             f"one output row ({kh * in_row} B) do not fit {chip.name}'s ifmap "
                             f"buffer ({cap_a} B)")
        return VectorPlan(work, rows, op.out_w * channels, int(fit), op.out_w * channels, bits,
                          out_per_row, pool=(kh, sh, op.pad_top, op.in_h, in_row),
                          pool_channels=channels, out_bits=bits)
    a_bits, out_bits = bits, bits
    b_bits, b_stream, b_once = 0, False, 0
    if isinstance(op, Cast):
        a_bits = 8 * op.input_bytes(chip.elem_size) // op.elements if op.src else bits
        out_bits = 8 * op.output_bytes(chip.elem_size) // op.elements
    elif isinstance(op, Binary):
        b_bits = bits
        b_stream = op.other_elements == op.elements
        b_once = 0 if b_stream else nbytes(op.other_elements, bits)
    elif isinstance(op, Eltwise) and op.operands > 1:
        b_bits, b_stream = (op.operands - 1) * bits, True
    elif isinstance(op, Norm) and op.affine:
        b_bits = op.weight_elements // op.cols * bits
        b_once = nbytes(op.weight_elements, bits)
    if isinstance(op, Reduce):
        out_per_row, out_bits = nbytes(1, out_bits), 0
    else:
        out_per_row = nbytes(cols, out_bits)
    if b_once > cap_b:        # a broadcast operand too large to keep: streamed with the tiles
        b_stream, b_once = True, 0
    stream_b = b_bits if b_stream else 0
    whole = min(cap_a // nbytes(cols, a_bits),
                cap_b // nbytes(cols, stream_b) if stream_b else rows,
                cap_c // out_per_row)
    if whole >= 1:
        return VectorPlan(work, rows, cols, min(rows, whole), cols, a_bits, out_per_row,
                          b_bits, b_stream, b_once, out_bits=out_bits)
    chunk = min(cap_a * 8 // a_bits, cap_b * 8 // stream_b if stream_b else cols,
                cap_c * 8 // out_bits if out_bits else cols, cols)
    chunk -= chunk % g         # chunks start on a byte (hw.packing)
    if chunk < 1:
        raise ValueError(f"vector op {op.name!r}: not even one element fits {chip.name}'s "
                         f"scratchpad buffers")
    return VectorPlan(work, rows, cols, 1, int(chunk), a_bits, out_per_row, b_bits,
                      b_stream, b_once, out_bits=out_bits)


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
    """The tiles of ``op`` under plan ``p``, in order. Byte counts: rows (pixels) of packed
    operands padded to whole bytes, tiles cut them at whole bytes (:mod:`hw.packing`)."""
    if p.pool is not None:
        kh, sh, pad, in_h, _ = p.pool
        bits = p.a_bits
        pixel, c = nbytes(op.channels, bits), p.pool_channels
        t = 0
        for image in range(op.batch):
            for c0 in range(0, op.channels, c):
                cn = min(c, op.channels - c0)
                chunk = nbytes(cn, bits)
                for r0 in range(0, op.out_h, p.tile_rows):
                    r = min(p.tile_rows, op.out_h - r0)
                    top = max(0, r0 * sh - pad)
                    bottom = min(in_h, (r0 + r - 1) * sh - pad + kh)
                    a_bytes = (bottom - top) * op.in_w * chunk
                    a_at = a_addr + (image * in_h + top) * op.in_w * pixel + c0 * bits // 8
                    c_at = c_addr + (image * op.out_h + r0) * op.out_w * pixel + c0 * bits // 8
                    yield _Tile(pixel_box(a_at, (bottom - top) * op.in_w, pixel, chunk), None,
                                p.work, r, op.out_w * cn, a_bytes, 0,
                                pixel_box(c_at, r * op.out_w, pixel, chunk), (c0, t, 0, 0))
                    t += 1
        return
    a_row, b_row = nbytes(p.cols, p.a_bits), nbytes(p.cols, p.b_bits)
    if p.chunk == p.cols:
        for t, r0 in enumerate(range(0, p.rows, p.tile_rows)):
            r = min(p.tile_rows, p.rows - r0)
            b_box = flat_box(b_addr + r0 * b_row, r * b_row) if p.b_stream else None
            yield _Tile(flat_box(a_addr + r0 * a_row, r * a_row), b_box,
                        p.work, r, p.cols, r * a_row, r * b_row,
                        flat_box(c_addr + r0 * p.out_per_row, r * p.out_per_row), (0, t, 0, 0))
        return
    # chunked rows: every pass re-reads the row from DRAM; the last pass writes the output
    share = _split(p.work)
    out_bits, out_row = p.out_bits, p.out_per_row
    reduce_out = out_bits == 0
    t = 0
    for row in range(p.rows):
        for pas in range(p.work.passes):
            final = pas == p.work.passes - 1
            for c0 in range(0, p.cols, p.chunk):
                n = min(p.chunk, p.cols - c0)
                a_n, b_n = nbytes(n, p.a_bits), nbytes(n, p.b_bits)
                b_box = (flat_box(b_addr + row * b_row + c0 * p.b_bits // 8, b_n)
                         if p.b_stream else None)
                c_box = None
                if final and not reduce_out:
                    c_box = flat_box(c_addr + row * out_row + c0 * out_bits // 8,
                                     nbytes(n, out_bits))
                elif final and c0 + n == p.cols:
                    c_box = flat_box(c_addr + row * out_row, out_row)
                yield _Tile(flat_box(a_addr + row * a_row + c0 * p.a_bits // 8, a_n), b_box,
                            share, 1, n, a_n, b_n, c_box, (0, t, pas, 0))
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
