"""Glue between ``compiler.parallel`` (the step planner) and ``hw.system`` (devices, network).

:func:`op_time_for` turns a system's device into the planner's ``op_time`` callback, the
``op_seconds`` of its :class:`~npulab.devices.Device` (:func:`npulab.devices.device_model`):

* a :class:`~hw.system.system.RooflineDevice` costs each IR op as a roofline,
  ``max(flops / achievable FLOP/s, bytes / achievable B/s)`` (:func:`op_cost` gives the FLOPs
  and bytes: a MAC is 2 FLOP; operands and results are read/written once at ``dtype_bytes``);
* a :class:`~hw.system.system.ChipDevice` runs each distinct op on the npulab chip through the
  run pipeline (:func:`npulab.pipeline.run`: a systolic chip's native timing, an NVDLA build's
  cycle model) and converts its cycles at the chip clock; results are cached per op shape.

:func:`comm_time_for` turns the system's network into the planner's ``comm_time`` callback with
:func:`hw.system.collectives.collective` (simulated with contention, or analytic), cached per
(op, bytes, groups). :func:`plan` runs :func:`compiler.parallel.plan_step` with both and also
the one-chip baseline for the scaling efficiency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from compiler.ir import Op
from compiler.parallel import (StepReport, Strategy, get_model, model_names, parse_strategy,
                               plan_step)
from hw.system.system import SystemConfig
from npulab.devices import device_model, op_cost

__all__ = ["op_cost", "op_time_for", "comm_time_for", "plan", "SystemPlan", "resolve_model"]


def op_time_for(system: SystemConfig, dtype_bytes: int = 2,
                chip_loader: Callable | None = None) -> Callable[[Op], float]:
    """The planner's ``op_time`` for ``system.device``: its :class:`~npulab.devices.Device`'s
    ``op_seconds`` (module docstring)."""
    return device_model(system.device, dtype_bytes, chip_loader).op_seconds


def comm_time_for(system: SystemConfig, *, mode: str = "sim", algorithm: str = "auto",
                  contention: bool = True) -> Callable[[str, float, list], float]:
    """The planner's ``comm_time``: :func:`hw.system.collectives.collective` on ``system``'s
    network, every group of ``groups`` running at once; groups of one rank cost nothing."""
    from hw.system.collectives import collective
    cache: dict[tuple, float] = {}

    def comm_time(op: str, nbytes: float, groups: list) -> float:
        groups = [tuple(int(r) for r in g) for g in groups]
        groups = [g for g in groups if len(g) > 1]
        if not groups or nbytes <= 0:
            return 0.0
        key = (op, float(nbytes), tuple(groups))
        if key not in cache:
            cache[key] = collective(system, op, nbytes, algorithm=algorithm, groups=groups,
                                    mode=mode, contention=contention).time_s
        return cache[key]
    return comm_time


def resolve_model(name: str, *, seq_len: int | None = None, global_batch: int | None = None,
                  micro_batch: int | None = None, batch: int | None = None,
                  image_size: int | None = None):
    """An LLM preset (:func:`compiler.parallel.get_model`, with overrides) or a zoo graph (one
    micro-batch of ``batch`` samples on one rank: data parallelism only)."""
    if name in model_names():
        overrides = {k: v for k, v in (("seq_len", seq_len), ("global_batch", global_batch),
                                       ("micro_batch", micro_batch)) if v is not None}
        return get_model(name, **overrides)
    from compiler.frontends import zoo
    if name in zoo.names():
        params = {k: v for k, v in (("batch", batch), ("image_size", image_size),
                                    ("seq_len", seq_len)) if v is not None}
        return zoo.get(name, **params)
    raise ValueError(f"--model {name!r}: unknown model; LLM presets: {', '.join(model_names())}; "
                     f"zoo models: {', '.join(zoo.names())}")


@dataclass
class SystemPlan:
    """A planned training step and its one-chip baseline."""

    system: SystemConfig
    report: StepReport
    baseline: StepReport
    comm_mode: str

    @property
    def scaling_efficiency(self) -> float:
        return self.report.scaling_efficiency(self.baseline)

    def __repr__(self) -> str:
        dev = getattr(self.system.device, "name", str(self.system.device))
        lines = [f"SystemPlan: {self.report.model} on {self.system.name} ({dev}, "
                 f"{self.system.topology.n_ranks} ranks), comm {self.comm_mode}"]
        lines += ["  " + x for x in self.report.summary_lines()]
        lines.append(f"  scaling efficiency {100 * self.scaling_efficiency:.1f} % vs one chip "
                     f"({self.baseline.samples_per_s:.4g} samples/s)")
        return "\n".join(lines)

    def to_pandas(self):
        """One row per pipeline stage (:meth:`compiler.parallel.StepReport.to_pandas`)."""
        return self.report.to_pandas()

    def plot_breakdown(self):
        """The step time by part (:meth:`compiler.parallel.StepReport.plot_breakdown`)."""
        return self.report.plot_breakdown()

    def to_dict(self) -> dict:
        out = {"system": self.system.name, "ranks_in_system": self.system.topology.n_ranks,
               "device": getattr(self.system.device, "name", str(self.system.device)),
               "comm_mode": self.comm_mode, "scaling_efficiency": self.scaling_efficiency,
               "baseline_step_s": self.baseline.step_s, "one_chip_samples_per_s":
               self.baseline.samples_per_s}
        out.update(self.report.to_dict())
        return out


def host_link_gbps(system: SystemConfig) -> float | None:
    """GB/s (efficiency included) of the slowest host-to-rank link, or None without a host."""
    import numpy as np
    topo = system.topology
    if topo.host is None:
        return None
    src, dst = np.asarray(topo.link_src), np.asarray(topo.link_dst)
    mask = (src == topo.host) & (dst < topo.n_ranks)
    if not mask.any():          # a host on a switch: its one link
        mask = src == topo.host
    return float(np.min(np.asarray(topo.link_bytes_per_s, float)[mask])) / 1e9


def host_for(system: SystemConfig):
    """The :class:`~compiler.parallel.training.HostOffload` of ``system``: its host link when it
    has one, the defaults otherwise."""
    from compiler.parallel.training import HostOffload
    gbps = host_link_gbps(system)
    return HostOffload() if gbps is None else HostOffload(link_gbps=gbps)


def input_pipeline_for(system: SystemConfig, text: str):
    """``--input`` text -> an InputPipeline; without ``host_link_gbps`` in the text, the
    system's host link (when it has one) is the host-to-device copy's bandwidth."""
    from compiler.parallel.training import InputPipeline, parse_options
    ip = parse_options(InputPipeline, "" if text.strip().lower() == "default" else text,
                       "--input")
    given = {part.split("=", 1)[0].strip().lower().replace("-", "_")
             for part in text.split(",") if "=" in part}
    if "host_link_gbps" not in given:
        gbps = host_link_gbps(system)
        if gbps is not None:
            ip = replace(ip, host_link_gbps=gbps)
    return ip


def plan(system: SystemConfig, model, strategy: Strategy | str, *, comm_mode: str = "sim",
         algorithm: str = "auto", dtype_bytes: int = 2, microbatches: int | None = None,
         op_time: Callable | None = None, input_pipeline=None,
         compression=None, timeline: bool = False, launch=None,
         sharding: str = "megatron", kernels: str = "fused") -> SystemPlan:
    """Plan one training step of ``model`` on ``system`` with ``strategy`` (ranks 0..N-1 of the
    system, N = dp*tp*pp), and the same global batch on one chip for the scaling efficiency
    (with the same input pipeline: one loader feeds it). ``sharding="ilp"`` shards each layer
    as the plan search's integer program does (:mod:`compiler.parallel.intra_op`, on one
    tensor-parallel group of this network) instead of Megatron-LM's split; ``kernels``:
    :func:`~compiler.parallel.step.plan_step`'s (fused or unfused element-wise work)."""
    if isinstance(strategy, str):
        strategy = parse_strategy(strategy)
    if microbatches is not None:
        strategy = replace(strategy, microbatches=microbatches)
    n = strategy.n_ranks
    if n > system.topology.n_ranks:
        raise ValueError(f"--strategy dp={strategy.dp},tp={strategy.tp},pp={strategy.pp} needs {n} "
                         f"chips; system {system.name!r} has {system.topology.n_ranks}")
    if isinstance(model, str):
        model = resolve_model(model)
    device = device_model(system.device, dtype_bytes)       # loaded once: ops and numbers
    op_time = op_time or device.op_seconds
    comm_time = comm_time_for(system, mode=comm_mode, algorithm=algorithm)
    peak, mem = device.peak_flops, device.memory_bytes
    layer_plan = None
    if sharding not in ("megatron", "ilp"):
        raise ValueError(f"--sharding {sharding!r}: must be megatron or ilp")
    if sharding == "ilp" and strategy.tp > 1:
        from compiler.parallel.intra_op import IntraOpProblem
        from compiler.parallel.llm import TransformerModel
        if not isinstance(model, TransformerModel):
            raise ValueError("--sharding ilp: needs an LLM preset (a transformer's layers)")
        group = [tuple(range(strategy.tp))]
        layer_plan = IntraOpProblem(
            model.layer_ops(1), strategy.tp, op_time,
            lambda op, nbytes: comm_time(op, nbytes, group), recompute=strategy.recompute,
            dtype_bytes=dtype_bytes,
            boundaries=("T",) if strategy.sequence_parallel else ("R",)).solve()
    report = plan_step(model, strategy, n, None, op_time, comm_time, device_mem_bytes=mem,
                       dtype_bytes=dtype_bytes, peak_flops=peak, input_pipeline=input_pipeline,
                       compression=compression, timeline=timeline, launch=launch,
                       host=host_for(system), layer_plan=layer_plan, kernels=kernels)
    # One chip, same samples per step: every micro-batch of every replica runs on it.
    one = Strategy(dp=1, tp=1, pp=1, microbatches=report.microbatches * strategy.dp,
                   schedule=strategy.schedule, recompute=strategy.recompute)
    baseline = plan_step(model, one, 1, None, op_time, comm_time, device_mem_bytes=mem,
                         dtype_bytes=dtype_bytes, peak_flops=peak,
                         input_pipeline=input_pipeline, launch=launch, kernels=kernels)
    if not math.isfinite(report.step_s):
        raise ValueError("plan: step time is not finite")
    return SystemPlan(system, report, baseline, comm_mode)
