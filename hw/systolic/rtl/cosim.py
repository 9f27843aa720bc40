"""Co-simulation: the Amaranth RTL against the register-level model, every register, every cycle.

The register-level model (:func:`hw.systolic.regmodel.run_gemm` with ``snapshots=True``) runs
a GEMM and records, per cycle, its feeder's edge stimulus and every register of the array. The
same stimulus drives :class:`~hw.systolic.rtl.array.SystolicArray` in Amaranth's simulator;
after each clock edge every PE register (operands, flags, accumulators, results, partial sums,
shadow/active operands), every drain counter and every output port is compared with the model.
The first difference stops the case and is reported as cycle, signal, RTL value and model
value; with a VCD folder the case is re-run with a waveform dump (and a GTKWave save file).

What this proves: the mesh, its skew lines and (optionally) the de-skew stage implement the
model's timing contract bit for bit. The feeder that decides when folds start (and the
output SRAM's accumulation) is the model's; the timing engine is checked against that feeder
elsewhere (``tests/hw/test_systolic_timing.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from hw.sparsity import nm_density, prune_n_m
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow
from hw.systolic.regmodel import run_gemm, snapshot_layout
from hw.systolic.rtl.array import SystolicArray, check_rtl_config

__all__ = ["Mismatch", "CaseResult", "VerifyReport", "random_gemm", "wave_operands", "cosim_gemm",
           "verify", "binary_snapshots"]

CLOCK_PERIOD = 1e-8  # 100 MHz in the waveform; the contract is in cycles


@dataclass(frozen=True)
class Mismatch:
    """The first cycle and signal where the RTL and the model disagree."""

    cycle: int
    signal: str
    rtl: int
    model: int
    vcd: str | None = None

    def __str__(self) -> str:
        where = f" (waveform: {self.vcd})" if self.vcd else ""
        return f"cycle {self.cycle}: {self.signal}: RTL {self.rtl}, model {self.model}{where}"


@dataclass(frozen=True)
class CaseResult:
    """One GEMM through both simulators."""

    index: int
    shape: tuple[int, int, int, int]  # batch, M, K, N
    cycles: int
    mismatch: Mismatch | None

    @property
    def ok(self) -> bool:
        return self.mismatch is None


@dataclass
class VerifyReport:
    """Result of :func:`verify`: one :class:`CaseResult` per random GEMM."""

    cfg: ArrayConfig
    deskew: bool
    mutation: str | None
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    @property
    def cycles(self) -> int:
        return sum(c.cycles for c in self.cases)

    def summary(self) -> str:
        c = self.cfg
        what = (f"{c.dataflow.value.upper()} {c.rows}x{c.cols} {c.precision.value} "
                f"acc{c.acc_bits} {c.overflow.value}"
                f"{f' sparse_m={c.sparse_m}' if c.sparse_m else ''}"
                f"{f' {c.macs_per_pe} MACs/PE' if c.macs_per_pe > 1 else ''}"
                f"{' deskew' if self.deskew else ''}"
                f"{f' mutation={self.mutation}' if self.mutation else ''}")
        bad = [x for x in self.cases if not x.ok]
        if not bad:
            return (f"PASS {what}: {len(self.cases)} GEMMs, {self.cycles} cycles, every register "
                    f"equal every cycle")
        first = bad[0]
        b, m, k, n = first.shape
        return (f"FAIL {what}: {len(bad)} of {len(self.cases)} GEMMs differ; first: case "
                f"{first.index} (batch {b}, M={m} K={k} N={n}) {first.mismatch}")


def random_gemm(rng: np.random.Generator, cfg: ArrayConfig):
    """A random GEMM that exercises full and partial folds in every dimension, batches, and
    operands over the whole precision range (extremes included). Binary operands are +1 or
    -1, K a multiple of the PE's operands per cycle (the RTL has no lane mask)."""
    r, c = cfg.rows, cfg.cols
    batch = int(rng.integers(1, 3))
    m = int(rng.integers(1, 2 * max(r, c) + 2))
    k = int(rng.integers(1, 2 * max(r, c) + 3))
    n = int(rng.integers(1, 2 * max(r, c) + 2))
    if cfg.precision.bits == 1:
        lanes = cfg.macs_per_pe
        k = lanes * int(rng.integers(1, (2 * max(r, c) + 2) // lanes + 2))
        return (rng.choice([-1, 1], (batch, m, k)), rng.choice([-1, 1], (batch, k, n)))
    lo, hi = cfg.precision.operand_range
    a = rng.integers(lo, hi + 1, (batch, m, k))
    b = rng.integers(lo, hi + 1, (batch, k, n))
    # Extremes: products of -2**(p-1) with itself are the largest, and stress saturation.
    a[rng.random(a.shape) < 0.1] = lo
    b[rng.random(b.shape) < 0.1] = lo
    if cfg.sparse_m:
        # sparse PEs: K a multiple of M, weights magnitude-pruned to a random N:M
        group = cfg.sparse_m
        k = group * int(rng.integers(1, (2 * max(r, c) + 2) // group + 2))
        a = rng.integers(lo, hi + 1, (batch, m, k))
        b = rng.integers(lo, hi + 1, (batch, k, n))
        b, _ = prune_n_m(b, int(rng.integers(1, group + 1)), group, axis=1)
    return a, b


# The registers compared after every clock edge, per PE, in comparison order:
# (snapshot field, PE port, the port's lib.data fields packed from bit 0 up, or () for a plain
# signal). Both simulators (Amaranth here, Verilator in .verilator) build their probes from it.
# N:M sparse PEs add their index registers (``*_idx``); a bank holding groups of activations
# has M snapshot entries per PE, compared element by element.
OS_REGISTERS = (
    ("a", "a_out", ("value",)), ("a_flags", "a_out", ("valid", "first", "last")),
    ("b", "b_out", ("value",)), ("b_idx", "b_out", ("index",)), ("b_valid", "b_out", ("valid",)),
    ("acc", "acc", ()), ("res", "res", ()),
)
STATIONARY_REGISTERS = (
    ("x", "x_out", ("value",)), ("x_idx", "x_out", ("index",)),
    ("x_flags", "x_out", ("valid", "first")),
    ("shadow", "shadow", ("value",)), ("shadow_idx", "shadow", ("index",)),
    ("shadow_valid", "shadow", ("valid",)),
    ("active", "active", ("value",)), ("active_idx", "active", ("index",)),
    ("active_valid", "active", ("valid",)),
    ("psum", "psum", ()), ("psum_valid", "psum_valid", ()),
)


def wave_operands(cfg: ArrayConfig, m: int, k: int, n: int, kind: str = "ramp", seed: int = 0):
    """The operands of ``npulab rtl wave``: ``ramp`` (a[m][k] = 1 + m*K + k,
    b[k][n] = -(1 + k*N + n), wrapped into the precision's range) or seeded ``random``. With
    sparse PEs (``sparse_m = M``) ``b`` is magnitude-pruned to (M/2):M along K (2:4 for M = 4);
    K must then be a multiple of M."""
    lo, hi = cfg.precision.operand_range
    if cfg.sparse_m and k % cfg.sparse_m:
        raise ConfigError(f"wave: k = {k}: with sparse_m = {cfg.sparse_m} K must be a "
                          f"multiple of {cfg.sparse_m}")
    if cfg.precision.bits == 1:
        if k % cfg.macs_per_pe:
            raise ConfigError(f"wave: k = {k}: binary PEs with {cfg.macs_per_pe} MACs each "
                              f"need K a multiple of {cfg.macs_per_pe} (no lane mask)")
        if kind == "random":
            rng = np.random.default_rng(seed)
            return rng.choice([-1, 1], (m, k)), rng.choice([-1, 1], (k, n))
        # ramp: +1/-1 by the parity of the ramp's value
        a = 1 + np.arange(m)[:, None] * k + np.arange(k)[None, :]
        b = 1 + np.arange(k)[:, None] * n + np.arange(n)[None, :]
        return 1 - 2 * (a % 2), 1 - 2 * ((b // 2) % 2)
    if kind == "random":
        rng = np.random.default_rng(seed)
        a, b = rng.integers(lo, hi + 1, (m, k)), rng.integers(lo, hi + 1, (k, n))
    else:
        span = hi - lo + 1
        a = 1 + np.arange(m)[:, None] * k + np.arange(k)[None, :]
        b = -(1 + np.arange(k)[:, None] * n + np.arange(n)[None, :])
        a, b = (a - lo) % span + lo, (b - lo) % span + lo
    if cfg.sparse_m:
        b, _ = prune_n_m(b, max(1, cfg.sparse_m // 2), cfg.sparse_m, axis=0)
    return a, b


def register_table(cfg: ArrayConfig):
    """The entries of :data:`OS_REGISTERS` or :data:`STATIONARY_REGISTERS` that ``cfg``'s
    array has (the index registers only with sparse PEs)."""
    lay = snapshot_layout(cfg)
    table = OS_REGISTERS if cfg.dataflow is Dataflow.OS else STATIONARY_REGISTERS
    return tuple(entry for entry in table if entry[0] in lay)


def register_name(i: int, j: int, port: str, fields: tuple[str, ...]) -> str:
    """The co-simulation's name of one compared register, e.g. ``pe[1][2].a_out.valid/first``."""
    return f"pe[{i}][{j}].{port}" + (f".{'/'.join(fields)}" if fields else "")


def _probes(cfg: ArrayConfig, top: SystolicArray):
    """(snapshot column, name, [(signal, bit shift)]) for every register the model records."""
    lay = snapshot_layout(cfg)
    probes = []
    for i in range(cfg.rows):
        for j in range(cfg.cols):
            pe = top.mesh.pes[i][j]
            for field_name, port, fields in register_table(cfg):
                value = getattr(pe, port)
                offset, length = lay[field_name]
                group = length // (cfg.rows * cfg.cols)
                name = register_name(i, j, port, fields)
                if group > 1:   # a sparse PE's group of activations, element by element
                    elems = getattr(value, fields[0])
                    base = offset + (i * cfg.cols + j) * group
                    probes += [(base + e, f"{name}[{e}]", [(elems[e], 0)]) for e in range(group)]
                    continue
                parts = ([(getattr(value, f), k) for k, f in enumerate(fields)] if fields
                         else [(value, 0)])
                probes.append((offset + i * cfg.cols + j, name, parts))
    if cfg.dataflow is Dataflow.OS:
        for j in range(cfg.cols):
            probes.append((lay["drain_left"][0] + j, f"mesh.drain_left[{j}]",
                           [(top.mesh.drain_left[j], 0)]))
    return probes


def vcd_name(cfg: ArrayConfig, index: int) -> str:
    """File name of the waveform of failing case ``index``."""
    return f"{cfg.dataflow.value}_{cfg.rows}x{cfg.cols}_{cfg.precision.value}_case{index}.vcd"


def _set_value(ctx, port, lay, field_name: str, row, lane: int) -> None:
    """Drive ``port.value`` of one edge lane (a group of activations with sparse PEs)."""
    offset, length = lay[field_name]
    group = length // _lanes(lay, field_name)
    if group == 1:
        ctx.set(port.value, int(row[offset + lane]))
    else:
        ctx.set(port.value, [int(v) for v in row[offset + lane * group:
                                                 offset + (lane + 1) * group]])


def _lanes(lay, field_name: str) -> int:
    """Edge lanes of a stimulus field: rows for the left edge, columns for the top."""
    flags = {"a_in": "a_flags_in", "b_in": "b_valid_in", "x_in": "x_flags_in",
             "w_in": "w_valid_in"}[field_name]
    return lay[flags][1]


def _drive(ctx, cfg: ArrayConfig, top: SystolicArray, lay, row) -> None:
    """Present the model's feeder (and weight-port) stimulus of one cycle on the top ports."""
    if cfg.dataflow is Dataflow.OS:
        o_af, o_bv = (lay[k][0] for k in ("a_flags_in", "b_valid_in"))
        for i, port in enumerate(top.a_in):
            fl = int(row[o_af + i])
            _set_value(ctx, port, lay, "a_in", row, i)
            ctx.set(port.valid, fl & 1)
            ctx.set(port.first, (fl >> 1) & 1)
            ctx.set(port.last, (fl >> 2) & 1)
        for j, port in enumerate(top.b_in):
            _set_value(ctx, port, lay, "b_in", row, j)
            if "b_idx_in" in lay:
                ctx.set(port.index, int(row[lay["b_idx_in"][0] + j]))
            ctx.set(port.valid, int(row[o_bv + j]))
        return
    o_xf, o_wr, o_wv = (lay[k][0] for k in ("x_flags_in", "w_row", "w_valid_in"))
    for i, port in enumerate(top.x_in):
        fl = int(row[o_xf + i])
        _set_value(ctx, port, lay, "x_in", row, i)
        if "x_idx_in" in lay:
            ctx.set(port.index, int(row[lay["x_idx_in"][0] + i]))
        ctx.set(port.valid, fl & 1)
        ctx.set(port.first, (fl >> 1) & 1)
    w_row = int(row[o_wr])
    ctx.set(top.w_en, int(w_row >= 0))
    ctx.set(top.w_row, max(w_row, 0))
    for j, port in enumerate(top.w_in):
        _set_value(ctx, port, lay, "w_in", row, j)
        if "w_idx_in" in lay:
            ctx.set(port.index, int(row[lay["w_idx_in"][0] + j]))
        ctx.set(port.valid, int(row[o_wv + j]))


def _simulate(cfg, snaps, *, deskew, pe_class, vcd_path=None) -> Mismatch | None:
    top = SystolicArray(cfg, deskew=deskew, pe_class=pe_class)
    lay = snapshot_layout(cfg)
    probes = _probes(cfg, top)
    columns = np.array([col for col, _, _ in probes], np.int64)
    o_out, o_valid = lay["out"][0], lay["out_valid"][0]
    value_needs_valid = cfg.dataflow is Dataflow.OS  # OS: the port value matters while draining
    n_cycles = snaps.shape[0]
    delays = [cfg.cols - 1 - j if deskew else 0 for j in range(cfg.cols)]
    extra = max(delays)
    found: list[Mismatch] = []
    zero = np.zeros(snaps.shape[1], np.int64)

    def port_ok(ctx, t, name, port, j, model_row) -> bool:
        """One output port during cycle t against the model's port (None: before reset)."""
        valid, value = ctx.get(port.valid), ctx.get(port.value)
        want_valid = int(model_row[o_valid + j]) if model_row is not None else 0
        if valid != want_valid:
            found.append(Mismatch(t, f"{name}.valid", valid, want_valid))
            return False
        if model_row is not None and (want_valid or not value_needs_valid):
            want = int(model_row[o_out + j])
            if value != want:
                found.append(Mismatch(t, f"{name}.value", value, want))
                return False
        return True

    async def bench(ctx):
        for t in range(n_cycles + extra):
            _drive(ctx, cfg, top, lay, snaps[t] if t < n_cycles else zero)
            for j in range(cfg.cols):  # output ports during cycle t (from registers)
                if t < n_cycles and not port_ok(ctx, t, f"mesh.out[{j}]", top.mesh.out[j], j,
                                                snaps[t]):
                    return
                src = t - delays[j]
                if deskew and src < n_cycles and not port_ok(
                        ctx, t, f"out[{j}] (de-skewed)", top.out[j], j,
                        snaps[src] if src >= 0 else None):
                    return
            await ctx.tick()
            if t >= n_cycles:
                continue
            got = np.array([sum(ctx.get(sig) << shift for sig, shift in parts)
                            for _, _, parts in probes], np.int64)
            want = snaps[t, columns]
            if not np.array_equal(got, want):
                k = int(np.flatnonzero(got != want)[0])
                found.append(Mismatch(t, probes[k][1], int(got[k]), int(want[k])))
                return

    sim = Simulator(top)
    sim.add_clock(CLOCK_PERIOD)
    sim.add_testbench(bench)
    if vcd_path is None:
        sim.run()
    else:
        vcd_path = Path(vcd_path)
        vcd_path.parent.mkdir(parents=True, exist_ok=True)
        with sim.write_vcd(str(vcd_path), str(vcd_path.with_suffix(".gtkw")),
                           traces=_gtkw_traces(top)):
            sim.run()
    return found[0] if found else None


def _gtkw_traces(top: SystolicArray) -> list:
    """Signals the GTKWave save file opens with: the ports, then each PE's state registers."""
    traces = []
    for name in ("a_in", "b_in", "x_in", "w_in", "out"):
        for lane in getattr(top, name, ()):
            traces += [lane.value, lane.valid]
    for row in top.mesh.pes:
        for pe in row:
            traces += [pe.acc, pe.res] if top.cfg.dataflow is Dataflow.OS else [pe.psum]
    return traces


#: Snapshot fields that hold operand values (stimulus and registers), as opposed to flags,
#: indices and sums.
OPERAND_FIELDS = ("a", "b", "a_in", "b_in", "x", "shadow", "active", "x_in", "w_in")


def binary_snapshots(cfg: ArrayConfig, snaps: np.ndarray) -> np.ndarray:
    """The model's snapshots of a binary array with every operand as the bit the RTL holds:
    1 for +1, 0 for -1 (and for an empty register, which holds 0 in the model)."""
    out = snaps.copy()
    for name, (offset, length) in snapshot_layout(cfg).items():
        if name in OPERAND_FIELDS and length:
            out[:, offset:offset + length] = out[:, offset:offset + length] > 0
    return out


def cosim_gemm(cfg: ArrayConfig, a, b, *, deskew: bool = False, pe_class=None,
               vcd_path: str | os.PathLike | None = None,
               vcd_always: bool = False) -> tuple[int, Mismatch | None]:
    """Run ``a @ b`` through the model and the RTL; return (model cycles, first mismatch).
    With sparse PEs (``cfg.sparse_m = M``) ``b`` runs N:M compressed, N the most nonzeros any
    group of M along K holds (K must be a multiple of M).

    With ``vcd_path`` a waveform of a failing run is written there (and a ``.gtkw`` beside it);
    with ``vcd_always`` too, the waveform is written whether the run passes or fails (one
    simulation, dumped as it runs: ``npulab rtl wave``).
    """
    check_rtl_config(cfg, "cosim")
    nm = None
    if cfg.sparse_m:  # the fewest kept values per group that hold b's nonzeros
        nm = (max(1, nm_density(b, cfg.sparse_m, axis=-2)), cfg.sparse_m)
    model = run_gemm(cfg, a, b, nm=nm, snapshots=True)
    snaps = model.snapshots  # for IS: of the transposed problem, which the hardware runs
    if cfg.precision.bits == 1:
        snaps = binary_snapshots(cfg, snaps)
    if vcd_always and vcd_path is not None:
        mismatch = _simulate(cfg, snaps, deskew=deskew, pe_class=pe_class, vcd_path=vcd_path)
        if mismatch is not None:
            mismatch = Mismatch(mismatch.cycle, mismatch.signal, mismatch.rtl, mismatch.model,
                                str(vcd_path))
        return int(model.counters.cycles), mismatch
    mismatch = _simulate(cfg, snaps, deskew=deskew, pe_class=pe_class)
    if mismatch is not None and vcd_path is not None:
        _simulate(cfg, snaps, deskew=deskew, pe_class=pe_class, vcd_path=vcd_path)
        mismatch = Mismatch(mismatch.cycle, mismatch.signal, mismatch.rtl, mismatch.model,
                            str(vcd_path))
    return int(model.counters.cycles), mismatch


def verify(cfg: ArrayConfig, *, cases: int = 10, seed: int = 0, deskew: bool = False,
           mutation: str | None = None, vcd_dir: str | os.PathLike | None = None,
           progress=None) -> VerifyReport:
    """Co-simulate ``cases`` random GEMMs (see :func:`random_gemm`); never raises on a
    mismatch, reports it. ``mutation`` names a deliberately broken PE from
    :data:`hw.systolic.rtl.mutations.MUTATIONS` (to see the check catch it). ``progress`` is
    called as ``progress(done, total)``."""
    from hw.systolic.rtl.mutations import pe_class_for

    check_rtl_config(cfg, "verify")
    pe_class = pe_class_for(cfg, mutation)
    rng = np.random.default_rng(seed)
    report = VerifyReport(cfg, deskew, mutation)
    for index in range(cases):
        a, b = random_gemm(rng, cfg)
        vcd = None if vcd_dir is None else Path(vcd_dir) / vcd_name(cfg, index)
        cycles, mismatch = cosim_gemm(cfg, a, b, deskew=deskew, pe_class=pe_class, vcd_path=vcd)
        report.cases.append(CaseResult(index, (a.shape[0], a.shape[1], a.shape[2], b.shape[2]),
                                       cycles, mismatch))
        if progress is not None:
            progress(index + 1, cases)
    return report
