"""The mapping space of one op on one chip, as plain arrays for the cost kernel.

A mapping is ``(g_t, m_t, n_t, k_t, order, dataflow)``:

* ``g_t, m_t, n_t, k_t`` — the DRAM -> scratchpad tile (the chip's one buffered memory level;
  inside a tile the array's fold order is the timing engine's). Units as in
  :class:`compiler.backends.systolic_tiling.TileChoice`: ``m`` in output rows for ``direct``
  convolutions (row tiles inside an image, or whole images), GEMM rows otherwise; ``k`` in input
  channels for ``direct``, GEMM K otherwise.
* ``order`` — one of the six tile-loop orders :data:`compiler.options.ORDERS`.
* ``dataflow`` — OS / WS / IS: which two GEMM dimensions the array unrolls spatially on its
  rows x cols (:mod:`hw.systolic.geometry`); the spatial unrolling of this chip.

Per dimension the space holds **every tile size that gives a distinct trip count**
(``ceil(E / trips)`` for ``trips = 1..E``; for ``direct`` M: row tiles ``ceil(out_h / t)``,
``t >= 2``, and whole images ``out_h * ceil(batch / t)``) **plus** the structured grid of
:func:`compiler.backends.systolic_tiling.choose_tiling` (powers of two times the array granule
and the full extent, for every dataflow searched), so the exhaustive optimum is never worse than
the tiler's. A group tile ``g_t > 1`` is only paired with whole-GEMM tiles (one trip in m, n and
k), as in the tiler: the emitter batches whole GEMMs only.

Capacity rules are :func:`~compiler.backends.systolic_tiling.choose_tiling`'s: each tile (times
``g_t``) fits one buffer of its scratchpad; an ``input_resident`` op needs no A buffer; an
``output_resident`` op leaves room for the whole output in the ofmap scratchpad.

The per-GEMM operand bytes of one pass over all tiles (bus bytes in whole DRAM bursts and exact
bytes) are precomputed here per tile-size pair with the tiler's formulas (``_a_pass``,
``_b_bytes``, ``_c_bytes``), in closed form over the few distinct tile shapes.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from compiler.backends.systolic_tiling import (
    TileProblem, TilingError, _candidates, grid_candidates, packed_sizes, tile_capacities,
)
from hw.chip import ChipConfig
from hw.packing import nbytes
from hw.systolic.config import Dataflow

__all__ = ["MappingSpace", "build_space", "distinct_trip_sizes"]

# Columns of the per-dimension option tables: tile (in units), trips, then up to two distinct
# tile sizes in GEMM elements with how many tiles of each (per GEMM; count 0 = unused).
TILE, TRIPS, S0, C0, S1, C1 = range(6)


def distinct_trip_sizes(extent: int) -> np.ndarray:
    """Every tile size giving a distinct trip count: ``ceil(extent / t)``, ``t = 1..extent``."""
    t = np.arange(1, extent + 1, dtype=np.int64)
    return np.unique(-(-extent // t))


@dataclass(frozen=True)
class MappingSpace:
    """Per-dimension tile options and per-pair pass bytes of one op (see the module docstring).

    ``g, m, n, k``: int64 tables ``[options, 6]`` (tile, trips, size0, count0, size1, count1),
    sizes in GEMM elements (rows, cols, K). ``a``: ``[nM, nK, 3]`` (bus bytes, exact bytes,
    footprint per GEMM) of the A operand; ``b``: ``[nK, nN, 2]`` (bus, exact); ``c``:
    ``[nM, nN, 4]`` (bus, exact of the output; bus, exact of one accumulator-width pass).
    ``grid[df]``: boolean masks ``(g, m, n, k)`` of the tiler's structured grid for the
    dataflow. ``feasible_a/b/c``: pairwise capacity masks at ``g_t = 1``; ``g_full``: the group
    options allowed with whole-GEMM tiles.
    """

    problem: TileProblem
    g: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    m_full: int
    n_full: int
    k_full: int
    feasible_a: np.ndarray
    feasible_b: np.ndarray
    feasible_c: np.ndarray
    g_full: np.ndarray            # indices of g options (g_t > 1) feasible with whole tiles
    g_one: int                    # index of g_t = 1
    grid: dict
    caps: tuple[int, int, int]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return len(self.g), len(self.m), len(self.n), len(self.k)

    def combos(self) -> int:
        """Feasible tile combinations ``(g, m, n, k)`` (orders and dataflows not counted)."""
        a = self.feasible_a.astype(np.int64)
        inner = self.feasible_c.astype(np.int64) @ self.feasible_b.astype(np.int64).T  # [m, k]
        return int((a * inner).sum()) + len(self.g_full)

    def feasible(self, ig, im, i_n, ik) -> np.ndarray:
        """Vectorised capacity check of combos (index arrays)."""
        ig, im, i_n, ik = (np.asarray(x, np.int64) for x in (ig, im, i_n, ik))
        one = ig == self.g_one
        ok = one & self.feasible_a[im, ik] & self.feasible_b[ik, i_n] & self.feasible_c[im, i_n]
        whole = (im == self.m_full) & (i_n == self.n_full) & (ik == self.k_full)
        ok |= whole & np.isin(ig, self.g_full)
        return ok

    def all_combos(self) -> tuple[np.ndarray, ...]:
        """Every feasible combo as index arrays ``(g, m, n, k)``, in a fixed order."""
        mk = self.feasible_a[:, :, None] & self.feasible_b[None, :, :]      # [m, k, n]
        ok = mk & self.feasible_c[:, None, :]
        im, ik, i_n = np.nonzero(ok)
        ig = np.full(im.shape, self.g_one, np.int64)
        extra = self.g_full.astype(np.int64)
        ig = np.concatenate([ig, extra])
        im = np.concatenate([im, np.full(extra.shape, self.m_full)])
        i_n = np.concatenate([i_n, np.full(extra.shape, self.n_full)])
        ik = np.concatenate([ik, np.full(extra.shape, self.k_full)])
        return (ig.astype(np.int64), im.astype(np.int64), i_n.astype(np.int64),
                ik.astype(np.int64))

    def grid_combos(self, df: Dataflow) -> tuple[np.ndarray, ...]:
        """The tiler's structured grid for dataflow ``df`` (feasible combos only)."""
        gg, gm, gn, gk = self.grid[df]
        ig, im, ik, i_n = (x.ravel() for x in np.meshgrid(
            np.flatnonzero(gg), np.flatnonzero(gm), np.flatnonzero(gk), np.flatnonzero(gn),
            indexing="ij"))
        keep = self.feasible(ig, im, i_n, ik)
        return ig[keep], im[keep], i_n[keep], ik[keep]


