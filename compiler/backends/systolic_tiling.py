"""The systolic backend's tiler: tile one GEMM or convolution to fit the chip's scratchpads and
pick its loop order.

The matrix view of every op is ``count`` GEMMs ``C (M x N) = A (M x K) @ B (K x N)`` (see
:mod:`compiler.ir`). A tiling picks a tile ``(g_t, m_t, n_t, k_t)`` and an order of the three
tile loops (the group loop is always outermost). Convolutions are tiled in one of two ways:

* ``direct`` (default): the ifmap scratchpad holds an NHWC input *patch* — the input rows an
  output-row tile needs (its halo included) for a slice of input channels — and the array's
  address generator reads im2col vectors out of it. M tiles are whole output rows of one image
  (or whole images), K tiles are input-channel slices times the full kernel window. Halo rows
  are fetched again by the next row tile.
* ``im2col``: the expanded ``M x K`` matrix is what DRAM holds (written by the host or the
  previous layer), exactly as SCALE-Sim assumes; A tiles are sub-matrices of it.

Footprints, all checked against **one buffer** of the scratchpad (half of it when double-buffered,
see :attr:`hw.memory.sram.SramConfig.tile_capacity_bytes`)::

    ifmap  = g_t * m_t * k_t * bytes          (im2col / GEMM)
             g_t * patch_rows * in_w * c_t * bytes  (direct)
    filter = g_t * k_t * n_t * bytes
    ofmap  = g_t * m_t * n_t * acc_bytes      (partial sums are accumulator-wide)

DRAM traffic of a loop order follows from reuse: a tile of an operand is fetched again only when
one of its own indices changes, so operand X is read ``pass(X) * prod(trips of the loops outside
X's innermost loop that do not index X)`` bytes (loops of one trip are ignored). Partial sums
stay on chip when ``k`` is the innermost loop with more than one trip; otherwise every C tile is
spilled (written at accumulator width) and reloaded ``k_tiles - 1`` times. Bytes are counted in
whole DRAM bursts per contiguous chunk, so layouts that scatter small chunks cost what they cost.

The choice minimises ``max(compute cycles, DRAM bytes / (peak bytes per cycle * 0.8))`` (the
compute cycles are the timing engine's, summed over every tile shape, so small tiles pay their
fill and drain), then DRAM bytes, then tile count, then a fixed order of candidates: the result
is deterministic. The estimate only ranks candidates; the executor's cycles are the real ones.

The search costs every tiling that fits in order of its compute cycles and stops at the first
whose compute cycles exceed the best estimate so far (no estimate is below its compute cycles):
the same choice as costing every candidate (checked on 748 ops of seven models on five chips,
both objectives) at a fraction of the work: ResNet-50's 34 tilings on the default chip take
0.07 s instead of 1.2 s.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

from compiler.options import ORDERS
from hw.chip import ChipConfig
from hw.packing import bits_of, granule, nbytes
from hw.sparsity import filter_read_bits, nm_or_dense, row_cuts, weight_bits, whole_groups
from hw.systolic.config import Dataflow
from hw.systolic.geometry import geometry
from hw.systolic.mapping import K_CYCLES
from hw.systolic.timing import tile_counters

__all__ = ["TileProblem", "TileChoice", "choose_tiling", "TilingError", "DRAM_EFFICIENCY",
           "TIME_GRANULE"]

#: Fraction of DRAM peak the tiler's estimate assumes for streaming tile loads.
DRAM_EFFICIENCY = 0.8
#: Granule of the candidate tile sizes of the GEMM dimension the array streams (not spread
#: over its rows or columns).
TIME_GRANULE = 16


class TilingError(ValueError):
    """No tiling of an op fits the chip's scratchpads."""


