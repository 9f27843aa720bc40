"""Inter-operator parallelism: layers sliced into pipeline stages by dynamic programming.

The first level of Alpa's search (Zheng et al., OSDI'22, §5): a pipeline of ``p`` stages, each a
contiguous run of layers on its own device mesh. With ``B`` micro-batches the step takes
``sum_i t_i + (B - 1) max_i t_i`` (Alpa eq. 2; ``t_i`` = stage ``i``'s forward + backward time
per micro-batch). Here every stage runs on a mesh of the same shape (Megatron-LM's PTD-P, and
what :func:`~compiler.parallel.step.plan_step` simulates), so ``sum_i t_i`` is the same for
every slicing and the best slicing is the one with the least ``max_i t_i``.

:func:`slice_stages` finds it by dynamic programming over (stage, first layer)::

    G[s][k] = min over j of max(T(s, k, j), G[s+1][j])      G[p][L] = 0

where ``T(s, k, j)`` is the time of layers ``k..j-1`` on stage ``s`` (plus the embedding on the
first stage and the logits on the last) and a stage is allowed only when its memory fits: model
state per layer plus activations per layer times the micro-batches it holds at once (1F1B:
``min(p - s, B)``, so early stages hold more). ``O(p L^2)``, vectorized over ``j``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["StageSlicing", "slice_stages"]


@dataclass(frozen=True)
class StageSlicing:
    """Layers per stage and the slowest stage's seconds per micro-batch."""

    stage_layers: tuple
    max_stage_s: float
    stage_s: tuple
    stage_memory: tuple


def slice_stages(layer_s: Sequence[float] | float, layers: int, p: int, *,
                 first_s: float = 0.0, last_s: float = 0.0,
                 layer_mem: float = 0.0, first_mem: float = 0.0, last_mem: float = 0.0,
                 layer_act: float = 0.0, in_flight: Sequence[int] | None = None,
                 fixed_mem: float = 0.0, memory_limit: float | None = None) -> StageSlicing | None:
    """The slicing of ``layers`` layers into ``p`` non-empty contiguous stages with the least
    slowest stage (module docstring); ``None`` when no slicing fits ``memory_limit``.

    ``layer_s``: seconds per micro-batch of each layer (a scalar: all alike); ``first_s`` /
    ``last_s``: extra seconds on the first / last stage. Memory of stage ``s`` with ``n``
    layers: ``n * (layer_mem + layer_act * in_flight[s]) + fixed_mem`` (+ ``first_mem`` /
    ``last_mem``). Ties go to the slicing that puts more layers on earlier stages.
    """
    import numpy as np
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"slice_stages: layers = {layers!r}: must be an integer >= 1")
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= layers:
        raise ValueError(f"slice_stages: p = {p!r}: must be an integer in 1..layers = {layers}")
    ls = np.broadcast_to(np.asarray(layer_s, dtype=np.float64), (layers,))
    pre = np.concatenate([[0.0], np.cumsum(ls)])
    fl = np.asarray(in_flight if in_flight is not None else [1] * p, dtype=np.float64)
    if fl.shape != (p,):
        raise ValueError(f"slice_stages: in_flight must list {p} counts")
    L = layers
    k = np.arange(L + 1)[:, None]
    j = np.arange(L + 1)[None, :]
    n = (j - k).astype(np.float64)
    span = pre[None, :] - pre[:, None]                       # seconds of layers k..j-1
    g = np.full(L + 1, math.inf)
    g[L] = 0.0
    choice = np.zeros((p, L + 1), dtype=np.int64)
    for s in range(p - 1, -1, -1):
        t = span + (first_s if s == 0 else 0.0) + (last_s if s == p - 1 else 0.0)
        ok = (n >= 1) & (j <= L - (p - 1 - s))
        if memory_limit is not None:
            mem = n * (layer_mem + layer_act * fl[s]) + fixed_mem \
                + (first_mem if s == 0 else 0.0) + (last_mem if s == p - 1 else 0.0)
            ok &= mem <= memory_limit
        cand = np.where(ok, np.maximum(t, g[None, :]), math.inf)
        # the largest j among the minima: more layers on earlier stages
        best = np.min(cand, axis=1)
        rev = cand[:, ::-1]
        jj = L - np.argmin(rev, axis=1)
        choice[s] = jj
        g = best
    if not math.isfinite(g[0]):
        return None
    sizes, stage_s, stage_mem, at = [], [], [], 0
    for s in range(p):
        nxt = int(choice[s][at])
        cnt = nxt - at
        sizes.append(cnt)
        stage_s.append(float(pre[nxt] - pre[at]) + (first_s if s == 0 else 0.0)
                       + (last_s if s == p - 1 else 0.0))
        stage_mem.append(cnt * (layer_mem + layer_act * fl[s]) + fixed_mem
                         + (first_mem if s == 0 else 0.0) + (last_mem if s == p - 1 else 0.0))
        at = nxt
    return StageSlicing(tuple(sizes), float(g[0]), tuple(stage_s), tuple(stage_mem))
