"""Amaranth RTL of the systolic array (hw/systolic/rtl) against hw.numerics and the
register-level model, in Amaranth's simulator.

* Exhaustive int8 x int8 on both PEs against hw.numerics (wrapping and saturating 16-bit
  accumulators, so both overflow behaviours are exercised on real products).
* Cycle-by-cycle co-simulation: every register of every PE, every drain counter and every output
  port, each cycle, on random GEMMs for 2x2, 3x4 and 4x4 arrays, every dataflow, int4, int8
  and int16.
* Mutations: deliberately broken PEs and a broken drain must be caught, with a waveform.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Signal, signed
from amaranth.sim import Simulator

from hw.numerics import accumulate, mac
from hw.systolic.config import ArrayConfig, ConfigError
from hw.systolic.rtl import cosim
from hw.systolic.rtl.array import OutputStationaryMesh, SystolicArray
from hw.systolic.rtl.mutations import MUTATIONS, pe_class_for
from hw.systolic.rtl.pe import OutputStationaryPE, StationaryPE, psum_bits

OPERANDS = np.arange(-128, 128)


class _Lanes(Elaboratable):
    """256 copies of a PE, lane k holding row operand (or weight) k - 128 and all sharing one
    streamed operand: 256 cycles cover every int8 x int8 pair."""

    def __init__(self, make_pe):
        self.pes = [make_pe() for _ in OPERANDS]
        self.b = Signal(signed(8))
        self.first = Signal()
        self.valid = Signal()
        self.w_load = Signal()
        self.psum_in = Signal(signed(16))

    def elaborate(self, platform):
        m = Module()
        for k, pe in enumerate(self.pes):
            m.submodules[f"pe{k}"] = pe
            if isinstance(pe, OutputStationaryPE):
                m.d.comb += [pe.a_in.value.eq(int(OPERANDS[k])), pe.a_in.valid.eq(1),
                             pe.a_in.first.eq(self.first), pe.a_in.last.eq(1),
                             pe.b_in.value.eq(self.b), pe.b_in.valid.eq(1)]
            else:
                m.d.comb += [pe.w_in.value.eq(int(OPERANDS[k])), pe.w_in.valid.eq(1),
                             pe.w_load.eq(self.w_load), pe.x_in.value.eq(self.b),
                             pe.x_in.valid.eq(self.valid), pe.x_in.first.eq(self.first),
                             pe.psum_in.eq(self.psum_in)]
        return m


def _run(lanes: _Lanes, bench) -> None:
    sim = Simulator(lanes)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("saturate", [False, True], ids=["wrap", "saturate"])
def test_os_pe_exhaustive_int8(saturate):
    """Every int8 x int8 product, accumulated in runs of five into a 16-bit accumulator (which
    overflows), equals hw.numerics.mac; ``res`` takes the same value on ``last``."""
    lanes = _Lanes(lambda: OutputStationaryPE(8, 16, saturate))
    errors = []

    async def bench(ctx):
        acc = [0] * len(OPERANDS)
        for step, b in enumerate(range(-128, 128)):
            first = step % 5 == 0
            ctx.set(lanes.first, first)
            ctx.set(lanes.b, b)
            await ctx.tick()
            for k, a in enumerate(OPERANDS.tolist()):
                acc[k] = a * b if first else int(mac(acc[k], a, b, 16, saturate))
                got = (ctx.get(lanes.pes[k].acc), ctx.get(lanes.pes[k].res))
                if got != (acc[k], acc[k]):
                    errors.append((a, b, got, acc[k]))
                    return

    _run(lanes, bench)
    assert not errors, f"(a, b, (acc, res), expected): {errors[0]}"


@pytest.mark.parametrize("saturate", [False, True], ids=["wrap", "saturate"])
def test_stationary_pe_exhaustive_int8(saturate):
    """Row-1 WS PE (16-bit partial sums, its full width): psum = psum_in + x * w for every
    int8 pair, with psum_in near both limits so the addition wraps or saturates."""
    assert psum_bits(8, 16, 1) == 16
    lanes = _Lanes(lambda: StationaryPE(8, 16, saturate, row=1))
    incoming = [32767 - 100, -32768 + 50, 0, 12345, -20000, 32767, -32768]
    errors = []

    async def bench(ctx):
        ctx.set(lanes.w_load, 1)  # cycle 0: every lane's shadow <= its weight
        await ctx.tick()
        ctx.set(lanes.w_load, 0)
        ctx.set(lanes.valid, 1)
        for step, x in enumerate(range(-128, 128)):
            p_in = incoming[step % len(incoming)]
            ctx.set(lanes.first, step == 0)  # copy shadow -> active, then keep using active
            ctx.set(lanes.b, x)
            ctx.set(lanes.psum_in, p_in)
            await ctx.tick()
            for k, w in enumerate(OPERANDS.tolist()):
                want = int(accumulate(p_in, int(mac(0, x, w, 64, False)), 16, saturate))
                got = ctx.get(lanes.pes[k].psum)
                if got != want:
                    errors.append((x, w, p_in, got, want))
                    return

    _run(lanes, bench)
    assert not errors, f"(x, w, psum_in, got, expected): {errors[0]}"


def test_psum_bits_hold_every_sum():
    """Row i's register width holds the extreme sum of i+1 products exactly."""
    for bits in (8, 16):
        lo = -(1 << (bits - 1))
        for row in range(70):
            width = psum_bits(bits, 64, row)
            extreme = (row + 1) * lo * lo  # the largest magnitude sum
            assert extreme <= (1 << (width - 1)) - 1
            assert extreme > (1 << (width - 2)) - 1  # and one bit fewer would not hold it


