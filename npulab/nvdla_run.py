"""``npulab run`` on an NVDLA build: lower the graph to hardware layers, time each one.

The graph is lowered by :func:`compiler.backends.nvdla.lower_graph` (NVIDIA's fusion rules: conv +
bias + batch-norm + ReLU (+ element-wise add) (+ pooling on the fly) per hardware layer; standalone
SDP, PDP, CDP and BDMA layers otherwise). Each convolution layer is timed by the structural cycle
model :func:`hw.nvdla.cycles.conv_cycles`, each standalone layer by
:func:`hw.nvdla.cycles.engine_cycles`; the memory both see is the build's
(:func:`hw.nvdla.memory.memory_path`). Hardware layers run one after another, as NVDLA's firmware
schedules a single-pipeline network; the layers' cycles add up to the network's.

The result is a :class:`~npulab.simulate.RunResult` like a systolic chip's, so ``--format``
and ``-o`` work the same; ``timing`` is ``"nvdla"`` and ``config`` holds the ``nvdla`` table.
"""

from __future__ import annotations

import math

from compiler.backends.nvdla import lower_graph
from hw.nvdla.config import CACC_BITS, NvdlaConfig
from hw.nvdla.conv_layer import ConvLayer
from hw.nvdla.cycles import BYTES, conv_cycles, engine_cycles
from hw.nvdla.memory import memory_path
from hw.nvdla.program import HwLayer
from hw.spec import ChipSpec, chip_spec
from npulab.record import LayerActions, LayerResult, SramAccess
from npulab.simulate import RunResult

__all__ = ["simulate_nvdla", "NVDLA_SCOPE"]

NVDLA_SCOPE = ("NVDLA structural cycle model: hardware layers (NVIDIA's fusion) back to back; "
               "conv = atomic ops + weight-load bubbles, CBUF plan, CDMA vs memory, SDP/PDP "
               "rates; standalone SDP/PDP/CDP/BDMA = engine rate vs memory; no register "
               "programming time")

_LAYER_DEFAULTS = dict(gemm_count=None, gemm_m=None, gemm_n=None, gemm_k=None,
                       pe_busy_cycles=None, mapping_efficiency_pct=None, ifmap_sram_reads=None,
                       filter_sram_reads=None, ofmap_sram_writes=None, ofmap_sram_reads=None,
                       folds=None, stall_link_cycles=None, stall_sram_cycles=None, link_bytes=None)


def _fc_as_batched_conv(conv: ConvLayer, fc_batch: int) -> list[tuple[ConvLayer, int]]:
    """An FC layer over ``conv.batch`` images in batch mode: ``fc_batch`` images share one
    weight fetch, i.e. one hardware layer whose stripes cover the images' output points (a 1x1
    convolution over ``fc_batch`` points with ``C*H*W`` channels). Returns the hardware layers
    as (layer, how many times it runs): full batches, then the remainder."""
    per_image = conv.C * conv.H * conv.W
    full, rest = divmod(conv.batch, fc_batch)
    out = []
    for points, count in ((fc_batch, full), (rest, 1)):
        if points and count:
            out.append((ConvLayer(per_image, 1, points, conv.K, precision=conv.precision,
                                  bias=conv.bias, bn=conv.bn, relu=conv.relu, name=conv.name),
                        count))
    return out


def _conv_layer(cfg: NvdlaConfig, hl: HwLayer, clock_hz: float, peak_macs: int) -> LayerResult:
    parts = [(hl.conv, 1)]
    if hl.fc_batch > 1 and hl.conv.batch > 1:
        parts = _fc_as_batched_conv(hl.conv, hl.fc_batch)
    timed = [(conv_cycles(cfg, conv), n) for conv, n in parts]
    c = timed[0][0]
    cycles = sum(t.total * n for t, n in timed)
    rd = sum((t.data_bytes + t.weight_bytes + t.sdp_read_bytes) * n for t, n in timed)
    wr = sum(t.write_bytes * n for t, n in timed)
    busy = sum(t.compute_cycles * n for t, n in timed)
    macs = hl.conv.macs
    plan = f"{c.cbuf_mode}" + (f" x{c.h_slices}" if c.h_slices > 1 else "") + \
        f" banks {c.data_banks}/{c.weight_banks}" + (f" fc_batch {hl.fc_batch}"
                                                      if hl.fc_batch > 1 else "")
    actions = _conv_actions(cfg, hl, timed, rd + wr)
    units = {"cdma": sum((t.cdma_data_cycles + t.cdma_weight_cycles) * n for t, n in timed),
             "cmac": busy, "sdp": sum(t.sdp_cycles * n for t, n in timed),
             "pdp": sum(t.pdp_cycles * n for t, n in timed),
             "wdma": sum(t.write_cycles * n for t, n in timed),
             "startup": sum(t.startup_cycles * n for t, n in timed)}
    return LayerResult(
        name=hl.name, op="+".join(_units(hl)), engine="conv", macs=macs, cycles=cycles,
        actions=actions, units=_whole_cycles(units),
        utilization_pct=100.0 * macs / (peak_macs * cycles) if cycles else 0.0,
        compute_cycles=busy, stall_dram_cycles=max(0, cycles - busy),
        dram_read_bytes=rd, dram_write_bytes=wr,
        bound={"mac": "compute", "cdma": "dram"}.get(c.bound, c.bound), tiling=plan,
        **_LAYER_DEFAULTS)