def _two_sizes(sizes: Counter, what: str) -> tuple[int, int, int, int]:
    items = sorted(sizes.items(), key=lambda kv: -kv[0])
    if len(items) > 2:
        raise AssertionError(f"mapper: more than two {what} tile sizes: {items}")
    (s0, c0), (s1, c1) = (items + [(0, 0)])[:2]
    return s0, c0, s1, c1


def _dim_table(extent: int, tiles, unit: int = 1) -> np.ndarray:
    rows = []
    for t in tiles:
        full, rest = divmod(extent, int(t))
        c = Counter({int(t) * unit: full})
        if rest:
            c[rest * unit] += 1
        rows.append((int(t), full + (1 if rest else 0), *_two_sizes(c, "tile")))
    return np.array(rows, np.int64).reshape(-1, 6)


def _grid_sizes(p: TileProblem, chip: ChipConfig, df: Dataflow):
    """The tiler's candidate sizes (units) per dimension for dataflow ``df``."""
    m, n, k = grid_candidates(p, chip.array, df)
    return _candidates(p.count, 1), m, n, k


def _m_tiles(p: TileProblem, mu: int) -> Counter:
    """Counter ``(units, a_rows) -> tiles per GEMM`` (:meth:`TileProblem.m_tile_shapes`)."""
    return p.m_tile_shapes(mu)


