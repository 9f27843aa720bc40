"""The systolic array in Amaranth 0.5: edge delay lines, PE meshes and the top level.

Block diagram (in words)
------------------------
OS (:class:`OutputStationaryMesh`): an R x C grid of :class:`~.pe.OutputStationaryPE`. Row
operands enter at the left edge (row i through a skew line of i registers), column operands at
the top edge (column j through j registers); each PE forwards both one hop per cycle. Each PE's
``res`` register is also a stage of its column's drain shift chain; a per-column counter
(``drain_left``, 0..R) starts at R when ``last`` enters the bottom PE and gates which rows shift
(during drain cycle s only rows >= s load from above, so a PE that finishes its next output can
load ``res`` while older values still pass below it). The bottom ``res`` is the column's output.

WS/IS (:class:`StationaryMesh`): an R x C grid of :class:`~.pe.StationaryPE`. Streamed
operands enter at the left (row i through i skew registers). The weight port writes one row of
C ``shadow`` registers per cycle (``w_en``, ``w_row``). Partial sums flow down the columns; the
bottom ``psum`` is the column's output.

:class:`SystolicArray` wraps a mesh with its skew lines and, optionally, a de-skew stage that
delays column j by C-1-j cycles so that every column's output for the same output row leaves in
the same cycle (one SRAM row write instead of C column writes; the last column is not delayed,
so a run's total cycle count is unchanged).
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.sparsity import nm_index_bits
from hw.systolic.config import ArrayConfig, ConfigError, Dataflow, Overflow
from hw.systolic.rtl.pe import (
    OutputStationaryPE, StationaryPE, output_layout, stream_layout, top_layout, weight_layout,
)

__all__ = ["DelayLines", "OutputStationaryMesh", "StationaryMesh", "SystolicArray", "check_rtl_config"]


class DelayLines(wiring.Component):
    """``len(delays)`` independent lanes; lane k delays its input by ``delays[k]`` registers
    (0: a wire). ``out[k]`` during cycle t is ``inp[k]`` of cycle ``t - delays[k]`` (zero
    before reset has been overwritten)."""

    def __init__(self, layout, delays):
        self.layout = layout
        self.delays = tuple(int(d) for d in delays)
        n = len(self.delays)
        super().__init__({"inp": In(layout).array(n), "out": Out(layout).array(n)})

    @classmethod
    def skew(cls, layout, lanes: int) -> "DelayLines":
        """Edge skew: lane i delayed by i cycles (the systolic wavefront)."""
        return cls(layout, range(lanes))

    @classmethod
    def deskew(cls, layout, lanes: int) -> "DelayLines":
        """Output de-skew: lane j delayed by lanes-1-j cycles (re-aligns a skewed row)."""
        return cls(layout, [lanes - 1 - j for j in range(lanes)])

    def elaborate(self, platform):
        m = Module()
        for k, delay in enumerate(self.delays):
            prev = self.inp[k]
            for stage in range(delay):
                reg = Signal(self.layout, name=f"lane{k}_stage{stage}")
                m.d.sync += reg.eq(prev)
                prev = reg
            m.d.comb += self.out[k].eq(prev)
        return m


class _Mesh(wiring.Component):
    def __init__(self, rows: int, cols: int, bits: int, acc_bits: int, saturate: bool,
                 pe_class, signature: dict, group: int = 1, index_bits: int = 0,
                 lanes: int = 1):
        self.rows, self.cols = rows, cols
        self.bits, self.acc_bits, self.saturate = bits, acc_bits, saturate
        self.pe_class = pe_class
        self.group, self.index_bits, self.lanes = group, index_bits, lanes
        super().__init__(signature)
        self.pes = [[self._make_pe(i) for _ in range(cols)] for i in range(rows)]

    def _make_pe(self, row: int):
        return self.pe_class(self.bits, self.acc_bits, self.saturate, self.group,
                             self.index_bits, self.lanes)


class OutputStationaryMesh(_Mesh):
    """R x C output-stationary PEs with per-column drain control (see the module docstring).

    Ports: ``a_in[R]`` (skewed row operands), ``b_in[C]`` (skewed column operands),
    ``out[C]`` (``value`` = bottom ``res``, ``valid`` while the column drains). ``pes[i][j]``
    and ``drain_left[j]`` expose the PEs and drain counters to simulation.

    Timing contract: the register-level model's OS contract. ``drain_left[j]`` loads R in the
    cycle ``last`` enters PE (R-1, j), else counts down to 0; while it is L > 0, PE (i, j) with
    ``i >= R + 1 - L`` loads ``res`` from the PE above and ``out[j]`` is valid.
    """

    def __init__(self, rows, cols, bits, acc_bits, saturate=False, pe_class=OutputStationaryPE,
                 group=1, index_bits=0, lanes=1):
        super().__init__(rows, cols, bits, acc_bits, saturate, pe_class, {
            "a_in": In(stream_layout(bits, True, group)).array(rows),
            "b_in": In(top_layout(bits, index_bits, lanes)).array(cols),
            "out": Out(output_layout(acc_bits)).array(cols),
        }, group, index_bits, lanes)
        self.drain_left = [Signal(range(rows + 1), name=f"drain_left_{j}") for j in range(cols)]

    def elaborate(self, platform):
        m = Module()
        r_, c_ = self.rows, self.cols
        for i in range(r_):
            for j in range(c_):
                pe = self.pes[i][j]
                m.submodules[f"pe_{i}_{j}"] = pe
                m.d.comb += pe.a_in.eq(self.a_in[i] if j == 0 else self.pes[i][j - 1].a_out)
                m.d.comb += pe.b_in.eq(self.b_in[j] if i == 0 else self.pes[i - 1][j].b_out)
                if i > 0:
                    m.d.comb += [pe.res_in.eq(self.pes[i - 1][j].res),
                                 pe.shift.eq(self.drain_left[j] >= r_ + 1 - i)]
        for j in range(c_):
            left = self.drain_left[j]
            bottom = self.pes[r_ - 1][j]
            with m.If(bottom.a_in.last):
                m.d.sync += left.eq(r_)
            with m.Elif(left != 0):
                m.d.sync += left.eq(left - 1)
            m.d.comb += [self.out[j].value.eq(bottom.res), self.out[j].valid.eq(left != 0)]
        return m


class StationaryMesh(_Mesh):
    """R x C weight/input-stationary PEs with a row-addressed weight port.

    Ports: ``x_in[R]`` (skewed streamed operands), ``w_en``/``w_row``/``w_in[C]`` (write row
    ``w_row`` of ``shadow`` registers this cycle), ``out[C]`` (``value`` = bottom ``psum``,
    ``valid`` = its ``psum_valid``). ``pes[i][j]`` exposes the PEs to simulation.

    Timing contract: the register-level model's WS/IS contract; the weight port and the
    feeder's handshakes are the sequencer's (the model's feeder), not the mesh's.
    """

    def __init__(self, rows, cols, bits, acc_bits, saturate=False, pe_class=StationaryPE,
                 x_group=1, w_group=1, index_bits=0):
        self.x_group, self.w_group = x_group, w_group
        super().__init__(rows, cols, bits, acc_bits, saturate, pe_class, {
            "x_in": In(stream_layout(bits, False, x_group,
                                     index_bits if w_group > 1 else 0)).array(rows),
            "w_en": In(1),
            "w_row": In(range(rows)),
            "w_in": In(weight_layout(bits, w_group,
                                     index_bits if x_group > 1 else 0)).array(cols),
            "out": Out(output_layout(acc_bits)).array(cols),
        }, 1, index_bits)

    def _make_pe(self, row: int):
        return self.pe_class(self.bits, self.acc_bits, self.saturate, row=row,
                             x_group=self.x_group, w_group=self.w_group,
                             index_bits=self.index_bits)

    def elaborate(self, platform):
        m = Module()
        r_, c_ = self.rows, self.cols
        for i in range(r_):
            row_selected = Signal(name=f"w_sel_{i}")
            m.d.comb += row_selected.eq(self.w_en & (self.w_row == i))
            for j in range(c_):
                pe = self.pes[i][j]
                m.submodules[f"pe_{i}_{j}"] = pe
                m.d.comb += [pe.x_in.eq(self.x_in[i] if j == 0 else self.pes[i][j - 1].x_out),
                             pe.w_load.eq(row_selected), pe.w_in.eq(self.w_in[j])]
                if i > 0:
                    above = self.pes[i - 1][j]
                    m.d.comb += [pe.psum_in.eq(above.psum), pe.psum_valid_in.eq(above.psum_valid)]
        for j in range(c_):
            bottom = self.pes[r_ - 1][j]
            m.d.comb += [self.out[j].value.eq(bottom.psum), self.out[j].valid.eq(bottom.psum_valid)]
        return m


def check_rtl_config(cfg: ArrayConfig, where: str = "rtl") -> None:
    """The RTL covers integer precisions; a float one is a clear error, not an elaboration
    failure."""
    if not isinstance(cfg, ArrayConfig):
        raise ConfigError(f"{where}: cfg = {cfg!r}: must be an ArrayConfig")
    if cfg.precision.is_float:
        raise ConfigError(f"{where}: precision = {cfg.precision.value!r}: the RTL supports "
                          f"'binary', 'int4', 'int8' and 'int16' (the floating-point "
                          f"precisions are modelled in Numba only)")
    if cfg.rows > 64 or cfg.cols > 64:
        raise ConfigError(f"{where}: rows x cols = {cfg.rows} x {cfg.cols}: RTL generation "
                          f"supports up to 64 x 64 PEs (elaboration time grows with R*C)")


class SystolicArray(wiring.Component):
    """The array's top level: edge skew, PE mesh and (``deskew=True``) output de-skew.

    Ports (OS): ``a_in[R]`` (``value``, ``valid``, ``first``, ``last``), ``b_in[C]``
    (``value``, ``valid``), ``out[C]`` (``value``, ``valid``).
    Ports (WS, IS): ``x_in[R]`` (``value``, ``valid``, ``first``), ``w_en``, ``w_row``,
    ``w_in[C]`` (``value``, ``valid``), ``out[C]``.

    Timing contract: the register-level model's, with the feeder presenting one vector per cycle
    on the inputs (the model's feeder/weight port) and ``out`` carrying the model's bottom-edge
    output port; with ``deskew`` column j of ``out`` is that port delayed by C-1-j cycles.
    IS is the WS hardware; only the feeder's choice of streamed operand differs.
    """

    def __init__(self, cfg: ArrayConfig, *, deskew: bool = False, pe_class=None):
        try:
            check_rtl_config(cfg)
        except ConfigError:
            self._MustUse__used = True  # rejected, not forgotten: no "never used" warning
            raise
        self.cfg = cfg
        self.deskew = deskew
        bits, r_, c_ = cfg.precision.bits, cfg.rows, cfg.cols
        self.bits = bits
        saturate = cfg.overflow is Overflow.SATURATE
        # N:M sparse PEs: groups of M activations on the activation side, indices on the
        # weight side (OS: a groups, b indices; WS: x groups, w indices; IS: the reverse)
        # dual-MAC PEs (int4, macs_per_pe = 2): both sides carry that many operands
        lanes = cfg.macs_per_pe
        g = cfg.sparse_m or lanes
        ib = nm_index_bits(g) if cfg.sparse_m else 0
        if cfg.dataflow is Dataflow.OS:
            self.mesh = OutputStationaryMesh(r_, c_, bits, cfg.acc_bits, saturate,
                                             pe_class or OutputStationaryPE, g, ib, lanes)
            a_lay, b_lay = stream_layout(bits, True, g), top_layout(bits, ib, lanes)
            self.skews = {"a_in": DelayLines.skew(a_lay, r_), "b_in": DelayLines.skew(b_lay, c_)}
            sig = {"a_in": In(a_lay).array(r_), "b_in": In(b_lay).array(c_)}
        else:
            xg, wg = (g, lanes) if cfg.dataflow is Dataflow.WS else (lanes, g)
            self.mesh = StationaryMesh(r_, c_, bits, cfg.acc_bits, saturate,
                                       pe_class or StationaryPE, xg, wg, ib)
            x_lay = stream_layout(bits, False, xg, ib if wg > 1 else 0)
            w_lay = weight_layout(bits, wg, ib if xg > 1 else 0)
            self.skews = {"x_in": DelayLines.skew(x_lay, r_)}
            sig = {"x_in": In(x_lay).array(r_), "w_en": In(1),
                   "w_row": In(range(r_)), "w_in": In(w_lay).array(c_)}
        sig["out"] = Out(output_layout(cfg.acc_bits)).array(c_)
        self.deskewer = DelayLines.deskew(output_layout(cfg.acc_bits), c_) if deskew else None
        super().__init__(sig)

    @property
    def name(self) -> str:
        """Module name used in Verilog, e.g. ``systolic_ws_4x4_int8_acc32``."""
        c = self.cfg
        sat = "_sat" if c.overflow is Overflow.SATURATE else ""
        sparse = (f"_sparse{c.sparse_m}" if c.sparse_m else "") + (
            f"_x{c.macs_per_pe}" if c.macs_per_pe > 1 else "")
        return (f"systolic_{c.dataflow.value}_{c.rows}x{c.cols}_{c.precision.value}"
                f"_acc{c.acc_bits}{sat}{sparse}{'_deskew' if self.deskew else ''}")

    def elaborate(self, platform):
        m = Module()
        m.submodules.mesh = self.mesh
        for port, skew in self.skews.items():
            m.submodules[f"skew_{port}"] = skew
            for k, lane in enumerate(getattr(self, port)):
                m.d.comb += [skew.inp[k].eq(lane), getattr(self.mesh, port)[k].eq(skew.out[k])]
        if self.cfg.dataflow is not Dataflow.OS:
            m.d.comb += [self.mesh.w_en.eq(self.w_en), self.mesh.w_row.eq(self.w_row)]
            for j in range(self.cfg.cols):
                m.d.comb += self.mesh.w_in[j].eq(self.w_in[j])
        for j in range(self.cfg.cols):
            if self.deskewer is None:
                m.d.comb += self.out[j].eq(self.mesh.out[j])
            else:
                m.d.comb += [self.deskewer.inp[j].eq(self.mesh.out[j]),
                             self.out[j].eq(self.deskewer.out[j])]
        if self.deskewer is not None:
            m.submodules.deskew = self.deskewer
        return m
