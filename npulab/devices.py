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
           "op_cost"]


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
    run pipeline. Its peak FLOP/s and memory capacity are not reported (the planner's MFU and
    fit check are left out for it, as before)."""

    spec: ChipSpec
    peak_flops: float | None = None
    memory_bytes: float | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    def op_seconds(self, op: Op) -> float:
        key = _shape_key(op)
        if key not in self._cache:
            from npulab.pipeline import run
            result = run(Graph(f"op.{op.name}", (replace(op, inputs=()),)), self.spec)
            self._cache[key] = result.totals["cycles"] / self.spec.clock_hz
        return self._cache[key]


def _chip(device: ChipDevice, dtype_bytes: int, chip_loader: Callable | None) -> SimulatedChip:
    from npulab.pipeline import resolve_device
    spec = device.spec() if chip_loader is None else chip_loader(device.config)
    return SimulatedChip(resolve_device(spec))


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