# ------------------------------------------------------------------ co-simulation, every cycle
SHAPES = [(2, 2), (3, 4), (4, 4)]


@pytest.mark.parametrize("precision", ["int4", "int8", "int16"])
@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
def test_cosim_random_gemms(shape, dataflow, precision):
    cfg = ArrayConfig(rows=shape[0], cols=shape[1], dataflow=dataflow, precision=precision)
    report = cosim.verify(cfg, cases=3, seed=shape[0] * 10 + shape[1])
    assert report.ok, report.summary()
    assert report.cycles > 0 and len(report.cases) == 3


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("precision,acc_bits", [("int4", 8), ("int8", 16), ("int16", 33)])
def test_cosim_overflow_and_deskew(dataflow, precision, acc_bits):
    """Narrow saturating accumulators (sums leave the range) and the de-skew stage."""
    cfg = ArrayConfig(rows=3, cols=3, dataflow=dataflow, precision=precision,
                      acc_bits=acc_bits, overflow="saturate")
    rng = np.random.default_rng(7)
    lo, hi = cfg.precision.operand_range
    a = np.full((9, 8), lo)  # every product is the largest: sums saturate at acc_bits
    b = rng.choice([lo, hi], (8, 5))
    cycles, mismatch = cosim.cosim_gemm(cfg, a, b, deskew=True)
    assert mismatch is None, str(mismatch)
    assert cycles > 0
    report = cosim.verify(cfg, cases=2, seed=3, deskew=True)
    assert report.ok, report.summary()


def test_cosim_one_row_and_one_column_arrays():
    for rows, cols in ((1, 3), (3, 1), (1, 1)):
        for dataflow in ("os", "ws"):
            report = cosim.verify(ArrayConfig(rows=rows, cols=cols, dataflow=dataflow), cases=2)
            assert report.ok, report.summary()