@dataclass(frozen=True)
class TileProblem:
    """One op's matrix view plus what the tiler needs to know about its tensors.

    For ``lowering == "direct"`` the conv geometry fields are set; for ``"gemm"`` and ``"im2col"``
    ``M`` is the row count of ``A``.
    """

    name: str
    lowering: str            # "gemm" | "direct" | "im2col"
    count: int
    m: int
    n: int
    k: int
    elem_bytes: int          # bytes per operand; hw.packing.Packed for int4 / binary (packed)
    acc_bytes: int
    b_is_weight: bool = True
    b_bits: int = 0          # bits per stored B element when narrower than elem_bytes (Gemm.w_bits)
    # (N, M): B is N:M sparse along K and runs compressed on the array's sparse PEs
    # (hw.sparsity.array_nm): stored as N of every M values plus a ceil(log2 M)-bit index each
    nm: tuple[int, int] | None = None
    # row-wise N:M: ((N, channels), ...) of B's n output channels, sorted largest N first; each
    # N tile runs at the N of its first channel (N = M: dense). nm is then the sparse PEs'
    # (largest N < M, M). None: every channel has nm's N.
    nm_rows: tuple[tuple[int, int], ...] | None = None
    # fraction of A's elements that are zero: those MACs are gated (energy only)
    act_zeros: float = 0.0
    # (format, stored bytes, elements): B's weights kept in an unstructured-sparse format
    # (hw.sparsity.stored_weight_bytes), every tile at the whole tensor's bytes per element
    b_store: tuple[str, int, int] | None = None
    # direct convolution geometry (NHWC)
    batch: int = 1
    out_h: int = 1
    out_w: int = 1
    in_h: int = 1
    in_w: int = 1
    in_channels: int = 1     # per group
    kernel_h: int = 1
    kernel_w: int = 1
    stride_h: int = 1
    dilation_h: int = 1
    pad_top: int = 0
    # bytes per output element the ofmap tile holds beside its accumulators (a fused
    # epilogue's residual tile)
    out_extra_bytes: int = 0

    @property
    def b_ratio(self) -> tuple[int, int]:
        """``(num, den)``: ``elements`` B elements take ``ceil(elements * num / den)`` bytes as
        stored (:attr:`b_bits`; N:M compressed: ``N / M`` of them with their indices; row-wise
        N:M: the largest over its N tiles, what a tile buffer must hold)."""
        if self.nm_rows is not None:
            m = self.nm[1]
            return max((self._b_ratio(nm_or_dense(n, m)) for n, _ in self.nm_rows),
                       key=lambda r: r[0] / r[1])
        return self._b_ratio(self.nm)

    def tile_nm(self, n0: int) -> tuple[int, int] | None:
        """The N:M the N tile starting at output channel ``n0`` runs with: :attr:`nm`, or for
        row-wise N:M the N of channel ``n0``, the largest the tile holds (None: dense)."""
        if self.nm_rows is None:
            return self.nm
        first, m = 0, self.nm[1]
        for n, channels in self.nm_rows:
            first += channels
            if n0 < first:
                return nm_or_dense(n, m)
        return nm_or_dense(self.nm_rows[-1][0], m)

    def n_segments(self, n0: int, nsz: int, fold: int) -> list[tuple[int, int, tuple | None]]:
        """The N tile ``[n0, n0 + nsz)`` as the computes that run it: ``(first, size, nm)``.
        One, at :attr:`nm`, unless B is row-wise N:M: then a compute per N the tile holds,
        cut where the sorted channels change N, rounded up to whole ``fold``-wide column folds
        from ``n0`` (a fold runs at the largest N of its channels; ``fold`` 1: exact cuts, for a
        dataflow that streams N in time)."""
        if self.nm_rows is None:
            return [(n0, nsz, self.nm)]
        return [(a, b - a, self.tile_nm(a)) for a, b in row_cuts(self.nm_rows, n0, nsz, fold)]

    def b_bytes_of(self, kt: int, nt: int, count: int, nm) -> int:
        """Stored bytes of ``count`` B tiles of ``kt x nt`` elements run with ``nm`` (a
        segment of row-wise N:M, :meth:`n_segments`): whole groups, as the array runs them."""
        num, den = self._b_ratio(nm)
        return -(-count * whole_groups(kt, nm) * nt * num // den)

    def _b_ratio(self, nm) -> tuple[int, int]:
        bits = self.b_bits or self.elem_bits        # as stored, or the operand's
        if nm is not None:
            n, m = nm
            return n * weight_bits(bits, nm), 8 * m
        if self.b_store is not None:
            _, stored, elements = self.b_store
            g = math.gcd(stored, elements) or 1
            return stored // g, elements // g
        return bits, 8

    def filter_read_bits(self, value_bits: int) -> tuple[int, int]:
        """``(num, den)``: a layer's ``reads`` filter-port reads carry
        ``ceil(reads * num / den)`` bits: the operand's ``value_bits`` plus its N:M index, or
        the stored bits per element of weights kept in a sparse format
        (:func:`npulab.simulate.array_actions` and the executor charge the same)."""
        return filter_read_bits(value_bits, self.nm, self.b_store)

    def b_tile(self, kt: int, nt: int, count: int = 1) -> int:
        """Stored bytes of ``count`` B tiles of ``kt x nt`` elements: N:M compressed tiles hold
        whole groups (:meth:`array_k`), as the array runs them (row-wise N:M: at the largest
        per-element size, what a buffer must hold; :meth:`b_bytes_of` a segment's own).
        A second activation packed narrower than a byte has its rows of ``nt`` padded to whole
        bytes (:mod:`hw.packing`)."""
        if not self.b_is_weight:
            return count * kt * nbytes(nt, self.elem_bits)
        return self.b_size(count * self.array_k(kt) * nt)

    def b_size(self, elements: int) -> int:
        """Bytes of ``elements`` B elements as stored (:attr:`b_ratio`), rounded up to a byte."""
        num, den = self.b_ratio
        return -(-elements * num // den)

    @property
    def b_element_bytes(self) -> float:
        """Average stored bytes per B element (:attr:`b_ratio`, unrounded)."""
        num, den = self.b_ratio
        return num / den

    @property
    def elem_bits(self) -> int:
        """Bits per operand (4 for int4, 1 for binary: packed, :mod:`hw.packing`)."""
        return bits_of(self.elem_bytes)

    @property
    def packed_groups(self) -> bool:
        """A direct convolution whose groups' channels, packed below a byte, do not fill whole
        bytes: groups share bytes of every NHWC pixel, so each tile takes every group and every
        channel (whole pixels), and its bytes are counted per tile of all groups, not per
        group (:mod:`hw.packing`)."""
        g = self.granule
        return (g > 1 and self.lowering == "direct" and self.count > 1
                and bool(self.in_channels % g or self.n % g))

    @property
    def granule(self) -> int:
        """Operands per byte when packed (2 for int4, 8 for binary), else 1: tiles cut a
        tensor's innermost dimension at multiples of it, or take the whole row
        (:func:`hw.packing.granule`)."""
        return granule(self.elem_bits)

    def array_k(self, k: int) -> int:
        """The K a tile of ``k`` rows presents to the timing engine: whole N:M groups (a tile
        ending inside a group runs it padded)."""
        return whole_groups(k, self.nm)

    @property
    def m_units(self) -> int:
        """Units the M loop tiles: output rows over all images (direct) or matrix rows."""
        return self.batch * self.out_h if self.lowering == "direct" else self.m

    @property
    def unit_pixels(self) -> int:
        return self.out_w if self.lowering == "direct" else 1

    @property
    def k_unit(self) -> int:
        """GEMM K elements per K-tile unit (a channel times the kernel window for direct)."""
        return self.kernel_h * self.kernel_w if self.lowering == "direct" else 1

    @property
    def k_units(self) -> int:
        return self.in_channels if self.lowering == "direct" else self.k

    @property
    def input_bytes(self) -> int:
        """Bytes of the whole input operand (every group): the NHWC input for ``direct``, the
        ``M x K`` matrix otherwise. What the ifmap scratchpad holds when the input stays on chip
        (the lowering's on-chip move and the mapper's cost of it)."""
        bits = self.elem_bits       # packed rows (pixels) padded to whole bytes
        if self.lowering == "direct":
            return (self.batch * self.in_h * self.in_w
                    * nbytes(self.count * self.in_channels, bits))
        return self.count * self.m * nbytes(self.k, bits)

    def input_rows(self, first_row: int, rows: int) -> int:
        """In-bounds input rows that output rows ``[first_row, first_row + rows)`` of one image read."""
        top = first_row * self.stride_h - self.pad_top
        bottom = (first_row + rows - 1) * self.stride_h - self.pad_top + self.dilation_h * (self.kernel_h - 1)
        return max(0, min(bottom, self.in_h - 1) - max(top, 0) + 1)

    def m_tile_shapes(self, unit_tile: int) -> Counter:
        """Counter ``(units, a_rows) -> tiles per GEMM``: :meth:`m_tiles` in closed form (a few
        distinct shapes, whatever M is), so costing a tiling is independent of M's size."""
        mu = unit_tile
        if self.lowering != "direct":
            full, rest = divmod(self.m, mu)
            c = Counter({(mu, mu): full})
            if rest:
                c[(rest, rest)] += 1
            return c
        if mu >= self.out_h:
            images = mu // self.out_h
            full, rest = divmod(self.batch, images)
            c = Counter({(images * self.out_h, images * self.in_h): full})
            if rest:
                c[(rest * self.out_h, rest * self.in_h)] += 1
            return c
        c = Counter()
        for r in range(0, self.out_h, mu):
            rows = min(mu, self.out_h - r)
            c[(rows, self.input_rows(r, rows))] += self.batch
        return c

    def m_tiles(self, unit_tile: int) -> list[tuple[int, int, int]]:
        """``(first_unit, units, a_rows)`` of every M tile; ``a_rows`` is input rows (direct) or
        A matrix rows."""
        if self.lowering != "direct":
            return [(u, min(unit_tile, self.m - u), min(unit_tile, self.m - u))
                    for u in range(0, self.m, unit_tile)]
        tiles = []
        if unit_tile >= self.out_h:  # whole images
            images = unit_tile // self.out_h
            for b in range(0, self.batch, images):
                nb = min(images, self.batch - b)
                tiles.append((b * self.out_h, nb * self.out_h, nb * self.in_h))
            return tiles
        for b in range(self.batch):
            for r in range(0, self.out_h, unit_tile):
                rows = min(unit_tile, self.out_h - r)
                tiles.append((b * self.out_h + r, rows, self.input_rows(r, rows)))
        return tiles


@dataclass(frozen=True)
class TileChoice:
    """A feasible tiling with its estimated cost."""

    group_tile: int
    m_units: int           # M tile in units (rows)
    n_tile: int
    k_units: int           # K tile in units (channels for direct)
    order: str
    ifmap_bytes: int
    filter_bytes: int
    ofmap_bytes: int
    dram_bytes: int        # exact bytes moved to and from DRAM (the executor's count)
    compute_cycles: int
    estimated_cycles: int
    tiles: int
    dataflow: Dataflow | None = None   # set by the mapper on a reconfigurable array


def _candidates(extent: int, granule: int) -> list[int]:
    """Powers of two times ``granule`` below ``extent``, plus ``extent`` itself."""
    out = {extent}
    value = max(1, granule)
    while value < extent:
        out.add(value)
        value *= 2
    small = 1
    while small < min(granule, extent):  # allow tiles smaller than the array when SRAM is tiny
        out.add(small)
        small *= 4
    return sorted(out)


def _split(extent: int, tile: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """``extent`` cut into tiles of ``tile``: ``((size, count), ...)`` (the full tiles, then the
    rest) and the number of tiles."""
    full, rest = divmod(extent, tile)
    return (((tile, full), (rest, 1)) if rest else ((tile, full),)), full + (1 if rest else 0)


def _burst(nbytes: int, burst: int) -> int:
    return -(-nbytes // burst) * burst


def _reuse_factor(order: str, trips: dict[str, int], dims: str) -> int:
    """How many times one pass over an operand's tiles is fetched under ``order``."""
    loops = [d for d in order if trips[d] > 1]
    own = [i for i, d in enumerate(loops) if d in dims]
    if not own:
        return 1
    return math.prod(trips[d] for d in loops[:own[-1]] if d not in dims)


def _psum_resident(order: str, trips: dict[str, int]) -> bool:
    loops = [d for d in order if trips[d] > 1]
    return not loops or loops[-1] == "k" or "k" not in loops


def tile_capacities(p: TileProblem, chip: ChipConfig,
                    output_resident: bool = False) -> tuple[int, int, int]:
    """Bytes one ifmap, filter and ofmap tile may take (one buffer of each scratchpad); with
    ``output_resident`` the whole output must also fit the ofmap scratchpad."""
    cap_a = chip.ifmap_sram.tile_capacity_bytes
    cap_b = chip.filter_sram.tile_capacity_bytes
    cap_c = chip.ofmap_sram.tile_capacity_bytes
    if output_resident:
        out_total = (p.m * nbytes(p.count * p.n, p.elem_bits) if p.lowering == "direct"
                     else p.count * p.m * nbytes(p.n, p.elem_bits))
        cap_c = min(cap_c, (chip.ofmap_sram.capacity_bytes - out_total)
                    // (2 if chip.ofmap_sram.double_buffer else 1))
    if p.out_extra_bytes:       # the accumulators' share of a buffer shared with a residual
        cap_c = cap_c * p.acc_bytes // (p.acc_bytes + p.out_extra_bytes)
    return cap_a, cap_b, cap_c


def grid_candidates(p: TileProblem, arr, dataflow: Dataflow) -> tuple[list, list, list]:
    """The tiler's candidate tile sizes (in units) for M, N and K: powers of two times the
    array side each GEMM dimension is spread over under ``dataflow`` (its granule,
    :data:`TIME_GRANULE` for the streamed one), plus the full extent; direct convolutions tile M as rows inside an image or whole images."""
    gm, gn, gk = geometry(dataflow).per_dim(arr.rows, arr.cols, TIME_GRANULE)
    m_cands = _candidates(p.m_units, max(1, -(-gm // p.unit_pixels)))
    if p.lowering == "direct":
        m_cands = sorted({u for u in m_cands if u < p.out_h}
                         | {p.out_h * i for i in _candidates(p.batch, 1)})
    k_cands = _candidates(p.k_units, max(1, -(-gk // p.k_unit)))
    n_cands = _candidates(p.n, gn)
    if p.packed_groups:
        return m_cands, [p.n], [p.k_units]
    return (m_cands, packed_sizes(p.n, n_cands, p.granule),
            packed_sizes(p.k_units, k_cands, p.granule))


def packed_sizes(extent: int, sizes, granule: int) -> list[int]:
    """``sizes`` a tile may take along a packed tensor's innermost dimension: multiples of
    ``granule`` operands (whole bytes, :mod:`hw.packing`) or the whole ``extent``."""
    if granule == 1:
        return list(sizes)
    return sorted({t for t in sizes if t % granule == 0 or t >= extent} | {extent})


def choose_tiling(p: TileProblem, chip: ChipConfig, *, input_resident: bool = False,
                  output_resident: bool = False, order: str | None = None,
                  objective: str = "latency") -> TileChoice:
    """The best feasible tiling of ``p`` on ``chip`` (see the module docstring).

    ``input_resident``: the whole input is already in the ifmap scratchpad (the caller checked
    that it fits), so A tiles cost no DRAM traffic and need no buffer of their own. ``output_resident``: the whole output must also fit the ofmap
    scratchpad next to the accumulator tiles. ``order`` forces a loop order. ``objective``:
    ``"latency"`` (default, the estimate above) or ``"traffic"`` (fewest DRAM bytes first; with a
    fixed order, more SRAM then never means more traffic, since every smaller tiling still fits).

    Raises :class:`TilingError` naming the op and the scratchpad that is too small.
    """
    arr = chip.array
    bits, ab = p.elem_bits, p.acc_bytes
    burst = chip.dram.request_bytes if not chip.dram.is_ideal else 1
    cap_a, cap_b, cap_c = tile_capacities(p, chip, output_resident)
    bw = chip.fetch_bytes_per_cycle * DRAM_EFFICIENCY
    unit_px = p.unit_pixels
    m_cands, n_cands, k_cands = grid_candidates(p, arr, arr.dataflow)
    orders = ORDERS if order is None else (order,)
    best = None
    best_key = None
    smallest: dict[str, int] = {}   # per scratchpad, the smallest tile that did not fit

    def too_big(name: str, nbytes: int) -> None:
        smallest[name] = min(smallest.get(name, nbytes), nbytes)

    if objective not in ("latency", "traffic"):
        raise ValueError(f"objective = {objective!r}: must be 'latency' or 'traffic'")
    # Pass 1: every tiling that fits, with its compute cycles (the same for every loop order).
    k_unit = p.k_unit
    k_split = {ku: _split(p.k_units, ku) for ku in k_cands}
    n_split = {nt: _split(p.n, nt) for nt in n_cands}
    g_split = {gt: _split(p.count, gt)[0] for gt in _candidates(p.count, 1)}
    cycles: dict[tuple[int, int, int, int], int] = {}     # tile shape -> compute cycles

    def tile_cycles(m: int, n: int, k: int, g: int) -> int:
        v = cycles.get((m, n, k, g))
        if v is None:
            v = cycles[(m, n, k, g)] = tile_counters(arr, m, n, p.array_k(k), g,
                                                     p.nm)[K_CYCLES]
        return v

    feasible = []
    for mu in m_cands:
        shapes = p.m_tile_shapes(mu)          # (units, rows) -> count: cost independent of M
        mtiles = [(cnt, units, rows) for (units, rows), cnt in shapes.items() if cnt]
        max_rows = max(t[2] for t in mtiles)
        m_sizes = Counter()
        for cnt, units, _ in mtiles:
            m_sizes[units * unit_px] += cnt
        m_items = tuple(m_sizes.items())
        m_trips = sum(m_sizes.values())
        for ku in k_cands:
            kt = ku * k_unit
            if p.packed_groups:     # per group, so that count of them hold whole pixels
                a_fp = -(-max_rows * p.in_w * nbytes(p.count * ku, bits) // p.count)
            elif p.lowering == "direct":
                a_fp = max_rows * p.in_w * nbytes(ku, bits)
            else:
                a_fp = mu * nbytes(kt, bits)
            if a_fp > cap_a and not input_resident:
                too_big("ifmap", a_fp)
                continue
            k_items, k_trips = k_split[ku]
            a_passes = None                   # computed when a tiling with this (mu, ku) is costed
            for nt in n_cands:
                b_fp, c_fp = p.b_tile(kt, nt), mu * unit_px * nt * ab
                if b_fp > cap_b:
                    too_big("filter", b_fp)
                    continue
                if c_fp > cap_c:
                    too_big("ofmap", c_fp)
                    continue
                n_items, n_trips = n_split[nt]
                trips = {"m": m_trips, "n": n_trips, "k": k_trips}
                single = m_trips == n_trips == k_trips == 1
                g_opts = ([p.count] if p.packed_groups
                          else _candidates(p.count, 1) if single else [1])
                for gt in g_opts:
                    if ((gt * a_fp > cap_a and not input_resident) or gt * b_fp > cap_b
                            or gt * c_fp > cap_c):
                        continue
                    compute = 0
                    for gsz, gc in g_split[gt]:
                        for msz, mc in m_items:
                            for nsz, nc in n_items:
                                for ksz, kc in k_items:
                                    compute += gc * mc * nc * kc * tile_cycles(
                                        msz, nsz, ksz * k_unit, gsz)
                    if a_passes is None:
                        a_passes = [shapes, k_items, None]
                    feasible.append((compute, mu, ku, nt, gt, a_fp, b_fp, c_fp, mtiles,
                                     k_items, n_items, trips, a_passes))
    # Pass 2: cost the loop orders. A tiling's estimate is never below its compute cycles, so
    # under the latency objective, in order of compute, the search stops at the first tiling
    # whose compute exceeds the best estimate found (the key is unique per candidate, so the
    # order of the search does not change the choice).
    if objective == "latency":
        feasible.sort(key=lambda c: c[0])
    finite_bw = math.isfinite(bw)
    for (compute, mu, ku, nt, gt, a_fp, b_fp, c_fp, mtiles, k_sizes, n_sizes, trips,
         a_passes) in feasible:
        if objective == "latency" and best_key is not None and compute > best_key[0]:
            break
        if a_passes[2] is None:
            shapes = a_passes[0]
            a_passes[2] = (_a_pass_shapes(p, shapes, k_sizes, bits, burst),
                           _a_pass_shapes(p, shapes, k_sizes, bits, 1))
        g_trips = -(-p.count // gt)
        passes = []
        for unit, a_p in zip((burst, 1), a_passes[2]):   # bus bytes (whole bursts), exact bytes
            b_pass = sum(kc * nc * _b_bytes(p, ksz * p.k_unit, nsz, bits, unit)
                         for ksz, kc in k_sizes for nsz, nc in n_sizes)
            c_pass = sum(mt[0] * nc * _c_bytes(p, mt, nsz, bits, unit)
                         for mt in mtiles for nsz, nc in n_sizes)
            c_acc = sum(mt[0] * nc * _burst(mt[1] * unit_px * nsz * ab, unit)
                        for mt in mtiles for nsz, nc in n_sizes)
            passes.append((a_p, b_pass, c_pass, c_acc))
        tiles = g_trips * trips["m"] * trips["n"] * trips["k"]
        for o in orders:
            ra, rb, psum = _order_factors(o, trips)
            # bytes per GEMM times the groups; packed groups: per tile of all of them
            bus, dram = (_traffic_of(ra, rb, psum, trips["k"], input_resident,
                                     output_resident, *ps) * (1 if p.packed_groups else p.count)
                         for ps in passes)
            est = max(compute, math.ceil(bus / bw) if finite_bw else 0)
            key = (est, dram, tiles) if objective == "latency" else (dram, est, tiles)
            key += (ORDERS.index(o), -mu, -nt, -ku, -gt)
            if best_key is None or key < best_key:
                best_key = key
                best = TileChoice(
                    group_tile=gt, m_units=mu, n_tile=nt, k_units=ku, order=o,
                    ifmap_bytes=0 if input_resident else gt * a_fp, filter_bytes=gt * b_fp,
                    ofmap_bytes=gt * c_fp, dram_bytes=dram, compute_cycles=compute,
                    estimated_cycles=est, tiles=tiles)
    if best is None:
        what = "; ".join(f"{k} scratchpad needs at least {v} bytes per tile, "
                         f"{_buffer_origin(k, chip, output_resident)}"
                         for k, v in sorted(smallest.items()))
        raise TilingError(
            f"{p.name}: no tiling fits the scratchpads (one buffer: ifmap {cap_a} B, filter "
            f"{cap_b} B, ofmap {cap_c} B){'; ' + what if what else ''}; enlarge "
            f"sram.*.capacity_kib"
            + (" or bring sram.*.buffer_split nearer 0.5" if any(
                chip.sram(k).double_buffer for k in smallest) else "")
        )
    return best


def _buffer_origin(name: str, chip: ChipConfig, output_resident: bool) -> str:
    """Which config keys size one buffer of scratchpad ``name``, with their values."""
    s = chip.sram(name)
    size = f"sram.{name}.capacity_kib = {s.capacity_kib:g}"
    if s.double_buffer:
        split = s.buffer_split
        text = (f"one buffer holds min(sram.{name}.buffer_split = {split:g}, 1 - {split:g}) "
                f"of {size}")
    else:
        text = f"one buffer is {size} (double_buffer = false)"
    if name == "ofmap" and output_resident:
        text += ", less the whole layer output kept on chip"
    return text


def _traffic(order: str, trips, input_resident: bool, output_resident: bool, a_pass: int,
             b_pass: int, c_pass: int, c_acc: int) -> int:
    """DRAM bytes of one GEMM under ``order``, from one pass over each operand's tiles."""
    return _traffic_of(*_order_factors(order, trips), trips["k"], input_resident,
                       output_resident, a_pass, b_pass, c_pass, c_acc)


def _order_factors(order: str, trips) -> tuple[int, int, bool]:
    """``(A reuse factor, B reuse factor, partial sums stay on chip)`` of ``order``."""
    return (_reuse_factor(order, trips, "mk"), _reuse_factor(order, trips, "kn"),
            _psum_resident(order, trips))


def _traffic_of(ra: int, rb: int, psum: bool, k_trips: int, input_resident: bool,
                output_resident: bool, a_pass: int, b_pass: int, c_pass: int, c_acc: int) -> int:
    """DRAM bytes of one GEMM from an order's :func:`_order_factors` (``k_trips``: the K
    loop's trips) and one pass over each operand's tiles."""
    total = (0 if input_resident else a_pass * ra) + b_pass * rb
    total += 0 if output_resident else c_pass
    return total if psum else total + 2 * (k_trips - 1) * c_acc


def _a_tile(p: TileProblem, rows: int, ksz: int, bits: int, burst: int) -> int:
    """DRAM bytes of one A tile of ``rows`` input/A rows and ``ksz`` K units (packed rows
    padded to whole bytes, :mod:`hw.packing`)."""
    if p.packed_groups:         # every group's channels: whole pixels
        return _burst(rows * p.in_w * nbytes(p.count * ksz, bits), burst)
    if p.lowering == "direct":
        if ksz == p.in_channels and p.count == 1:
            return _burst(rows * p.in_w * nbytes(ksz, bits), burst)
        return rows * p.in_w * _burst(nbytes(ksz, bits), burst)
    if ksz == p.k:
        return _burst(rows * nbytes(ksz, bits), burst)
    return rows * _burst(nbytes(ksz, bits), burst)


def _a_pass(p: TileProblem, mtiles, k_sizes: Counter, bits: int, burst: int) -> int:
    """DRAM bytes of one pass over all A tiles of one GEMM (``mtiles``: :meth:`TileProblem.
    m_tiles`)."""
    return sum(kc * _a_tile(p, rows, ksz, bits, burst)
               for ksz, kc in k_sizes.items() for _, _, rows in mtiles)


def _a_pass_shapes(p: TileProblem, shapes: Counter, k_sizes, bits: int, burst: int) -> int:
    """:func:`_a_pass` over :meth:`TileProblem.m_tile_shapes` (one term per distinct shape);
    ``k_sizes``: ``(size, count)`` pairs (:func:`_split`)."""
    return sum(cnt * kc * _a_tile(p, rows, ksz, bits, burst)
               for ksz, kc in k_sizes for (_, rows), cnt in shapes.items())


def _b_bytes(p: TileProblem, kt: int, nt: int, bits: int, burst: int) -> int:
    if p.b_is_weight:       # weights are stored pre-tiled (as stored): one block per group
        return _burst((p.count if p.packed_groups else 1) * p.b_tile(kt, nt), burst)
    if nt == p.n:
        return _burst(kt * nbytes(nt, bits), burst)
    return kt * _burst(nbytes(nt, bits), burst)


def _c_bytes(p: TileProblem, mtile, nt: int, bits: int, burst: int) -> int:
    pixels = mtile[1] * p.unit_pixels
    if p.packed_groups:         # every group's channels: whole pixels
        return _burst(pixels * nbytes(p.count * nt, bits), burst)
    if nt == p.n and p.count == 1:
        return _burst(pixels * nbytes(nt, bits), burst)
    return pixels * _burst(nbytes(nt, bits), burst)


def tile_sizes(extent: int, tile: int) -> list[tuple[int, int]]:
    """``(start, size)`` of each tile of ``extent``."""
    return [(s, min(tile, extent - s)) for s in range(0, extent, tile)]


def loop_nest(order: str, trips: dict[str, int]):
    """Tile indices ``{'m': i, 'n': j, 'k': l}`` in loop order (outermost first)."""
    ranges = [range(trips[d]) for d in order]
    for idx in itertools.product(*ranges):
        yield dict(zip(order, idx))
