"""The devices a multi-chip system runs on, behind one interface the planner uses.

A system's ``device`` is a hardware description (``hw.system``): a
:class:`~hw.system.system.RooflineDevice` (a GPU-like roofline with measured efficiencies) or a
:class:`~hw.system.system.ChipDevice` (an npulab chip, loaded as a :class:`hw.spec.ChipSpec`).
:func:`device_model` turns either into a :class:`Device`: its name, its peak FLOP/s and memory
capacity where known (for MFU and the fit check), and ``op_seconds(op)``, the time of one IR op
on one device:

* :class:`RooflineModel` -- ``max(flops / achievable FLOP/s, bytes / achievable B/s)``
  (:func:`op_cost`: a MAC is 2 FLOP; operands and results are read/written once);
* :class:`SimulatedChip` -- the op alone through the run pipeline (:func:`npulab.pipeline.run`,
  any engine kind: a systolic chip's native timing, an NVDLA build's cycle model), its cycles
  at the chip clock; cached per op shape.

:data:`DEVICE_MODELS` maps each description type to its model: the one place that tells
them apart. A new kind of device adds a description in ``hw.system`` and a model here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from compiler.ir import ELEMENTWISE_OPS, Conv2d, Gemm, Graph, Move, Op, Pool
from hw.spec import ChipSpec
from hw.system.system import ChipDevice, RooflineDevice

__all__ = ["Device", "RooflineModel", "SimulatedChip", "DEVICE_MODELS", "device_model",
           "op_cost", "simulate_op"]


class Device(Protocol):
    """What the planner asks of a device."""

    name: str
    peak_flops: float | None          # FLOP/s, for MFU; None when not known
    memory_bytes: float | None        # capacity, for the fit check; None when not modelled

    def op_seconds(self, op: Op) -> float:
        """Seconds one device takes for ``op`` alone."""


def op_cost(op: Op, dtype_bytes: int = 2) -> tuple[float, float, bool]:
    """``(flops, bytes moved, is_matrix)`` of one IR op for a roofline.

    GEMM / conv: ``2 * MACs`` FLOPs; bytes = input + weights + output (conv: the real NCHW
    tensors, not the im2col matrix). Element-wise: one FLOP per input element, ``operands + 1``
    tensors of ``elements`` each. Pooling: one FLOP per window element, input + output. Moves:
    read + write."""
    if not isinstance(op, (Gemm, Conv2d, Pool, Move) + ELEMENTWISE_OPS):
        raise TypeError(f"op_cost: {op!r} is not an IR op")
    nbytes = float(op.traffic_bytes(dtype_bytes))
    if isinstance(op, (Gemm, Conv2d)):
        return 2.0 * op.macs, nbytes, True
    if isinstance(op, ELEMENTWISE_OPS):
        return float(op.elements * op.operands), nbytes, False
    if isinstance(op, Pool):
        return float(op.output_elements * op.kernel_h * op.kernel_w), nbytes, False
    return 0.0, nbytes, False


def _shape_key(op: Op) -> tuple:
    """An op's identity for caching: its type and fields without name and inputs."""
    fields = {k: v for k, v in vars(op).items() if k not in ("name", "inputs")}
    return (type(op).__name__,) + tuple(sorted(fields.items()))


@dataclass
class RooflineModel:
    """A :class:`~hw.system.system.RooflineDevice` as a :class:`Device`."""

    device: RooflineDevice
    dtype_bytes: int = 2

    @property
    def name(self) -> str:
        return self.device.name

    @property
    def peak_flops(self) -> float:
        return self.device.peak_tflops * 1e12

    @property
    def memory_bytes(self) -> float:
        return float(self.device.mem_bytes)

    def op_seconds(self, op: Op) -> float:
        flops, nbytes, matrix = op_cost(op, self.dtype_bytes)
        return self.device.op_seconds(flops, nbytes, matrix)


@dataclass
class SimulatedChip:
    """An npulab chip (:class:`~hw.spec.ChipSpec`) as a :class:`Device`: ops run through the
    run pipeline. Its peak FLOP/s is not reported (the planner's MFU is left out for it); its
    memory capacity is the system's ``[device] memory_gib`` when given (the fit check), else
    unknown."""

    spec: ChipSpec
    peak_flops: float | None = None
    memory_bytes: float | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def element_bytes(self) -> int:
        """Bytes of one tensor element at the matrix engine's precision (NVDLA builds and
        other engines: 2, fp16)."""
        precision = getattr(self.spec.engine.config, "precision", None)
        if precision is not None and precision.bits % 8:
            raise ValueError(f"{self.spec.name}: array.precision = {precision.value!r} packs "
                             f"operands below a byte; LLM runs count whole bytes per element: "
                             f"use int8 or wider (4-bit weights: --weight-bits 4)")
        return precision.bits // 8 if precision is not None else 2

    def op_seconds(self, op: Op) -> float:
        return self.op_run(op)["device_s"]

    def op_run(self, op: Op) -> dict:
        """``op`` alone on the chip (cached per shape): ``device_s`` (its cycles at the chip
        clock), ``launch_s`` (the chip's launch overhead for this kind of kernel), ``cycles``,
        ``dram_read_bytes``, ``dram_write_bytes`` and ``bound`` (what limits it)."""
        key = _shape_key(op)
        if key not in self._cache:
            self._cache[key] = simulate_op(self.spec, op)
        return self._cache[key]


def simulate_op(spec: ChipSpec, op: Op) -> dict:
    """One op alone through the run pipeline on ``spec``: :meth:`SimulatedChip.op_run`'s
    record (a plain dict, so a worker process can return it)."""
    from npulab.pipeline import run
    result = run(Graph(f"op.{op.name}", (replace(op, inputs=()),)), spec)
    t = result.totals
    bound = getattr(result.layers[0], "bound", None) if result.layers else None
    # (an engine kind whose record lacks a figure, e.g. NVDLA's launch overhead: 0)
    return {"device_s": t["cycles"] / spec.clock_hz, "launch_s": t.get("launch_overhead_s", 0.0),
            "cycles": int(t["cycles"]), "dram_read_bytes": int(t.get("dram_read_bytes", 0)),
            "dram_write_bytes": int(t.get("dram_write_bytes", 0)), "bound": bound or ""}


def _chip(device: ChipDevice, dtype_bytes: int, chip_loader: Callable | None) -> SimulatedChip:
    from npulab.pipeline import resolve_device
    spec = device.spec() if chip_loader is None else chip_loader(device.config)
    memory = None if device.memory_gib is None else device.memory_gib * 2**30
    return SimulatedChip(resolve_device(spec), memory_bytes=memory)


#: The model of each device description: ``model(description, dtype_bytes, chip_loader)``.
DEVICE_MODELS: dict[type, Callable] = {
    RooflineDevice: lambda d, dtype_bytes, chip_loader: RooflineModel(d, dtype_bytes),
    ChipDevice: _chip,
}


def device_model(device, dtype_bytes: int = 2, chip_loader: Callable | None = None) -> Device:
    """The :class:`Device` of a system's device description. ``chip_loader(config)`` (tests)
    replaces loading a chip device's config."""
    model = DEVICE_MODELS.get(type(device))
    if model is None:
        raise TypeError(f"device_model: unknown device {device!r}; known: "
                        f"{', '.join(t.__name__ for t in DEVICE_MODELS)}")
    return model(device, dtype_bytes, chip_loader)