def test_deskew_aligns_output_rows():
    """With de-skew, all columns of one output row leave in the same cycle (OS: per drain
    step; WS: per streamed row), and the values are the GEMM's."""
    cfg = ArrayConfig(rows=2, cols=3, dataflow="ws")
    a = np.arange(1, 9).reshape(4, 2)
    b = np.arange(-3, 3).reshape(2, 3)
    top = SystolicArray(cfg, deskew=True)
    rows_seen = []
    snaps = cosim.run_gemm(cfg, a, b, snapshots=True).snapshots
    lay = cosim.snapshot_layout(cfg)

    async def bench(ctx):
        for t in range(snaps.shape[0] + cfg.cols - 1):
            cosim._drive(ctx, cfg, top, lay, snaps[t] if t < snaps.shape[0] else 0 * snaps[0])
            valid = [ctx.get(p.valid) for p in top.out]
            if any(valid):
                assert all(valid), f"cycle {t}: de-skewed valid bits {valid}"
                rows_seen.append([ctx.get(p.value) for p in top.out])
            await ctx.tick()

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert np.array_equal(np.array(rows_seen), a @ b)


# ------------------------------------------------------------------------------ mutations
@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_unsigned_multiply_is_caught_with_waveform(dataflow, tmp_path):
    cfg = ArrayConfig(rows=3, cols=4, dataflow=dataflow)
    report = cosim.verify(cfg, cases=2, seed=1, mutation="unsigned-multiply", vcd_dir=tmp_path)
    assert not report.ok
    bad = next(c for c in report.cases if not c.ok)
    mm = bad.mismatch
    # The first wrong register is a PE's accumulator / partial sum, early in the run.
    assert mm.signal.startswith("pe[") and mm.signal.endswith((".acc", ".psum"))
    assert mm.rtl != mm.model
    vcd_file = tmp_path / Path(mm.vcd).name
    assert vcd_file.is_file() and vcd_file.with_suffix(".gtkw").is_file()
    vcd = vcd_file.read_text()
    register = "acc" if dataflow == "os" else "psum"
    assert "$enddefinitions" in vcd and f" {register} " in vcd
    # The waveform covers the failing cycle: its timestamp (10 ns clock, in ps) is present.
    assert f"#{(mm.cycle + 1) * 10_000}" in vcd
    assert "FAIL" in report.summary() and f"cycle {mm.cycle}" in report.summary()


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_every_mutation_is_caught(mutation):
    # the index-mux mutation needs sparse PEs, the XNOR one binary PEs; the product ones
    # break dense and sparse PEs alike
    sparse = (4,) if mutation.startswith("index") else (0, 4)
    for dataflow in ("os", "ws", "is"):
        for sparse_m in sparse:
            cfg = (ArrayConfig(rows=2, cols=2, dataflow=dataflow, precision="binary")
                   if mutation == "xor-product" else
                   ArrayConfig(rows=2, cols=2, dataflow=dataflow, sparse_m=sparse_m))
            if mutation == "xor-product" and sparse_m:
                continue
            assert not cosim.verify(cfg, cases=3, seed=5, mutation=mutation).ok


def test_broken_drain_timing_is_caught():
    """A mesh whose drain shifts one row too many per cycle computes the right sums but moves
    them at the wrong time: the per-cycle comparison catches it (a final-matrix check of the
    PE accumulators would not)."""

    class EarlyShift(OutputStationaryMesh):
        def elaborate(self, platform):
            m = super().elaborate(platform)
            for j in range(self.cols):
                pe = self.pes[0][j]
                m.d.comb += pe.shift.eq(self.drain_left[j] != 0)  # row 0 shifts too
            return m

    cfg = ArrayConfig(rows=3, cols=3, dataflow="os")
    top = SystolicArray(cfg)
    top.mesh.__class__ = EarlyShift
    a = np.arange(12).reshape(4, 3) - 6
    b = np.arange(9).reshape(3, 3) - 4
    snaps = cosim.run_gemm(cfg, a, b, snapshots=True).snapshots
    found = []
    lay = cosim.snapshot_layout(cfg)
    probes = cosim._probes(cfg, top)

    async def bench(ctx):
        for t in range(snaps.shape[0]):
            cosim._drive(ctx, cfg, top, lay, snaps[t])
            await ctx.tick()
            for col, name, parts in probes:
                if sum(ctx.get(s) << sh for s, sh in parts) != snaps[t, col]:
                    found.append((t, name))
                    return

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert found and found[0][1].endswith(".res"), found