def build_space(p: TileProblem, chip: ChipConfig, dataflows, *, input_resident: bool = False,
                output_resident: bool = False) -> MappingSpace:
    """The mapping space of ``p`` on ``chip`` for ``dataflows`` (see the module docstring)."""
    if p.packed_groups:
        raise TilingError(f"{p.name or 'op'}: its groups' {p.elem_bits}-bit channels share "
                          f"bytes, so every tile takes all {p.count} groups, which the "
                          f"mapper's space does not hold; npulab run tiles it")
    bits, ab = p.elem_bits, p.acc_bytes
    # bytes of x operands, packed rows padded to whole bytes (elementwise on the tables)
    nb = functools.partial(nbytes, bits=bits)
    b_num, b_den = p.b_ratio
    burst = chip.dram.request_bytes if not chip.dram.is_ideal else 1
    cap_a, cap_b, cap_c = tile_capacities(p, chip, output_resident)
    grids = {df: _grid_sizes(p, chip, df) for df in dataflows}
    # ---- per-dimension options: distinct trip counts plus the tiler's grid
    if p.lowering == "direct":
        rows = {int(u) for u in distinct_trip_sizes(p.out_h) if u < p.out_h}
        images = {p.out_h * int(i) for i in distinct_trip_sizes(p.batch)}
        m_opts = rows | images
    else:
        m_opts = {int(u) for u in distinct_trip_sizes(p.m)}
    n_opts = {int(u) for u in distinct_trip_sizes(p.n)}
    k_opts = {int(u) for u in distinct_trip_sizes(p.k_units)}
    g_opts = {int(u) for u in distinct_trip_sizes(p.count)}
    for g, m, n, k in grids.values():
        g_opts |= set(g)
        m_opts |= set(m)
        n_opts |= set(n)
        k_opts |= set(k)
    m_opts, n_opts, k_opts, g_opts = (sorted(s) for s in (m_opts, n_opts, k_opts, g_opts))
    # packed operands: cuts along the innermost dimensions at whole bytes (hw.packing)
    n_opts = packed_sizes(p.n, n_opts, p.granule)
    k_opts = packed_sizes(p.k_units, k_opts, p.granule)

    gt = _dim_table(p.count, g_opts)
    nt = _dim_table(p.n, n_opts)
    kt = _dim_table(p.k_units, k_opts, p.k_unit)
    # M: per option the (units, rows) tiles -> trips, two sizes, largest A patch
    mt_rows, m_tiles = [], []
    for mu in m_opts:
        tiles = _m_tiles(p, mu)
        sizes = Counter()
        for (units, _rows), cnt in tiles.items():
            sizes[units * p.unit_pixels] += cnt
        mt_rows.append((mu, sum(tiles.values()), *_two_sizes(sizes, "M")))
        m_tiles.append(tiles)
    mt = np.array(mt_rows, np.int64).reshape(-1, 6)
    nM, nN, nK = len(mt), len(nt), len(kt)
    # ---- per-GEMM bytes of one pass over each operand's tiles (the tiler's formulas)
    a = np.zeros((nM, nK, 3), np.int64)
    ks = kt[:, [S0, S1]] // p.k_unit          # K sizes in units
    kc = kt[:, [C0, C1]]
    for i, (mu, tiles) in enumerate(zip(m_opts, m_tiles)):
        max_rows = max(r for (_u, r) in tiles)
        for j, unit in enumerate((burst, 1)):
            total = np.zeros(nK, np.int64)
            for (units, rows), cnt in tiles.items():
                for col in range(2):
                    ksz, kcount = ks[:, col], kc[:, col]
                    if p.lowering == "direct":
                        whole = (ksz == p.in_channels) & (p.count == 1)
                        per = np.where(whole, -(-(rows * p.in_w * nb(ksz)) // unit) * unit,
                                       rows * p.in_w * (-(-nb(ksz) // unit) * unit))
                    else:
                        whole = ksz == p.k
                        per = np.where(whole, -(-(rows * nb(ksz)) // unit) * unit,
                                       rows * (-(-nb(ksz) // unit) * unit))
                    total += cnt * kcount * per
            a[i, :, j] = total
        if p.lowering == "direct":
            a[i, :, 2] = max_rows * p.in_w * nb(kt[:, TILE])
        else:
            a[i, :, 2] = mu * nb(kt[:, TILE] * p.k_unit)
    b = np.zeros((nK, nN, 2), np.int64)
    for j, unit in enumerate((burst, 1)):
        for kcol in range(2):
            kel = kt[:, [S0, S1][kcol]][:, None]
            kcount = kt[:, [C0, C1][kcol]][:, None]
            for ncol in range(2):
                nsz = nt[:, [S0, S1][ncol]][None, :]
                ncount = nt[:, [C0, C1][ncol]][None, :]
                block = (p.b_is_weight) | (nsz == p.n)
                # stored bytes (TileProblem.b_tile): N:M tiles hold whole groups; a second
                # activation's rows of n whole bytes
                kst = kel if p.nm is None else -(-kel // p.nm[1]) * p.nm[1]
                whole = (-(-(kst * nsz * b_num) // b_den) if p.b_is_weight
                         else kel * nb(nsz))
                per = np.where(block, -(-whole // unit) * unit,
                               kel * (-(-nb(nsz) // unit) * unit))
                b[:, :, j] += kcount * ncount * per
    c = np.zeros((nM, nN, 4), np.int64)
    for i, tiles in enumerate(m_tiles):
        for j, unit in enumerate((burst, 1)):
            for (units, _rows), cnt in tiles.items():
                pixels = units * p.unit_pixels
                for ncol in range(2):
                    nsz, ncount = nt[:, [S0, S1][ncol]], nt[:, [C0, C1][ncol]]
                    whole = (nsz == p.n) & (p.count == 1)
                    per = np.where(whole, -(-(pixels * nb(nsz)) // unit) * unit,
                                   pixels * (-(-nb(nsz) // unit) * unit))
                    c[i, :, j] += cnt * ncount * per
                    c[i, :, 2 + j] += cnt * ncount * (-(-(pixels * nsz * ab) // unit) * unit)
    # ---- capacity masks at g_t = 1 and the group options for whole-GEMM tiles
    b_el = kt[:, TILE][:, None] * p.k_unit * nt[:, TILE][None, :]
    b_fp = (-(-(b_el * b_num) // b_den) if p.b_is_weight
            else kt[:, TILE][:, None] * p.k_unit * nb(nt[:, TILE][None, :]))
    c_fp = mt[:, TILE][:, None] * p.unit_pixels * nt[:, TILE][None, :] * ab
    fa = np.ones((nM, nK), bool) if input_resident else a[:, :, 2] <= cap_a
    fb = b_fp <= cap_b
    fc = c_fp <= cap_c
    m_full = int(np.flatnonzero(mt[:, TRIPS] == 1)[0])
    n_full = int(np.flatnonzero(nt[:, TRIPS] == 1)[0])
    k_full = int(np.flatnonzero(kt[:, TRIPS] == 1)[0])
    g_one = int(np.flatnonzero(gt[:, TILE] == 1)[0])
    big = gt[:, TILE] > 1
    g = gt[:, TILE]
    ok_g = (big & ((g * a[m_full, k_full, 2] <= cap_a) | input_resident)
            & (g * b_fp[k_full, n_full] <= cap_b) & (g * c_fp[m_full, n_full] <= cap_c))
    g_full = np.flatnonzero(ok_g).astype(np.int64)
    grid = {}
    for df, (gg, gm, gn, gk) in grids.items():
        single_ok = np.isin(gt[:, TILE], gg)
        grid[df] = (single_ok, np.isin(mt[:, TILE], gm), np.isin(nt[:, TILE], gn),
                    np.isin(kt[:, TILE], gk))
    return MappingSpace(problem=p, g=gt, m=mt, n=nt, k=kt, a=a, b=b, c=c, m_full=m_full,
                        n_full=n_full, k_full=k_full, feasible_a=fa, feasible_b=fb,
                        feasible_c=fc, g_full=g_full, g_one=g_one, grid=grid,
                        caps=(cap_a, cap_b, cap_c))
