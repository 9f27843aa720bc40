"""The mapper's cost model: one Numba kernel that costs arrays of candidate mappings.

It is the timing and energy npulab reports, per mapping ``(g_t, m_t, n_t, k_t, order,
dataflow)`` of one op:

* **compute cycles**: the timing engine's cycles (:func:`hw.systolic.timing._timing_kernel`,
  the register model's timing) summed over every distinct tile shape times its tile count --
  exactly what the executor's COMPUTE commands add up to (SRAM bank conflicts left out: with
  the default ``matched`` layout there are none);
* **SRAM accesses**: the same tile counters (left/top edge reads, accumulator writes and
  read-backs), assigned to the ifmap/filter scratchpads by the dataflow's geometry
  (:data:`hw.systolic.geometry.GEOMETRY_CODES`) as the executor does;
* **DRAM bytes**: the tiler's reuse formula (:func:`compiler.backends.systolic_tiling._traffic`)
  per loop order, from the per-GEMM pass bytes of :mod:`compiler.mapper.space` -- bus bytes in
  whole DRAM bursts and exact bytes, equal to
  :func:`~compiler.backends.systolic_tiling.choose_tiling`'s for the same tiling;
* **latency estimate**: ``max(compute + first load + last store, DRAM time)``; the DRAM time
  is the largest of the load engine's, the store engine's (DMA setup per transfer plus bus
  bytes at the DRAM model's measured streaming rate,
  :func:`compiler.mapper.search.stream_bytes_per_cycle`) and the shared bus's; the
  first load (the first A and B tiles, or the on-chip MOVE of a resident input) and the last
  store (the last output tile) do not overlap compute;
* **energy**: :mod:`npulab.metrics`' components with the same per-action energies (the chip's
  :class:`~hw.energy.EnergyRates`, filled in by :func:`compiler.mapper.search.mapper_parameters`):
  ``mac`` (MACs x MAC pJ), ``rf`` (register bits per MAC of the candidate's dataflow),
  ``sram.<name>`` (read bits at operand/accumulator width, DMA fill and drain bytes), ``dram``
  (bus bits at the chip's DRAM kind; exact bits for an ideal DRAM), ``static`` (leakage power x
  the latency estimate). The host link is the same for every mapping and is left out.

The kernel takes candidate index arrays (one entry per tile combo and dataflow) and evaluates
every allowed loop order of each, writing the ranking columns (objective, latency, DRAM bytes,
tiles) and, when asked, every counter and energy component.
"""

from __future__ import annotations

import math

import numpy as np

from hw._jitcache import njit  # its cache stamp covers hw/ too (callee _timing_kernel)
from hw.systolic.geometry import (
    G_COLS_DIM, G_LEFT, G_OUTPUT_STATIONARY, G_ROWS_DIM, G_TIME_DIM, GEOMETRY_CODES, GemmDim,
    GemmOperand,
)
from hw.systolic.mapping import K_BUSY, K_CYCLES, K_LEFT_READS, K_PSUM_READS, K_TOP_READS, K_WRITES
from hw.systolic.timing import _timing_kernel

__all__ = ["evaluate", "DETAIL_INT", "DETAIL_FLOAT", "P_INT", "P_FLOAT", "ORDER_DIMS"]


#: Loop orders as dimension codes (0 = m, 1 = n, 2 = k), outermost first, in
#: :data:`compiler.options.ORDERS` order.
ORDER_DIMS = np.array([[0, 1, 2], [1, 0, 2], [0, 2, 1], [2, 0, 1], [1, 2, 0], [2, 1, 0]], np.int64)

# Integer parameters (P_INT) and float parameters (P_FLOAT) of one problem; PI_REG_BITS + code
# holds the register bits per MAC of dataflow ``code`` (hw.energy.register_bits_per_mac);
# PI_NM_N, PI_NM_M the N:M sparsity the op's weights run with (0, 0: dense); filter reads
# carry PI_W_NUM / PI_W_DEN bits each, rounded up over a layer (the operand, plus its index
# when compressed; the stored bits per element when kept in a sparse format).
(PI_COUNT, PI_IN_RES, PI_OUT_RES, PI_SETUP, PI_FIRST_A, PI_OP_BITS, PI_ACC_BITS, PI_MACS,
 PI_IN_BYTES, PI_IDEAL, PI_OBJECTIVE, PI_EB, PI_REG_BITS) = range(13)
