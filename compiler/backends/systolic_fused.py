"""Lowering of fused groups (:mod:`compiler.fusion`) on a systolic chip with a vector engine.

* **epilogue** and **conv_pool**: the anchor GEMM/conv is tiled as usual
  (:mod:`compiler.backends.systolic`); when an output tile's last K step is done, instead of a
  plain ``STORE`` the tile gets (:meth:`Epilogue.emit_tile`): a ``LOAD`` of the residual tile
  into the ofmap scratchpad beside the accumulators (operand ``RESIDUAL``; the tiler leaves room
  for it), a ``VECTOR`` on the accumulators (``source = OFMAP``: bias, activation, residual add,
  requantization) and the ``STORE`` of the result. With a pool, a second ``VECTOR`` pools the
  conv rows the tile completes (plus the halo rows of the previous tile, kept in the ofmap
  scratchpad) and only the pooled rows are stored; the conv output never reaches DRAM.
* **add_norm**: the norm's whole-row tiles (:mod:`compiler.backends.systolic_vector`) read both
  addends, add them and gather the row statistics in the same passes; the sum is stored too
  when another op reads it.
* **attention**: FlashAttention-2's loop (Dao, arXiv 2307.08691, Algorithm 1): per head and
  query tile of ``B_r`` rows, the key/value tiles of ``B_c`` rows stream through the filter
  scratchpad; the array computes ``S = Q K_j^T`` into the ofmap scratchpad, the vector engine
  runs the online softmax on it (running row max and sum, :func:`online_softmax_work`) and
  writes the unnormalised ``P`` tile, an on-chip ``MOVE`` takes it to the ifmap scratchpad, the
  vector engine rescales the output accumulators by ``exp(m_old - m_new)`` and the array adds
  ``P V_j``; after the last key tile the vector engine divides by the row sums and the output
  tile is stored. DRAM traffic: Q and O once, K and V once per query tile; no score matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.backends.systolic_tiling import DRAM_EFFICIENCY, TileProblem, TilingError
from compiler.backends.systolic_vector import VectorPlan, flat_box, pixel_box
from compiler.fusion import FusedGroup
from compiler.ir import Binary, Cast, Gemm, Norm, Pool
from hw.chip import ChipConfig
from hw.packing import bits_of, nbytes, size_bytes
from hw.program import Kind, Location, Operand, ProgramBuilder
from hw.vector.work import VectorWork

__all__ = ["Epilogue", "epilogue", "AttentionPlan", "attention_plan", "emit_attention",
           "add_norm_plan", "combined_work", "online_softmax_work",
           "RESCALE_WORK", "NORMALISE_WORK"]


def combined_work(works: list[VectorWork], name: str | None = None) -> VectorWork:
    """The work of element-wise ops applied one after another to the same elements (an
    epilogue): their operations per element added up, in one pass."""
    per_element: dict[str, float] = {}
    for w in works:
        for op, c in w.per_element:
            per_element[op] = per_element.get(op, 0.0) + c
    return VectorWork(name or "+".join(w.name for w in works), per_element=per_element)


def online_softmax_work(first: bool, extra: VectorWork | None = None) -> VectorWork:
    """The online softmax of one score tile (FlashAttention-2, Algorithm 1 lines 8-10; as
    :func:`hw.vector.fused.flash_attention` computes it): per element the row max (a max),
    ``(s - m) * scale`` (an fma: the softmax scale folded in, as FA-2's kernels do), its exp
    and the row sum (an add); after a query tile's ``first`` step, per row also the new max
    (a max), ``m_old - m_new`` (an add), its exp (the rescale factor ``alpha``) and the
    running sum ``l = alpha l + rowsum`` (an fma). Two reduction trees (max and sum), two
    passes over the tile (max, then exp and sum); ``P`` stays unnormalised. ``extra``: the
    element-wise work of a fused dropout on ``P``, in the second pass."""
    per_row = {} if first else {"max": 1, "add": 1, "exp": 1, "fma": 1}
    per_element = {"max": 1, "fma": 1, "exp": 1, "add": 1}
    name = "online_softmax"
    if extra is not None:
        for op, c in extra.per_element:
            per_element[op] = per_element.get(op, 0) + c
        name += "+" + extra.name
    return VectorWork(name, per_element=per_element, per_row=per_row, reductions=2, passes=2)


#: Rescaling the output accumulators by the row's ``exp(m_old - m_new)``: a multiply each.
RESCALE_WORK = VectorWork("rescale", per_element={"mul": 1})
#: The final ``O / l``: a reciprocal per row, a multiply per element.
NORMALISE_WORK = VectorWork("normalise", per_element={"mul": 1}, per_row={"rcp": 1})


# ---------------------------------------------------------------------------------------------
# epilogue and conv_pool

@dataclass
class Epilogue:
    """What a fused anchor does to each finished output tile (module docstring).

    ``work``: the element-wise ops' combined work (None: only a pool); ``out_bytes``: bytes per
    element of the stored result; ``residual_addr``/``residual_deps``: the residual tensor and
    the commands that make it readable; ``const_addr``/``const_bytes``: bias and scale vectors,
    loaded once into the filter scratchpad, ``const_per_col`` bytes of them read per output
    column; ``pool``, ``pool_first`` and ``pool_done``: the fused pool and, per pool output row
    (over all images), the first conv row (over all images) it reads and the number of conv
    rows that must be complete before it can be computed (its last row + 1). ``preload``: the
    residual add comes first, so the residual tile initialises the accumulators before the
    tile's first product (``C = A B + D``, Gemmini's preload of D) and needs neither room
    beside them nor a vector add."""

    work: VectorWork | None
    out_bytes: int
    residual_addr: int | None = None
    preload: bool = False
    residual_deps: tuple = ()
    const_addr: int = 0
    const_bytes: int = 0
    const_per_col: int = 0
    pool: Pool | None = None
    pool_done: np.ndarray | None = None
    pool_first: np.ndarray | None = None
    _const_load: int | None = None

    def load_residual(self, pb: ProgramBuilder, layer: int, box: tuple, slot_free,
                      tile: tuple) -> int:
        """The ``LOAD`` of the residual tile ``box`` into the ofmap scratchpad, once the output
        tile's buffer is free: into its accumulators before the first product (``preload``)
        or beside them for the epilogue."""
        return pb.transfer(Kind.LOAD, Operand.RESIDUAL, Location.DRAM, layer, box,
                           deps=[slot_free, *self.residual_deps], tile=tile)

    def emit_tile(self, pb: ProgramBuilder, layer: int, p: TileProblem, comp: int, tile: tuple,
                  slot_free: int | None, c_addr: int, box_of, m_first: int, m_units: int,
                  n0: int, nsz: int, gsz: int) -> int:
        """The commands after output tile ``tile``'s last compute ``comp``; returns the one
        after which its ofmap buffer is free. ``box_of(base, elem_bytes)``: the tile's box in
        a tensor laid out as the output."""
        pixels = gsz * m_units * p.unit_pixels
        ab = p.acc_bytes
        deps = [comp]
        read = pixels * nsz * ab
        if self.residual_addr is not None and not self.preload:
            deps.append(self.load_residual(pb, layer, box_of(self.residual_addr, p.elem_bytes),
                                           slot_free, tile))
            read += pixels * nbytes(nsz, bits_of(p.elem_bytes))
        if self.const_bytes:
            if self._const_load is None:
                self._const_load = pb.transfer(Kind.LOAD, Operand.FILTER, Location.DRAM, layer,
                                               flat_box(self.const_addr, self.const_bytes),
                                               tile=tile)
            deps.append(self._const_load)
        last = comp
        in_bytes = ab
        if self.work is not None:
            last = pb.vector(layer, self.work, pixels, nsz, read,
                             nbytes(nsz, self.const_per_col),
                             pixels * nbytes(nsz, bits_of(self.out_bytes)), deps=deps,
                             tile=tile, source=Operand.OFMAP)
            deps, in_bytes = [last], self.out_bytes
        if self.pool is None:
            return pb.transfer(Kind.STORE, Operand.OFMAP, Location.DRAM, layer,
                               box_of(c_addr, self.out_bytes), deps=deps, tile=tile)
        # the pool rows whose last input row this tile completes
        w = p.out_w if p.lowering == "direct" else self.pool.in_w
        r0 = m_first * p.unit_pixels // w
        r1 = (m_first + m_units) * p.unit_pixels // w
        q0, q1 = (int(x) for x in np.searchsorted(self.pool_done, (r0, r1), side="right"))
        if q1 <= q0:
            return last
        pool = self.pool
        rows_read = r1 - int(self.pool_first[q0])
        out_w, bits = pool.out_w, bits_of(self.out_bytes)
        in_bits = 8 * in_bytes if self.work is None else bits     # accumulators, or the output
        last = pb.vector(layer, pool.work(), q1 - q0, out_w * nsz,
                         rows_read * w * nbytes(nsz, in_bits), 0,
                         (q1 - q0) * out_w * nbytes(nsz, bits),
                         deps=deps, tile=tile, source=Operand.OFMAP)
        pixel = nbytes(pool.channels, bits)
        box = pixel_box(c_addr + q0 * out_w * pixel + n0 * bits // 8, (q1 - q0) * out_w, pixel,
                        nbytes(nsz, bits))
        return pb.transfer(Kind.STORE, Operand.OFMAP, Location.DRAM, layer, box, deps=[last],
                           tile=tile)


def epilogue(group: FusedGroup, by_name: dict, chip: ChipConfig, addr: dict, ready: dict,
             alloc) -> tuple[Epilogue, int]:
    """The :class:`Epilogue` of an ``epilogue`` or ``conv_pool`` group, and the residual's
    bytes per output element the ofmap tile must also hold."""
    eb = chip.elem_size
    works, out_bytes = [], eb
    residual, const_bytes, const_per_col = None, 0, 0
    pool = None
    tail = group.anchor
    preload = False
    for name in group.fused:
        op = by_name[name]
        if isinstance(op, Pool):
            pool = op
            continue
        if isinstance(op, Cast):
            out_bytes = op.output_bytes(eb) // op.elements
        elif isinstance(op, Binary):
            others = [s for s in op.inputs if s != tail]
            if op.other_elements != op.elements:
                const_bytes += size_bytes(op.other_elements, eb)
                const_per_col += bits_of(eb)        # bits per output column
            else:
                residual = others[0]
                if tail == group.anchor and op.fn == "add":
                    preload = True          # added by the accumulators: no vector work
                    tail = name
                    continue
        works.append(op.work())
        tail = name
    epi = Epilogue(combined_work(works) if works else None, out_bytes, preload=preload)
    extra = 0
    if residual is not None:
        epi.residual_addr = addr[residual]
        epi.residual_deps = tuple(d for d in (ready.get(residual),) if d is not None)
        extra = 0 if preload else max(1, bits_of(eb) // 8)  # packed: a whole byte, at most
    if const_bytes:
        epi.const_addr, epi.const_bytes, epi.const_per_col = (alloc.alloc(const_bytes),
                                                              const_bytes, const_per_col)
    if pool is not None:
        conv = by_name[group.anchor]
        h = conv.out_h
        pr = np.arange(pool.out_h)
        first = np.maximum(0, pr * pool.stride_h - pool.pad_top)
        last = np.minimum(h - 1, pr * pool.stride_h - pool.pad_top + pool.kernel_h - 1)
        images = np.arange(pool.batch)[:, None] * h
        epi.pool = pool
        epi.pool_done = (images + last[None, :]).ravel() + 1
        epi.pool_first = (images + first[None, :]).ravel()
    return epi, extra


# ---------------------------------------------------------------------------------------------
# add + norm

def add_norm_plan(add: Binary, norm: Norm, chip: ChipConfig, store_sum: bool) -> VectorPlan:
    """Whole-row tiles of the norm, reading both addends (the second streamed through the
    filter scratchpad beside the kept scale and shift) and writing the norm's output (and the
    sum when ``store_sum``). Raises ``TilingError`` when one row does not fit."""
    bits = chip.array.precision.bits
    cols = norm.cols
    row = nbytes(cols, bits)        # packed rows padded to whole bytes (hw.packing)
    weights = nbytes(norm.weight_elements, bits)
    cap_a = chip.ifmap_sram.tile_capacity_bytes
    cap_b = chip.filter_sram.tile_capacity_bytes - weights
    cap_c = chip.ofmap_sram.tile_capacity_bytes
    out_row = row * (2 if store_sum else 1)
    fit = min(cap_a // row, cap_b // row if cap_b > 0 else 0, cap_c // out_row)
    if fit < 1:
        raise TilingError(f"add_norm {add.name!r}+{norm.name!r}: one row does not fit")
    n = norm.work()
    a = add.work()
    work = VectorWork(f"{a.name}+{n.name}", per_element=combined_work([a, n]).per_element,
                      per_row=n.per_row, reductions=n.reductions, passes=n.passes)
    return VectorPlan(work, norm.rows, cols, min(norm.rows, fit), cols, bits, row,
                      bits, True, weights, out_bits=bits)


# ---------------------------------------------------------------------------------------------
# attention

@dataclass(frozen=True)
class AttentionPlan:
    """Tile sizes of a fused attention: ``br`` query rows and ``bc`` key rows per tile, for
    ``heads`` GEMM pairs of ``sq`` queries, ``sk`` keys, head size ``d`` (scores' K) and ``dv``
    (the context's N)."""

    heads: int
    sq: int
    sk: int
    d: int
    dv: int
    br: int
    bc: int

    @property
    def query_tiles(self) -> int:
        return -(-self.sq // self.br)

    @property
    def key_tiles(self) -> int:
        return -(-self.sk // self.bc)

    def dram_bytes(self, bits: int) -> tuple[int, int]:
        """The closed form (module docstring): bytes read (Q once, K and V once per query
        tile) and written (O once), of ``bits``-bit operands (packed rows padded to whole
        bytes, :mod:`hw.packing`)."""
        h, d, dv = self.heads, nbytes(self.d, bits), nbytes(self.dv, bits)
        reads = h * (self.sq * d + self.query_tiles * self.sk * (d + dv))
        return reads, h * self.sq * dv


def _attention_estimate(p: AttentionPlan, chip: ChipConfig, bits: int, ab: int) -> float:
    """Cycles plan ``p`` needs on the vector engine (the busier of its ALU and special-function
    paths, as :mod:`hw.vector.timing` charges them, and its scratchpad read port) plus DRAM's
    for the K/V stream: a sum, not a max, as the stream runs only one tile ahead of the work
    (double buffering) and the softmax chain waits for each tile. What the tile sizes trade:
    more query rows, fewer K/V reads; more key rows, fewer rescales of the output."""
    v = chip.vector
    h, sq, sk, dv = p.heads, p.sq, p.sk, p.dv
    later = p.key_tiles - 1
    scores = sq * sk
    alu = (scores * 3 + sq * later * (dv + 3) + sq * dv) / v.ops_per_cycle("add")
    sfu = (scores + sq * later) / v.ops_per_cycle("exp")
    port = (2 * scores * ab + 2 * sq * later * dv * ab) / max(1, v.read_bytes_per_cycle)
    reads, writes = p.dram_bytes(bits)
    dram = (reads + writes) / (h * chip.fetch_bytes_per_cycle * DRAM_EFFICIENCY)
    return h * (max(alu, sfu, port) + dram)


def attention_plan(scores: Gemm, context: Gemm, chip: ChipConfig) -> AttentionPlan:
    """Tile sizes of a fused attention. ``B_c`` (key rows) from the array's column count
    doubling up to the keys, each as large as a filter buffer holds K and V tiles; for each,
    ``B_r``: as many query rows as the ifmap buffer (Q and P tiles) and the ofmap buffer (two
    score tiles, P and the output accumulators) hold, rounded down to a multiple of the array's
    rows. The pair with the lowest estimate (:func:`_attention_estimate`; ties: fewer steps)
    wins. Raises ``TilingError`` when not even one query and one key row fit."""
    bits = chip.array.precision.bits
    ab = -(-chip.array.acc_bits // 8)
    sq, sk, d, dv = scores.m, scores.n, scores.k, context.n
    cap_a = chip.ifmap_sram.tile_capacity_bytes
    cap_b = chip.filter_sram.tile_capacity_bytes
    cap_c = chip.ofmap_sram.tile_capacity_bytes
    top = min(sk, cap_b // (nbytes(d, bits) + nbytes(dv, bits)))
    cands, bc = set(), max(1, chip.array.cols)
    while bc < top:
        cands.add(bc)
        bc *= 2
    cands.add(top)
    best = None
    for bc in sorted(c for c in cands if c >= 1):
        br = min(sq, cap_a // (nbytes(d, bits) + nbytes(bc, bits)),
                 cap_c // (bc * 2 * ab + nbytes(bc, bits) + dv * ab))
        if br < 1:
            continue
        if br < sq and br >= chip.array.rows:
            br -= br % chip.array.rows
        plan = AttentionPlan(scores.batch, sq, sk, d, dv, int(br), int(bc))
        key = (_attention_estimate(plan, chip, bits, ab), plan.query_tiles * plan.key_tiles)
        if best is None or key < best[0]:
            best = (key, plan)
    if best is None:
        raise TilingError(f"attention {scores.name!r}: one query and one key row do not fit "
                          f"{chip.name}'s scratchpads")
    return best[1]


def emit_attention(pb: ProgramBuilder, layer: int, plan: AttentionPlan, chip: ChipConfig,
                   strides, *, q_addr: int, k_addr: int, v_addr: int, o_addr: int,
                   q_deps: list, k_deps: list, v_deps: list,
                   extra: VectorWork | None = None) -> tuple[int, int]:
    """The FlashAttention loop (module docstring); returns (last compute, last store).
    ``strides(m, n, k)``: the edge strides of a compute of that shape; ``extra``: a fused
    dropout's work per probability (:func:`online_softmax_work`).

    Software-pipelined as the TPU's and FlashAttention-3's kernels are: the array computes the
    next score tile (into the other of two score buffers) while the vector engine runs the
    softmax of this one, so neither waits for the other more than the dependencies force."""
    bits = chip.array.precision.bits

    def rows(count: int, cols: int) -> int:     # packed rows padded to whole bytes
        return count * nbytes(cols, bits)

    ab = -(-chip.array.acc_bits // 8)
    soft = (online_softmax_work(True, extra), online_softmax_work(False, extra))
    dbl_a, dbl_b = chip.ifmap_sram.double_buffer, chip.filter_sram.double_buffer
    q_use, f_use = [None, None], [None, None]
    s_free = [None, None]
    qs = fs = 0
    q_started = f_started = False
    p_free = o_free = None
    last_store = last_compute = None
    p = plan
    for g in range(p.heads):
        for qi, q0 in enumerate(range(0, p.sq, p.br)):
            br = min(p.br, p.sq - q0)
            if q_started and dbl_a:
                qs ^= 1
            q_started = True
            q_load = pb.transfer(Kind.LOAD, Operand.IFMAP, Location.DRAM, layer,
                                 flat_box(q_addr + rows(g * p.sq + q0, p.d), rows(br, p.d)),
                                 deps=[*q_deps, q_use[qs]], tile=(g, qi, 0, 0))
            keys = list(range(0, p.sk, p.bc))
            issued = []                 # per key tile: (score compute, V load, filter half)

            def score(j):
                nonlocal fs, f_started
                k0 = keys[j]
                bc = min(p.bc, p.sk - k0)
                tile = (g, qi, j, 0)
                if f_started and dbl_b:
                    fs ^= 1
                f_started = True
                k_load = pb.transfer(Kind.LOAD, Operand.FILTER, Location.DRAM, layer,
                                     flat_box(k_addr + rows(g * p.sk + k0, p.d), rows(bc, p.d)),
                                     deps=[*k_deps, f_use[fs]], tile=tile)
                v_load = pb.transfer(Kind.LOAD, Operand.FILTER, Location.DRAM, layer,
                                     flat_box(v_addr + rows(g * p.sk + k0, p.dv),
                                              rows(bc, p.dv)),
                                     deps=[*v_deps, f_use[fs]], tile=tile)
                s = pb.compute(layer, 1, br, bc, p.d, *strides(br, bc, p.d),
                               deps=[q_load, k_load, s_free[j % 2]], tile=tile)
                q_use[qs] = s
                issued.append((s, v_load, fs, bc))

            score(0)
            prev_pv = None
            for j in range(len(keys)):
                if j + 1 < len(keys):
                    score(j + 1)
                s, v_load, half, bc = issued[j]
                tile = (g, qi, j, 0)
                sm = pb.vector(layer, soft[j > 0], br, bc, br * bc * ab, 0, rows(br, bc),
                               deps=[s], tile=tile, source=Operand.OFMAP)
                s_free[j % 2] = sm
                move = pb.transfer(Kind.MOVE, Operand.IFMAP, Location.ONCHIP, layer,
                                   flat_box(0, rows(br, bc)), deps=[sm, p_free], tile=tile)
                deps = [move, v_load]
                if j:
                    deps.append(pb.vector(layer, RESCALE_WORK, br, p.dv, br * p.dv * ab, 0,
                                          br * p.dv * ab, deps=[sm, prev_pv], tile=tile,
                                          source=Operand.OFMAP))
                else:
                    deps.append(o_free)
                pv = pb.compute(layer, 1, br, p.dv, bc, *strides(br, p.dv, bc), deps=deps,
                                tile=tile)
                p_free = prev_pv = last_compute = pv
                f_use[half] = pv
            fin = pb.vector(layer, NORMALISE_WORK, br, p.dv, br * p.dv * ab, 0, rows(br, p.dv),
                            deps=[prev_pv], tile=(g, qi, 0, 0), source=Operand.OFMAP)
            last_store = o_free = pb.transfer(
                Kind.STORE, Operand.OFMAP, Location.DRAM, layer,
                flat_box(o_addr + rows(g * p.sq + q0, p.dv), rows(br, p.dv)), deps=[fin],
                tile=(g, qi, 0, 0))
    return last_compute, last_store


def attention_tiling_fields(plan: AttentionPlan, chip: ChipConfig) -> dict:
    """The layer's :class:`~hw.program.Tiling` fields for a fused attention."""
    bits = chip.array.precision.bits
    ab = -(-chip.array.acc_bits // 8)
    d, dv, bc = (nbytes(x, bits) for x in (plan.d, plan.dv, plan.bc))
    return dict(lowering="gemm", group_tile=1, m_tile=plan.br, n_tile=plan.bc, k_tile=plan.d,
                order="flash", tiles=plan.heads * plan.query_tiles * plan.key_tiles * 2,
                ifmap_tile_bytes=plan.br * (d + bc),
                filter_tile_bytes=plan.bc * (d + dv),
                ofmap_tile_bytes=plan.br * (plan.bc * 2 * ab + bc + plan.dv * ab),
                input_resident=False, output_resident=False, estimated_cycles=0)

