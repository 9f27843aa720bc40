"""Search the mapping space of one op: exhaustive when small, pruned with a guarantee when large.

* **Exhaustive** when the feasible space (tile combos x allowed orders x dataflows) has at most
  ``exhaustive_limit`` mappings: every one is costed.
* **Pruned** otherwise, in three deterministic phases:

  1. the structured grid of :func:`compiler.backends.systolic_tiling.choose_tiling` (powers of
     two times the array granule plus the full extent, all orders) for every dataflow,
     completely -- so the result is never worse than the default tiler's space under the same
     cost;
  2. ``samples`` uniform samples of the feasible tile combos x dataflows (rejection sampling
     with ``numpy.random.Generator(PCG64(seed))``), each costed under every allowed order. A
     uniform sample lands in the best ``q`` fraction of the space with probability ``>= q``,
     so with ``n`` samples the best of them is in the best ``q`` fraction with probability
     ``>= 1 - (1 - q)^n`` (n = 20,000: the best 0.023 % with probability 99 %);
  3. a local refinement from the best so far: a coordinate search (every option of one tile
     dimension with the others fixed, and one-option steps in two dimensions at once, under
     every dataflow and order), repeated from the new best while it improves.

The ranking key is ``(objective, latency, DRAM bytes, tiles, candidate index)``; the index is
a fixed enumeration of the full space, so ties always break the same way and a run is
reproducible to the bit.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np

import compiler.mapper.cost as C
from compiler.backends.systolic_tiling import TileChoice, TileProblem, TilingError, choose_tiling
from compiler.mapper.result import MapResult, Mapping
from compiler.mapper.space import TILE, MappingSpace, build_space
from compiler.options import ORDERS
from hw.chip import ChipConfig
from hw.energy.rates import HardwareFacts, energy_rates, register_bits_per_mac
from hw.energy.tech import DEFAULT_TECHNOLOGY

from hw.systolic.config import Dataflow
from hw.systolic.geometry import DATAFLOW_CODES

__all__ = ["map_op", "cost_mapping", "OBJECTIVES", "DEFAULT_EXHAUSTIVE_LIMIT", "DEFAULT_SAMPLES",
           "mapper_parameters"]

OBJECTIVES = ("latency", "energy", "edp")
#: Largest space searched exhaustively: about a second of kernel time on one core.
DEFAULT_EXHAUSTIVE_LIMIT = 1_000_000
#: Uniform samples of the pruned search (top 0.023 % of the space with probability 99 %).
DEFAULT_SAMPLES = 20_000
#: Bytes of the read that measures the DRAM's streaming rate for the latency estimate.
STREAM_PROBE_BYTES = 256 * 1024
_CHUNK = 16384          # candidates per kernel call
_REFINE_ROUNDS = 64


def mapper_parameters(p: TileProblem, chip: ChipConfig, tech, objective: str, *,
                      input_resident: bool, output_resident: bool, macs: int | None = None,
                      dram_kind: str | None = None,
                      bytes_per_cycle: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's integer and float parameters: chip, energy rates, problem flags.

    The energies per action are the chip's :class:`~hw.energy.EnergyRates`, the ones
    :mod:`npulab.metrics` charges (same table entries, bank sizes, DRAM type, area and leakage);
    register bits per MAC for every dataflow the kernel may try. ``bytes_per_cycle``: the
    rate the tiles stream at from below the scratchpads (default: the DRAM's streaming rate,
    :func:`stream_bytes_per_cycle`; one core's share of the chip's on a multi-core chip)."""
    arr = chip.array
    pint = np.zeros(C.P_INT, np.int64)
    pflt = np.zeros(C.P_FLOAT, np.float64)
    setup = chip.dma.descriptor_setup_cycles
    in_bytes = p.input_bytes if input_resident else 0
    move_bw = min(chip.ofmap_sram.bytes_per_cycle, chip.ifmap_sram.bytes_per_cycle)
    rates = energy_rates(tech, HardwareFacts.systolic(chip), dram_kind=dram_kind)
    pint[C.PI_COUNT] = p.count
    pint[C.PI_IN_RES] = int(input_resident)
    pint[C.PI_OUT_RES] = int(output_resident)
    pint[C.PI_SETUP] = setup
    pint[C.PI_FIRST_A] = setup + -(-in_bytes // move_bw)
    pint[C.PI_OP_BITS] = arr.precision.bits
    pint[C.PI_ACC_BITS] = arr.acc_bits
    pint[C.PI_MACS] = p.count * p.m * p.n * p.k if macs is None else macs
    pint[C.PI_IN_BYTES] = in_bytes
    pint[C.PI_IDEAL] = int(chip.dram.is_ideal)
    pint[C.PI_OBJECTIVE] = OBJECTIVES.index(objective)
    pint[C.PI_EB] = p.elem_bits
    pint[C.PI_LANES] = arr.macs_per_pe
    pint[C.PI_W_NUM], pint[C.PI_W_DEN] = p.filter_read_bits(arr.precision.bits)
    for df, code in DATAFLOW_CODES.items():
        pint[C.PI_REG_BITS + code] = rates.register_bits_per_mac_by_dataflow[df.value]
    if p.nm is not None:     # compressed weights on sparse PEs (npulab.simulate.array_actions)
        pint[C.PI_NM_N], pint[C.PI_NM_M] = p.nm
        for df, code in DATAFLOW_CODES.items():
            pint[C.PI_REG_BITS + code] = register_bits_per_mac(df, arr.precision.bits,
                                                               arr.acc_bits, p.nm[1])
    if bytes_per_cycle is None:
        bytes_per_cycle = (math.inf if chip.dram.is_ideal else stream_bytes_per_cycle(
            chip.dram, chip.dma.max_outstanding, chip.clock_mhz))
    pflt[C.PF_BWINV] = 0.0 if math.isinf(bytes_per_cycle) else 1.0 / bytes_per_cycle
    pflt[C.PF_CLOCK] = chip.clock_hz
    pflt[C.PF_STATIC_W] = rates.leakage_w
    pflt[C.PF_MAC] = rates.mac_pj * (1.0 - p.act_zeros)     # zero activations gate MACs
    pflt[C.PF_REG] = rates.register_pj_per_bit
    for name, (r, w) in (("ifmap", (C.PF_IF_R, C.PF_IF_W)), ("filter", (C.PF_FI_R, C.PF_FI_W)),
                         ("ofmap", (C.PF_OF_R, C.PF_OF_W))):
        pflt[r] = rates.scratchpads[name].read_pj_per_bit
        pflt[w] = rates.scratchpads[name].write_pj_per_bit
    pflt[C.PF_DRAM] = rates.dram_pj_per_bit
    pflt[C.PF_B_BYTES] = p.b_element_bytes
    return pint, pflt


@functools.lru_cache(maxsize=64)
def stream_bytes_per_cycle(dram, max_outstanding: int, clock_mhz: float) -> float:
    """The DRAM's sustained read rate in bytes per core cycle: the cycle-level DRAM model
    (:mod:`hw.memory.dram`) streaming one :data:`STREAM_PROBE_BYTES` read with the DMA's
    outstanding-request window (one DDR4-3200 channel at a 1 GHz core: about 14.3 B/cycle, 56 %
    of peak; the tiler's ``0.8 x peak`` is optimistic for it)."""
    from hw.memory.dram import DramModel
    done = DramModel(dram).transfer(0, STREAM_PROBE_BYTES, False, 0, max_outstanding)
    core_cycles = done * clock_mhz / dram.clock_mhz
    return STREAM_PROBE_BYTES / max(core_cycles, 1e-9)


class _Search:
    """Costs candidate batches with the kernel and keeps the best ``keep`` by the ranking key."""

    def __init__(self, space: MappingSpace, chip: ChipConfig, dataflows, orders, pint, pflt,
                 keep: int):
        self.space, self.keep = space, keep
        self.dfs = np.array([[DATAFLOW_CODES[df], chip.array.rows, chip.array.cols]
                             for df in dataflows], np.int64)
        self.df_codes = self.dfs[:, 0].copy()
        self.order_ok = np.array([o in orders for o in ORDERS], np.bool_)
        self.n_orders = int(self.order_ok.sum())
        self.pint, self.pflt = pint, pflt
        self.evaluated = 0
        nG, nM, nN, nK = space.shape
        self.radix = (nG, nM, nN, nK)
        self.best = None       # columns: obj, lat, dram, tiles, gid, ig, im, in, ik, idf, o
        self._empty_i = np.zeros((0, 6, len(C.DETAIL_INT)), np.int64)
        self._empty_f = np.zeros((0, 6, len(C.DETAIL_FLOAT)), np.float64)

    def gid(self, ig, im, i_n, ik, idf):
        nG, nM, nN, nK = self.radix
        return ((((self.df_codes[idf] * nG + ig) * nM + im) * nN + i_n) * nK + ik) * 6

    def run(self, ig, im, i_n, ik, idf, detail: bool = False):
        s = self.space
        out = None
        for lo in range(0, len(ig), _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            cg, cm, cn, ck, cd = (np.ascontiguousarray(x[sl], np.int64)
                                  for x in (ig, im, i_n, ik, idf))
            n = len(cg)
            obj = np.empty((n, 6))
            lat = np.empty((n, 6), np.int64)
            dram = np.empty((n, 6), np.int64)
            tiles = np.empty((n, 6), np.int64)
            det_i = np.zeros((n, 6, len(C.DETAIL_INT)), np.int64) if detail else self._empty_i
            det_f = np.zeros((n, 6, len(C.DETAIL_FLOAT))) if detail else self._empty_f
            C.evaluate(cg, cm, cn, ck, cd, s.g, s.m, s.n, s.k, s.a, s.b, s.c, self.dfs,
                       self.order_ok, self.pint, self.pflt, obj, lat, dram, tiles, det_i, det_f)
            self.evaluated += n * self.n_orders
            if detail:
                out = (det_i, det_f)
            self._merge(obj, lat, dram, tiles, cg, cm, cn, ck, cd)
        return out

    def _merge(self, obj, lat, dram, tiles, cg, cm, cn, ck, cd):
        flat = obj.ravel()
        keep = self.keep
        if flat.size > keep:
            thr = np.partition(flat, keep - 1)[keep - 1]
            sel = np.flatnonzero(flat <= thr)
        else:
            sel = np.arange(flat.size)
        sel = sel[np.isfinite(flat[sel])]
        row, o = np.divmod(sel, 6)
        gid = self.gid(cg[row], cm[row], cn[row], ck[row], cd[row]) + o
        cols = [flat[sel], lat.ravel()[sel], dram.ravel()[sel], tiles.ravel()[sel], gid,
                cg[row], cm[row], cn[row], ck[row], cd[row], o]
        if self.best is not None:
            cols = [np.concatenate([a, b]) for a, b in zip(self.best, cols)]
        _, first = np.unique(cols[4], return_index=True)
        cols = [c[first] for c in cols]
        rank = np.lexsort((cols[4], cols[3], cols[2], cols[1], cols[0]))[:keep]
        self.best = [c[rank] for c in cols]

    def head(self):
        """``(ig, im, in, ik, idf, o)`` of the best so far, and its key."""
        b = self.best
        return tuple(int(b[j][0]) for j in range(5, 11)), tuple(b[j][0] for j in range(5))


def _as_dataflows(dataflows, chip: ChipConfig) -> tuple[Dataflow, ...]:
    if dataflows is None:
        return (chip.array.dataflow,)
    if isinstance(dataflows, (str, Dataflow)):
        dataflows = (dataflows,)
    out = []
    for df in dataflows:
        if not isinstance(df, Dataflow):
            try:
                df = Dataflow(str(df).lower())
            except ValueError:
                raise ValueError(f"map_op: dataflows: {df!r}: must be one of "
                                 f"{', '.join(d.value for d in Dataflow)}") from None
        if df not in out:
            out.append(df)
    if not out:
        raise ValueError("map_op: dataflows = (): give at least one dataflow (or None for the "
                         "chip's own)")
    return tuple(out)


def _int_arg(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"map_op: {name} = {value!r}: must be an integer >= {lo}")
    return int(value)


def map_op(problem: TileProblem, chip: ChipConfig, objective: str = "latency", *,
           tech=DEFAULT_TECHNOLOGY, dataflows=None, input_resident: bool = False,
           output_resident: bool = False, orders=None,
           exhaustive_limit: int = DEFAULT_EXHAUSTIVE_LIMIT, samples: int = DEFAULT_SAMPLES,
           seed: int = 0, keep: int = 10, macs: int | None = None,
           dram_kind: str | None = None, bytes_per_cycle: float | None = None) -> MapResult:
    """The best mapping of ``problem`` on ``chip`` for ``objective`` (``"latency"``,
    ``"energy"`` or ``"edp"``); see :mod:`compiler.mapper`.

    ``tech``: energy table (name, TOML path or :class:`~hw.energy.Technology`). ``dataflows``:
    the dataflows to search (default: the chip's own). ``input_resident`` /
    ``output_resident``: the tiler's capacity variants. ``orders``: loop orders allowed (default
    all six). ``exhaustive_limit``: largest feasible space costed exhaustively; above it the
    pruned search runs with ``samples`` seeded samples (``seed``). ``keep``: how many ranked
    mappings to return. ``macs``: the op's MACs if they differ from ``count*m*n*k``;
    ``dram_kind``: the DRAM energy type (default from the DRAM preset, as the metrics).
    ``bytes_per_cycle``: the rate tiles stream at (default the DRAM's; a multi-core op's share
    streams at one core's share, :func:`compiler.backends.multicore.share_bytes_per_cycle`).

    Raises :class:`~compiler.backends.systolic_tiling.TilingError` when no tile fits the
    scratchpads, ValueError for bad arguments.
    """
    from hw.energy import Technology, load_technology
    t0 = time.perf_counter()
    if not isinstance(problem, TileProblem):
        raise ValueError(f"map_op: problem = {problem!r}: must be a "
                         f"compiler.backends.systolic_tiling.TileProblem")
    if not isinstance(chip, ChipConfig):
        raise ValueError(f"map_op: chip = {chip!r}: must be a hw.chip.ChipConfig")
    if objective not in OBJECTIVES:
        raise ValueError(f"map_op: objective = {objective!r}: must be one of "
                         f"{', '.join(OBJECTIVES)}")
    dfs = _as_dataflows(dataflows, chip)
    if orders is None:
        orders = ORDERS
    elif isinstance(orders, str):
        orders = (orders,)
    bad = [o for o in orders if o not in ORDERS]
    if bad or not orders:
        raise ValueError(f"map_op: orders = {orders!r}: must be a non-empty subset of "
                         f"{', '.join(ORDERS)}")
    exhaustive_limit = _int_arg("exhaustive_limit", exhaustive_limit, 0)
    samples = _int_arg("samples", samples, 0)
    seed = _int_arg("seed", seed, 0)
    keep = _int_arg("keep", keep, 1)
    tech = tech if isinstance(tech, Technology) else load_technology(tech)
    space = build_space(problem, chip, dfs, input_resident=input_resident,
                        output_resident=output_resident)
    combos = space.combos()
    if combos == 0:
        choose_tiling(problem, chip, input_resident=input_resident,
                      output_resident=output_resident)   # raises the tiler's TilingError
        raise TilingError(f"{problem.name}: no tiling fits the scratchpads")
    pint, pflt = mapper_parameters(problem, chip, tech, objective, input_resident=input_resident,
                                   output_resident=output_resident, macs=macs,
                                   dram_kind=dram_kind, bytes_per_cycle=bytes_per_cycle)
    search = _Search(space, chip, dfs, orders, pint, pflt, keep)
    size = combos * len(dfs) * search.n_orders
    phases = {}
    n_df = len(dfs)
    if size <= exhaustive_limit:
        ig, im, i_n, ik = space.all_combos()
        idf = np.repeat(np.arange(n_df), len(ig))
        search.run(np.tile(ig, n_df), np.tile(im, n_df), np.tile(i_n, n_df), np.tile(ik, n_df),
                   idf)
        phases["exhaustive"] = search.evaluated
        exhaustive = True
    else:
        exhaustive = False
        # 1. the tiler's grid, completely
        for j, df in enumerate(dfs):
            ig, im, i_n, ik = space.grid_combos(df)
            search.run(ig, im, i_n, ik, np.full(len(ig), j))
        phases["grid"] = search.evaluated
        # 2. uniform samples of the feasible combos x dataflows
        before = search.evaluated
        drawn = _sample(space, n_df, samples, seed)
        search.run(*drawn)
        phases["samples"] = search.evaluated - before
        phases["samples_drawn"] = len(drawn[0])
        # 3. local refinement from the best
        before = search.evaluated
        _refine(search, space, n_df)
        phases["refine"] = search.evaluated - before
    ranked = _details(search, space, problem, dfs)
    return MapResult(op=problem.name, objective=objective, best=ranked[0], ranked=ranked,
                     evaluated=search.evaluated, space_size=size, exhaustive=exhaustive,
                     phases=phases, seconds=time.perf_counter() - t0)


def _sample(space: MappingSpace, n_df: int, samples: int, seed: int):
    """``samples`` uniform draws (with replacement) of feasible (combo, dataflow) pairs, by
    rejection from the tile-combo index space; duplicates removed (first draw kept)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    nG, nM, nN, nK = space.shape
    p1 = nM * nN * nK
    p2 = len(space.g_full)
    total = p1 + p2
    got = [np.zeros(0, np.int64)] * 5
    have = 0
    tries = 0
    while have < samples and tries < 200 * max(samples, 1):
        want = max(2 * (samples - have), 1024)
        tries += want
        u = rng.integers(0, total, want)
        d = rng.integers(0, n_df, want)
        base = u < p1
        im, rest = np.divmod(np.where(base, u, 0), nN * nK)
        i_n, ik = np.divmod(rest, nK)
        ig = np.full(want, space.g_one, np.int64)
        extra = ~base
        if p2:
            ig[extra] = space.g_full[u[extra] - p1]
            im[extra], i_n[extra], ik[extra] = space.m_full, space.n_full, space.k_full
        ok = space.feasible(ig, im, i_n, ik)
        cols = [x[ok] for x in (ig, im, i_n, ik, d)]
        take = min(samples - have, len(cols[0]))
        got = [np.concatenate([g, c[:take]]) for g, c in zip(got, cols)]
        have += take
    key = np.stack(got, 1)
    _, first = np.unique(key, axis=0, return_index=True)
    first.sort()
    return tuple(g[first] for g in got)


def _refine(search: _Search, space: MappingSpace, n_df: int) -> None:
    """Coordinate search from the best: every option of one tile dimension at a time (the
    others fixed) plus one-option steps in two dimensions at once, under every dataflow and
    order; repeated from the new best while it improves."""
    lim = np.array(space.shape)
    pairs = [(d1, s1, d2, s2) for d1 in range(1, 4) for d2 in range(d1 + 1, 4)
             for s1 in (-1, 1) for s2 in (-1, 1)]
    seen = set()
    for _ in range(_REFINE_ROUNDS):
        cur, key = search.head()
        if cur[:4] in seen:
            break
        seen.add(cur[:4])
        base = np.array(cur[:4], np.int64)
        cands = []
        for d in range(4):
            line = np.repeat(base[None, :], lim[d], 0)
            line[:, d] = np.arange(lim[d])
            cands.append(line)
        for d1, s1, d2, s2 in pairs:
            v = base.copy()
            v[d1] += s1
            v[d2] += s2
            cands.append(v[None, :])
        cand = np.concatenate(cands)
        cand = cand[((cand >= 0) & (cand < lim)).all(1)]
        cand = np.unique(cand, axis=0)
        cand = cand[space.feasible(cand[:, 0], cand[:, 1], cand[:, 2], cand[:, 3])]
        idf = np.repeat(np.arange(n_df), len(cand))
        cand = np.tile(cand, (n_df, 1))
        search.run(cand[:, 0], cand[:, 1], cand[:, 2], cand[:, 3], idf)
        if search.head()[1] == key:
            break


def cost_mapping(problem: TileProblem, chip: ChipConfig, choice: TileChoice,
                 objective: str = "latency", *, tech=DEFAULT_TECHNOLOGY,
                 dataflow: Dataflow | None = None,
                 input_resident: bool = False, output_resident: bool = False,
                 dram_kind: str | None = None) -> Mapping:
    """One given tiling (e.g. :func:`compiler.backends.systolic_tiling.choose_tiling`'s) costed
    by the mapper's cost model: the :class:`Mapping` :func:`map_op` reports for it.
    ``dataflow`` defaults to ``choice.dataflow`` or the chip's own.

    Raises :class:`~compiler.backends.systolic_tiling.TilingError` when the tiling is not in the
    mapping space (a tile size the space does not hold, or one that does not fit the
    scratchpads)."""
    from hw.energy import Technology, load_technology
    if objective not in OBJECTIVES:
        raise ValueError(f"cost_mapping: objective = {objective!r}: must be one of "
                         f"{', '.join(OBJECTIVES)}")
    tech = tech if isinstance(tech, Technology) else load_technology(tech)
    df = Dataflow(dataflow or choice.dataflow or chip.array.dataflow)
    space = build_space(problem, chip, (df,), input_resident=input_resident,
                        output_resident=output_resident)
    index = []
    for table, value, what in ((space.g, choice.group_tile, "group"),
                               (space.m, choice.m_units, "m"), (space.n, choice.n_tile, "n"),
                               (space.k, choice.k_units, "k")):
        hit = np.flatnonzero(table[:, TILE] == value)
        if len(hit) == 0:
            raise TilingError(f"{problem.name}: {what} tile {value} is not in the mapping space "
                              f"(or does not fit its scratchpad)")
        index.append(np.array([hit[0]], np.int64))
    pint, pflt = mapper_parameters(problem, chip, tech, objective, input_resident=input_resident,
                                   output_resident=output_resident, dram_kind=dram_kind)
    search = _Search(space, chip, (df,), (choice.order,), pint, pflt, keep=1)
    search.run(*index, np.zeros(1, np.int64))
    if search.best is None or len(search.best[0]) == 0:
        raise TilingError(f"{problem.name}: tiling {choice} does not fit the scratchpads")
    return _details(search, space, problem, (df,))[0]


def _details(search: _Search, space: MappingSpace, p: TileProblem, dfs) -> tuple[Mapping, ...]:
    """Re-cost the kept candidates with every counter and energy component."""
    b = search.best
    ig, im, i_n, ik, idf, o = (b[j].astype(np.int64) for j in range(5, 11))
    gids = b[4]
    keep, search.best = search.best, None
    evaluated = search.evaluated
    det_i, det_f = search.run(ig, im, i_n, ik, idf, detail=True)
    search.best, search.evaluated = keep, evaluated
    out = []
    ab = p.acc_bytes
    for j in range(len(ig)):
        di = det_i[j, o[j]]
        dfv = det_f[j, o[j]]
        counters = {name: int(v) for name, v in zip(C.DETAIL_INT, di)}
        energy = {name: float(v) for name, v in zip(C.DETAIL_FLOAT[:7], dfv[:7])}
        gt = int(space.g[ig[j], TILE])
        mu = int(space.m[im[j], TILE])
        nt = int(space.n[i_n[j], TILE])
        ku = int(space.k[ik[j], TILE])
        a_fp = int(space.a[im[j], ik[j], 2])
        in_res = bool(search.pint[C.PI_IN_RES])
        obj = float(b[0][j])
        out.append(Mapping(
            group_tile=gt, m_units=mu, n_tile=nt, k_units=ku, order=ORDERS[o[j]],
            dataflow=dfs[idf[j]], m_tile=mu * p.unit_pixels, k_tile=ku * p.k_unit,
            latency_cycles=counters["latency_cycles"], compute_cycles=counters["compute_cycles"],
            dram_bytes=counters["dram_bytes"], dram_bus_bytes=counters["dram_bus_bytes"],
            tiles=counters["tiles"], energy_j=float(dfv[7]), edp_js=float(dfv[8]),
            objective=obj, energy_breakdown_j=energy, counters=counters,
            ifmap_bytes=0 if in_res else gt * a_fp, filter_bytes=gt * p.b_tile(ku * p.k_unit, nt),
            ofmap_bytes=gt * mu * p.unit_pixels * nt * ab, index=int(gids[j])))
    return tuple(out)