PI_NM_N, PI_NM_M, PI_W_NUM, PI_W_DEN = 15, 16, 17, 18
PI_LANES = 19       # MACs per PE (dual-MAC int4, binary words): K runs in steps of that many
P_INT = 20
(PF_BWINV, PF_CLOCK, PF_STATIC_W, PF_MAC, PF_REG, PF_IF_R, PF_IF_W, PF_FI_R, PF_FI_W, PF_OF_R,
 PF_OF_W, PF_DRAM, PF_B_BYTES) = range(13)
P_FLOAT = 13
_IFMAP = int(GemmOperand.IFMAP)
_M, _N, _K = int(GemmDim.M), int(GemmDim.N), int(GemmDim.K)

#: Integer detail columns.
DETAIL_INT = ("latency_cycles", "compute_cycles", "dram_bus_bytes", "dram_bytes", "tiles",
              "pe_busy_cycles", "ifmap_sram_reads", "filter_sram_reads", "ofmap_sram_writes",
              "ofmap_sram_reads", "ifmap_sram_fill_bytes", "filter_sram_fill_bytes",
              "ofmap_sram_drain_bytes", "dram_ifmap_read_bytes", "dram_filter_read_bytes",
              "dram_psum_read_bytes", "dram_ofmap_write_bytes", "dram_psum_write_bytes",
              "loads", "stores")
#: Float detail columns (joules; ``edp_js`` in joule-seconds).
DETAIL_FLOAT = ("mac", "rf", "sram.ifmap", "sram.filter", "sram.ofmap", "dram", "static",
                "energy_j", "edp_js")


@njit(cache=True, inline="always")
def _reuse(order, trips, d0, d1):
    """How often one pass over an operand indexed by dims d0, d1 is fetched (tiler's rule)."""
    last = -1
    for i in range(3):
        d = order[i]
        if trips[d] > 1 and (d == d0 or d == d1):
            last = i
    r = 1
    for i in range(last):
        d = order[i]
        if trips[d] > 1 and d != d0 and d != d1:
            r *= trips[d]
    return r