#: SDP multiply-add stages per output element for each fused unit (the output converter is one
#: more); PDP: one operation per input element; CDP (LRN): square, window sum over the local
#: size (5 in the zoo's models), LUT interpolation and the final multiply, about 8.
_SDP_STAGES = ("bias", "bn", "eltwise", "lut")
_CDP_OPS_PER_ELEMENT = 8


def _whole_cycles(units: dict) -> dict:
    """The units that were busy, their cycles rounded up."""
    return {k: int(math.ceil(v)) for k, v in units.items() if v}


def _conv_actions(cfg: NvdlaConfig, hl: HwLayer, timed, dram_bytes: int) -> LayerActions:
    """What a convolution hardware layer did (:attr:`LayerResult.actions`): each atomic
    operation reads one 1x1 x atomic-C input vector from CBUF; each stripe loads every MAC
    cell's atomic-C weights from CBUF into the cells' weight registers; CACC accumulates one
    partial sum per cell per atomic operation (read-modify-write, counted as register bits);
    CDMA writes every fetched byte into CBUF; SDP (and PDP on the fly) run their stages on every
    output element."""
    precision = hl.conv.precision
    bits = 8 * BYTES[precision]
    kpar = cfg.macs(precision) // cfg.atomic_c
    atomic_ops = sum(t.atomic_ops * n for t, n in timed)
    stripes = sum(t.stripes * n for t, n in timed)
    fetched = sum((t.data_bytes + t.weight_bytes) * n for t, n in timed)
    weight_bits = stripes * kpar * cfg.atomic_c * bits
    c = hl.conv
    outputs = c.batch * c.K * c.P * c.Q
    stages = 1 + sum(1 for f in _SDP_STAGES if (getattr(c, f, False) if f != "lut" else hl.lut))
    pool = outputs if c.pool_kernel is not None else 0
    return LayerActions(
        macs=hl.conv.macs, precision=precision, acc_bits=CACC_BITS[precision],
        reg_bits=weight_bits + atomic_ops * kpar * 2 * CACC_BITS[precision],
        sram={"cbuf": SramAccess(read_bits=atomic_ops * cfg.atomic_c * bits + weight_bits,
                                 write_bits=8 * fetched)},
        dram_bits=8 * dram_bytes, link_bits=0, vector_ops=outputs * stages + pool)


def _units(hl: HwLayer) -> list[str]:
    if hl.conv is None:
        return [hl.kind] + (["lut"] if hl.lut else [])
    c = hl.conv
    units = ["conv"] + [f for f in ("bias", "bn", "eltwise", "relu") if getattr(c, f)]
    if hl.lut:
        units.append("lut")
    if c.pool_kernel is not None:
        units.append("pdp")
    return units