def test_mutation_names_and_fp16_are_clear_errors():
    cfg = ArrayConfig(rows=2, cols=2, dataflow="os")
    with pytest.raises(ConfigError, match="mutation = 'nope'.*unsigned-multiply"):
        pe_class_for(cfg, "nope")
    with pytest.raises(ConfigError, match="precision = 'fp16'.*'int4', 'int8' and 'int16'"):
        SystolicArray(ArrayConfig(rows=2, cols=2, precision="fp16"))
    with pytest.raises(ConfigError, match="64 x 64"):
        SystolicArray(ArrayConfig(rows=65, cols=2))
    with pytest.raises(ConfigError, match="index-mux-stuck.*sparse_m > 0"):
        pe_class_for(cfg, "index-mux-stuck")


# --- N:M sparse PEs (issue 27) ------------------------------------------------------------

@pytest.mark.parametrize("precision", ["int4", "int8"])
@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
@pytest.mark.parametrize("sparse_m", [2, 4, 8])
def test_cosim_sparse_pes(dataflow, precision, sparse_m):
    """Random GEMMs with weights pruned to a random N:M (1 <= N <= M): every register of the
    sparse PEs (groups of activations, index registers) equal to the model every cycle."""
    cfg = ArrayConfig(rows=3, cols=2, dataflow=dataflow, precision=precision,
                      sparse_m=sparse_m)
    report = cosim.verify(cfg, cases=3, seed=sparse_m)
    assert report.ok, report.summary()
    assert "sparse_m" in report.summary()


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_cosim_sparse_saturating_deskewed(dataflow):
    cfg = ArrayConfig(rows=2, cols=3, dataflow=dataflow, acc_bits=16, overflow="saturate",
                      sparse_m=4)
    report = cosim.verify(cfg, cases=2, seed=11, deskew=True)
    assert report.ok, report.summary()


def test_sparse_pe_index_mux_selects_every_position():
    """The WS sparse PE alone: a group of four activations and a weight of 1 at each index in
    turn; psum must be the selected activation (the mux, exhaustively over its 4 inputs)."""
    pe = StationaryPE(8, 32, x_group=4, index_bits=2)
    group = [-7, 13, -128, 127]
    seen = []

    async def bench(ctx):
        for index in range(4):
            ctx.set(pe.w_load, 1)
            ctx.set(pe.w_in.value, 1)
            ctx.set(pe.w_in.valid, 1)
            ctx.set(pe.w_in.index, index)
            await ctx.tick()
            ctx.set(pe.w_load, 0)
            ctx.set(pe.x_in.value, group)
            ctx.set(pe.x_in.valid, 1)
            ctx.set(pe.x_in.first, 1)
            await ctx.tick()
            ctx.set(pe.x_in.valid, 0)
            ctx.set(pe.x_in.first, 0)
            seen.append(ctx.get(pe.psum))

    sim = Simulator(pe)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == group


# --- dual-MAC int4 PEs (issue 27) ---------------------------------------------------------

@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_cosim_dual_mac_int4(dataflow):
    """Operand pairs in every register, both products added: equal to the model every cycle,
    with a wide accumulator and with a narrow saturating one (a pair's sum alone overflows
    8 bits), and de-skewed; a broken multiplier is caught."""
    cfg = ArrayConfig(rows=3, cols=2, dataflow=dataflow, precision="int4", macs_per_pe=2)
    report = cosim.verify(cfg, cases=3, seed=4)
    assert report.ok, report.summary()
    assert "2 MACs/PE" in report.summary()
    narrow = ArrayConfig(rows=2, cols=3, dataflow=dataflow, precision="int4", acc_bits=8,
                         overflow="saturate", macs_per_pe=2)
    report = cosim.verify(narrow, cases=2, seed=5, deskew=True)
    assert report.ok, report.summary()
    assert not cosim.verify(cfg, cases=2, seed=5, mutation="narrow-product").ok