@njit(cache=True)
def evaluate(cg, cm, cn, ck, cdf, g, m, n, k, a, b, c, dfs, order_ok, pint, pflt,
             objective, latency, dram, tiles, det_i, det_f):
    """Cost every allowed order of every candidate ``i`` (tile option indices ``cg/cm/cn/ck[i]``
    into the tables ``g/m/n/k``, dataflow row ``cdf[i]`` of ``dfs`` = (dataflow code, rows,
    cols), the code being the dataflow's row of :data:`~hw.systolic.geometry.GEOMETRY_CODES`).
    Writes ``objective/latency/dram/tiles[i, order]`` (disallowed orders get an infinite
    objective) and, when ``det_i`` has rows, the detail columns."""
    count = pint[PI_COUNT]
    in_res = pint[PI_IN_RES] != 0
    out_res = pint[PI_OUT_RES] != 0
    setup = pint[PI_SETUP]
    op_bits = pint[PI_OP_BITS]
    acc_bits = pint[PI_ACC_BITS]
    macs = pint[PI_MACS]
    in_bytes = pint[PI_IN_BYTES]
    ideal = pint[PI_IDEAL] != 0
    obj_code = pint[PI_OBJECTIVE]
    eb_bits = pint[PI_EB]       # bits per operand; packed rows padded to whole bytes
    nm_n, nm_m = pint[PI_NM_N], pint[PI_NM_M]
    lanes = max(1, pint[PI_LANES])
    bwinv = pflt[PF_BWINV]
    detail = det_i.shape[0] > 0
    buf = np.zeros(8, np.int64)
    trips = np.zeros(3, np.int64)
    ext = np.zeros(3, np.int64)     # one tile shape's (m, n, k), indexed by GemmDim
    for i in range(cg.shape[0]):
        ig, im, i_n, ik, idf = cg[i], cm[i], cn[i], ck[i], cdf[i]
        code, rows, cols = dfs[idf, 0], dfs[idf, 1], dfs[idf, 2]
        geo = GEOMETRY_CODES[code]
        output_stationary = geo[G_OUTPUT_STATIONARY] != 0
        # N:M weights: activations' edge carries groups of M shared by N (timing engine)
        lg, ls, tg, ts = 1, 1, 1, 1
        if lanes > 1:       # both edges carry a word of lanes operands per PE
            lg, tg = lanes, lanes
        elif nm_m > 0:
            if geo[G_LEFT] == _IFMAP:
                lg, ls = nm_m, nm_n
            else:
                tg, ts = nm_m, nm_n
        # ---- order-independent: compute cycles and SRAM accesses over the tile shapes
        comp = 0
        busy = 0
        left = 0
        top = 0
        writes = 0
        psum = 0
        for gs in range(2):
            gsz, gcnt = g[ig, 2 + 2 * gs], g[ig, 3 + 2 * gs]
            if gcnt == 0:
                continue
            for ms in range(2):
                msz, mcnt = m[im, 2 + 2 * ms], m[im, 3 + 2 * ms]
                if mcnt == 0:
                    continue
                for ns in range(2):
                    nsz, ncnt = n[i_n, 2 + 2 * ns], n[i_n, 3 + 2 * ns]
                    if ncnt == 0:
                        continue
                    for ks in range(2):
                        ksz, kcnt = k[ik, 2 + 2 * ks], k[ik, 3 + 2 * ks]
                        if kcnt == 0:
                            continue
                        # a K tile of an N:M op runs its whole groups compressed
                        kr = ksz if nm_m == 0 else (ksz + nm_m - 1) // nm_m * nm_n
                        if lanes > 1:       # a step of operand words: ceil(K / lanes)
                            kr = (ksz + lanes - 1) // lanes
                        ext[_M], ext[_N], ext[_K] = msz, nsz, kr
                        sr, sc, t = ext[geo[G_ROWS_DIM]], ext[geo[G_COLS_DIM]], ext[geo[G_TIME_DIM]]
                        _timing_kernel(output_stationary, rows, cols, gsz, sr, sc, t, lg, ls, tg,
                                       ts, buf)
                        w = gcnt * mcnt * ncnt * kcnt
                        comp += w * buf[K_CYCLES]
                        busy += w * buf[K_BUSY]
                        left += w * buf[K_LEFT_READS]
                        top += w * buf[K_TOP_READS]
                        writes += w * buf[K_WRITES]
                        psum += w * buf[K_PSUM_READS]
        if geo[G_LEFT] == _IFMAP:
            if_reads, fi_reads = left, top
        else:
            if_reads, fi_reads = top, left
        done = macs if nm_m == 0 else busy     # MACs performed (sparse PEs skip pruned ones)
        reg_bits = done * pint[PI_REG_BITS + code]
        e_mac = done * pflt[PF_MAC] * 1e-12
        e_rf = reg_bits * pflt[PF_REG] * 1e-12
        g_trips = g[ig, 1]
        trips[0] = m[im, 1]
        trips[1] = n[i_n, 1]
        trips[2] = k[ik, 1]
        tm, tn, tk = trips[0], trips[1], trips[2]
        ntiles = g_trips * tm * tn * tk
        gt = g[ig, 0]
        a_bus, a_ex, a_fp = a[im, ik, 0], a[im, ik, 1], a[im, ik, 2]
        b_bus, b_ex = b[ik, i_n, 0], b[ik, i_n, 1]
        c_bus, c_ex, acc_bus, acc_ex = c[im, i_n, 0], c[im, i_n, 1], c[im, i_n, 2], c[im, i_n, 3]
        # first load (first A and B tiles, or the MOVE of a resident input) and last store
        kb = k[ik, 2] if nm_m == 0 else (k[ik, 2] + nm_m - 1) // nm_m * nm_m   # whole groups
        b_first = math.ceil(gt * kb * n[i_n, 2] * pflt[PF_B_BYTES])
        if in_res:
            first = pint[PI_FIRST_A] + setup + math.ceil(b_first * bwinv)
        else:
            first = 2 * setup + math.ceil((gt * a_fp + b_first) * bwinv)
        last = 0
        if not out_res:
            last = setup + math.ceil(gt * m[im, 2] * ((n[i_n, 2] * eb_bits + 7) // 8) * bwinv)
        for o in range(6):
            if not order_ok[o]:
                objective[i, o] = np.inf
                latency[i, o] = 0
                dram[i, o] = 0
                tiles[i, o] = 0
                continue
            order = ORDER_DIMS[o]
            ra = _reuse(order, trips, 0, 2)
            rb = _reuse(order, trips, 2, 1)
            # partial sums stay on chip when k is the innermost loop with trips > 1
            spill = False
            if tk > 1:
                for j in range(2, -1, -1):
                    d = order[j]
                    if trips[d] > 1:
                        spill = d != 2
                        break
            ps = (tk - 1) if spill else 0
            a_rd_bus = 0 if in_res else a_bus * ra
            a_rd = 0 if in_res else a_ex * ra
            b_rd_bus = b_bus * rb
            b_rd = b_ex * rb
            c_wr_bus = 0 if out_res else c_bus
            c_wr = 0 if out_res else c_ex
            load_bus = (a_rd_bus + b_rd_bus + ps * acc_bus) * count
            store_bus = (c_wr_bus + ps * acc_bus) * count
            bus = load_bus + store_bus
            exact = (a_rd + b_rd + c_wr + 2 * ps * acc_ex) * count
            loads = g_trips * ((0 if in_res else tm * tk * ra) + tk * tn * rb + ps * tm * tn)
            loads += 1 if in_res else 0
            stores = g_trips * ((0 if out_res else tm * tn) + ps * tm * tn)
            mem = max(math.ceil(bus * bwinv),
                      max(setup * loads + math.ceil(load_bus * bwinv),
                          setup * stores + math.ceil(store_bus * bwinv)))
            lat = max(comp + first + last, mem)
            fill_a = in_bytes if in_res else a_rd * count
            fill_b = b_rd * count
            drain = (c_wr + ps * acc_ex) * count + (in_bytes if in_res else 0)
            e_if = (if_reads * op_bits * pflt[PF_IF_R] + 8 * fill_a * pflt[PF_IF_W]) * 1e-12
            fi_bits = -(-(fi_reads * pint[PI_W_NUM]) // pint[PI_W_DEN])
            e_fi = (fi_bits * pflt[PF_FI_R]
                    + 8 * fill_b * pflt[PF_FI_W]) * 1e-12
            e_of = ((psum * acc_bits + 8 * drain) * pflt[PF_OF_R]
                    + writes * acc_bits * pflt[PF_OF_W]) * 1e-12
            dram_bits = 8 * (exact if ideal else bus)
            e_dram = dram_bits * pflt[PF_DRAM] * 1e-12
            seconds = lat / pflt[PF_CLOCK]
            e_static = pflt[PF_STATIC_W] * seconds
            energy = e_mac + e_rf + e_if + e_fi + e_of + e_dram + e_static
            if obj_code == 0:
                objective[i, o] = lat
            elif obj_code == 1:
                objective[i, o] = energy
            else:
                objective[i, o] = energy * seconds
            latency[i, o] = lat
            dram[i, o] = exact
            tiles[i, o] = ntiles
            if detail:
                di = det_i[i, o]
                di[0] = lat
                di[1] = comp
                di[2] = bus
                di[3] = exact
                di[4] = ntiles
                di[5] = busy
                di[6] = if_reads
                di[7] = fi_reads
                di[8] = writes
                di[9] = psum
                di[10] = fill_a
                di[11] = fill_b
                di[12] = drain
                di[13] = a_rd * count
                di[14] = b_rd * count
                di[15] = ps * acc_ex * count
                di[16] = c_wr * count
                di[17] = ps * acc_ex * count
                di[18] = loads
                di[19] = stores
                df_ = det_f[i, o]
                df_[0] = e_mac
                df_[1] = e_rf
                df_[2] = e_if
                df_[3] = e_fi
                df_[4] = e_of
                df_[5] = e_dram
                df_[6] = e_static
                df_[7] = energy
                df_[8] = energy * seconds