def _engine_layer(cfg: NvdlaConfig, hl: HwLayer, clock_hz: float) -> LayerResult:
    bpe = BYTES[hl.precision]
    n_in = hl.batch * hl.in_c * hl.in_h * hl.in_w
    n_out = hl.batch * hl.out_c * hl.out_h * hl.out_w
    if hl.kind == "pdp" and hl.passes:
        parts = []
        for p in hl.passes:
            e_in = hl.batch * hl.in_c * p.in_h * p.in_w
            e_out = hl.batch * hl.out_c * p.out_h * p.out_w
            parts.append(engine_cycles(cfg, "pdp", e_in, e_out, e_in * bpe, e_out * bpe,
                                       name=hl.name))
    else:
        kind = "cdp" if hl.kind == "cdp" else "bdma" if hl.kind == "bdma" else "sdp"
        parts = [engine_cycles(cfg, kind, n_in, n_out, n_in * bpe * hl.operands, n_out * bpe,
                               name=hl.name)]
    cycles = sum(p.total for p in parts)
    rd = sum(p.read_bytes for p in parts)
    wr = sum(p.write_bytes for p in parts)
    busy = sum(math.ceil(p.engine_cycles) for p in parts)
    bound = "dram" if sum(p.memory_cycles for p in parts) > sum(p.engine_cycles for p in parts) \
        else "compute"
    elements = sum(p.elements_in for p in parts)
    ops = {"sdp": elements * (hl.operands + (1 if hl.lut else 0)), "pdp": elements,
           "cdp": elements * _CDP_OPS_PER_ELEMENT, "bdma": 0}[hl.kind]
    actions = LayerActions(macs=0, precision=hl.precision, acc_bits=CACC_BITS[hl.precision],
                           reg_bits=0, sram={}, dram_bits=8 * (rd + wr), link_bits=0,
                           vector_ops=ops)
    mem = sum(p.memory_cycles for p in parts)
    units = {"rdma": mem * rd / (rd + wr) if rd + wr else 0.0,
             hl.kind: sum(p.engine_cycles for p in parts),
             "wdma": mem * wr / (rd + wr) if rd + wr else 0.0,
             "startup": sum(p.latency_cycles for p in parts)}
    return LayerResult(
        name=hl.name, op="+".join(_units(hl)), engine=hl.kind, macs=0, cycles=cycles,
        utilization_pct=None, compute_cycles=busy, stall_dram_cycles=max(0, cycles - busy),
        dram_read_bytes=rd, dram_write_bytes=wr,
        bound=bound,
        tiling=(f"{len(parts)} PDP passes" if len(parts) > 1 else None), actions=actions,
        units=_whole_cycles(units), **_LAYER_DEFAULTS)


def simulate_nvdla(graph, cfg: NvdlaConfig | ChipSpec, precision: str = "int8", *,
                   skip_unsupported: bool = False, progress=None) -> RunResult:
    """Lower ``graph`` onto ``cfg`` (an NVDLA build's config or its
    :class:`~hw.spec.ChipSpec`) and time every hardware layer (see the module docstring).

    ``progress(done, total, name)`` is called after each hardware layer."""
    spec = chip_spec(cfg)
    cfg = spec.config
    if not isinstance(cfg, NvdlaConfig):
        raise ValueError(f"cfg = {spec.name}: a {spec.kind} chip; simulate_nvdla times NVDLA "
                         f"builds (npulab.run takes every kind)")
    program = lower_graph(graph, cfg, precision, skip_unsupported=skip_unsupported)
    clock_hz = cfg.clock_mhz * 1e6
    peak = cfg.macs(precision)
    layers = []
    for i, hl in enumerate(program.layers):
        layers.append(_conv_layer(cfg, hl, clock_hz, peak) if hl.conv is not None
                      else _engine_layer(cfg, hl, clock_hz))
        if progress is not None:
            progress(i + 1, len(program.layers), hl.name)
    cycles = sum(x.cycles for x in layers)
    macs = sum(x.macs for x in layers)
    rd = sum(x.dram_read_bytes for x in layers)
    wr = sum(x.dram_write_bytes for x in layers)
    latency = cycles / clock_hz
    batch = graph.batch
    path = memory_path(cfg)
    totals = {
        "cycles": cycles, "macs": macs, "latency_s": latency, "batch": batch,
        "fps": batch / latency if cycles else 0.0,
        "utilization_pct": 100.0 * macs / (peak * cycles) if cycles else 0.0,
        "effective_tops": 2 * macs / latency / 1e12 if cycles else 0.0,
        "peak_tops": 2 * peak * clock_hz / 1e12,
        "peak_macs_per_cycle": peak,
        "compute_cycles": sum(x.compute_cycles for x in layers),
        "dram_read_bytes": rd, "dram_write_bytes": wr,
        "dram_available_gbps": path.bytes_per_cycle * clock_hz / 1e9,
        "memory": path.source,
        "memory_bound_layers": sum(1 for x in layers if x.bound == "dram"),
        "hardware_layers": program.counts(),
        "layers_simulated": len(layers),
        "ops_skipped": [f"{s.name} ({s.kind}: {s.reason})" for s in program.skipped],
        "skipped_macs": program.skipped_macs,
        "precision": precision,
    }
    return RunResult(model=graph.name, chip=cfg.name, spec=spec, timing="nvdla",
                     scope=NVDLA_SCOPE, layers=tuple(layers), totals=totals)

