"""Closed forms of parallel training: communication bytes, ZeRO memory, bubble, activations.

Each function is one published formula, cited in its docstring; :mod:`compiler.parallel.step`
composes a step from simulated times and uses these for the bytes and memory it reports, and
tests hold the simulated pipeline to :func:`bubble_fraction`.
"""

from __future__ import annotations

__all__ = ["tp_allreduce_bytes", "collective_sent_bytes", "dp_allreduce_bytes", "zero_comm_bytes",
           "zero_memory_bytes", "bubble_fraction", "activation_bytes_per_layer"]


def tp_allreduce_bytes(b: int, s: int, h: int, dtype_bytes: int = 2,
                       recompute: str = "none") -> float:
    """TP all-reduce buffer bytes per layer per micro-batch (Megatron-LM, Shoeybi et al. 2019
    §3): 2 forward + 2 backward all-reduces of ``b*s*h`` elements = ``4*b*s*h*bytes``; full
    recomputation runs the forward (and its 2 all-reduces) again: ``6*b*s*h*bytes``
    (Korthikanti et al. 2022 §5 count the recomputed forward's communication too). With
    sequence parallelism the same total moves as all-gathers + reduce-scatters."""
    n = 6 if recompute == "full" else 4
    return float(n * b * s * h * dtype_bytes)


def collective_sent_bytes(op: str, nbytes: float, p: int) -> float:
    """Bytes one rank sends for an nccl-tests-sized collective with the ring algorithm
    (Patarasuk & Yuan 2009; Thakur et al. 2005): all-reduce ``2(p-1)/p n``, all-gather /
    reduce-scatter ``(p-1)/p n``; all-to-all ``(p-1)/p n`` of the per-rank buffer ``n``; a
    2-rank broadcast (a send) ``n``."""
    if p <= 1:
        return 0.0
    if op == "allreduce":
        return 2.0 * (p - 1) / p * nbytes
    if op in ("allgather", "reducescatter", "alltoall"):
        return (p - 1) / p * nbytes
    if op == "broadcast":
        return float(nbytes)
    raise ValueError(f"collective_sent_bytes: op = {op!r}: allreduce, allgather, "
                     f"reducescatter, alltoall or broadcast")


def dp_allreduce_bytes(params: float, dp: int, dtype_bytes: int = 2) -> float:
    """Bytes each rank sends to all-reduce ``params`` gradients with a ring: ``2(dp-1)/dp *
    params * bytes`` (Patarasuk & Yuan 2009)."""
    return collective_sent_bytes("allreduce", params * dtype_bytes, dp)


def zero_comm_bytes(params: float, dp: int, stage: int, dtype_bytes: int = 2) -> float:
    """Bytes each rank sends per step under ZeRO (Rajbhandari et al. 2020 §7): stages 0-2 move
    ``2 Psi`` (all-reduce = reduce-scatter + all-gather), stage 3 ``3 Psi`` (parameters gathered
    for forward and backward, gradients reduce-scattered), times ``(dp-1)/dp`` for a ring (the
    paper's figures are the large-``dp`` limit); ``Psi`` = ``params * dtype_bytes``."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_comm_bytes: stage = {stage!r}: must be 0..3")
    k = 3 if stage == 3 else 2
    return k * params * dtype_bytes * (dp - 1) / dp if dp > 1 else 0.0


def zero_memory_bytes(params: float, dp: int, stage: int, offload: bool = False) -> dict:
    """Model-state bytes per rank, mixed-precision Adam (ZeRO §3, Fig. 1): ``16 Psi`` total ->
    stage 1 ``4 Psi + 12 Psi/N_d``, stage 2 ``2 Psi + 14 Psi/N_d``, stage 3 ``16 Psi/N_d``.
    ``offload`` (ZeRO-Offload, Ren et al. 2021 §4): the 12-byte optimizer state (fp32 master
    weights, momentum, variance) lives in host memory, not on the device."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_memory_bytes: stage = {stage!r}: must be 0..3")
    w = 2.0 * params / (dp if stage >= 3 else 1)
    g = 2.0 * params / (dp if stage >= 2 else 1)
    o = 0.0 if offload else 12.0 * params / (dp if stage >= 1 else 1)
    return {"params": w, "grads": g, "optimizer": o, "total": w + g + o}


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Fraction of the step a pipeline stage idles: ``(p-1)/(m+p-1)`` for GPipe and 1F1B
    (Huang et al. 2019; Narayanan et al. 2021 §2.2.1); with ``v`` interleaved chunks the bubble
    is ``(p-1)/(v m)`` of the ideal time (Narayanan et al. 2021 §2.2.2), i.e.
    ``(p-1)/(v m + p - 1)`` of the step."""
    return (p - 1) / (v * m + p - 1)


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1, *,
                               sequence_parallel: bool = False, recompute: str = "none",
                               dtype_bytes: int = 2) -> float:
    """Activation bytes one layer keeps for its backward (Korthikanti et al. 2022, Table 2;
    see :mod:`compiler.parallel.step`'s docstring)."""
    sbh = float(s) * b * h
    if recompute == "full":
        out = 2.0 * sbh / (t if sequence_parallel else 1)
    elif recompute == "selective":
        out = 34.0 * sbh / t if sequence_parallel else sbh * (10.0 + 24.0 / t)
    elif sequence_parallel:
        out = sbh / t * (34.0 + 5.0 * a * s / h)
    else:
        out = sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t))
    return out * dtype_bytes / 2.0
