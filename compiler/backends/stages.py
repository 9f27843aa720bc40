"""Layer-pipelined placement: consecutive layers in stages, each stage on its own cores.

The default placement (:mod:`compiler.backends.multicore`) splits every op over all the cores
of the chip, one op after another. The pipelined placement (``CompileOptions.placement =
"pipeline"``) instead cuts the graph into ``S`` stages of consecutive ops and gives each stage
``cores // S`` cores (and ``1/S`` of the L2's capacity and banks); inputs stream through the
stages, so in the steady state every stage works on a different input at once, as a TPU pod's
pipeline or a multi-core NPU's layer pipeline does (Stream, Tangram). An op is still split over
its stage's cores as the default placement splits it over the chip's.

Cuts. A stage boundary sits after an op whose output is the only tensor the later ops read from
the earlier ones (a CNN's block boundary, a transformer layer's residual stream), never inside
a fused group. The next stage reads that tensor as its input: from the L2, where the stage
before left it, when the chip has one and it fits (``compile_graph``'s ``input_in_l2`` and
``output_in_l2``), otherwise from DRAM. Each reader must take it as its first input, or be a
same-size commutative :class:`Binary` (a residual add, whose second operand is then the stage's
input).

Stages. For ``S`` stages each op is costed on a ``cores // S``-core chip with the multi-core
split's estimate (:func:`compiler.backends.multicore.op_estimate`), and the cuts minimise the
slowest stage (the steady state's period; :func:`_partition`). Unless the user fixes ``S``
(``CompileOptions.stages``), ``S`` is the count from 1 to ``min(cores, cut segments)`` with the
shortest estimated period (ties: fewer stages); the run (:mod:`npulab.stage_run`) simulates it
beside one stage and keeps the shorter period. The simulation runs every stage's program at
once against the shared DRAM (:func:`hw.executor.execute_shared`): the stages contend for it as
they do in the steady state.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, fields, replace

from compiler.backends.systolic import shortcut_is_input
from compiler.fusion import find_groups
from compiler.ir import Binary, Graph
from hw.chip import ChipConfig

__all__ = ["StagePlan", "cut_points", "stage_graph", "stage_chip", "plan_stages"]


@dataclass(frozen=True)
class StagePlan:
    """``bounds[s]`` = ``(first op, end op)`` of stage ``s`` (graph op indices, end
    exclusive), each stage on ``cores_per_stage`` cores; ``estimates[s]``: its estimated
    cycles (the planner's, before simulation)."""

    bounds: tuple[tuple[int, int], ...]
    cores_per_stage: int
    estimates: tuple[float, ...]

    @property
    def stages(self) -> int:
        return len(self.bounds)


def cut_points(graph: Graph) -> list[int]:
    """Op indices ``i`` after which the graph can be cut (module docstring): ``i + 1`` starts a
    stage."""
    ops = graph.ops
    index = {op.name: i for i, op in enumerate(ops)}
    by_name = {op.name: op for op in ops}
    readers = graph.readers()
    last_read = {name: index[r[-1]] for name, r in readers.items() if r}
    inside_group: set[int] = set()     # ops followed by another member of their group
    for g in find_groups(graph).values():
        span = [index[m] for m in g.members]
        inside_group.update(range(min(span), max(span)))
    # a later op that reads the graph input keeps every cut before it shut
    last_input_reader = max((j for j, op in enumerate(ops)
                             if not op.inputs or shortcut_is_input(op)), default=-1)
    cuts = []
    live: set[str] = set()            # tensors produced so far that a later op reads
    for i, op in enumerate(ops[:-1]):
        live.add(op.name)
        live = {t for t in live if last_read.get(t, -1) > i}
        if i < last_input_reader or i in inside_group or live != {op.name}:
            continue
        if all(_takes_as_input(by_name[r], op.name) for r in readers[op.name]):
            cuts.append(i)
    return cuts


def _takes_as_input(op, name: str) -> bool:
    if op.inputs == (name,):
        return not shortcut_is_input(op)
    return (isinstance(op, Binary) and len(op.inputs) == 2 and name in op.inputs
            and op.inputs[0] != op.inputs[1] and op.other_elements == op.elements
            and op.fn in ("add", "mul", "max", "min"))      # the operands may swap


def stage_graph(graph: Graph, first: int, end: int) -> Graph:
    """Ops ``first .. end - 1`` of ``graph`` as a graph: the tensor crossing the cut before
    ``first`` becomes its input."""
    ops = graph.ops[first:end]
    if first == 0:
        return Graph(graph.name, ops, batch=graph.batch, tokens=graph.tokens)
    boundary = graph.ops[first - 1].name
    out = []
    for op in ops:
        if boundary in op.inputs:
            op = replace(op, inputs=tuple(s for s in op.inputs if s != boundary))
        out.append(op)
    return Graph(graph.name, tuple(out), batch=graph.batch, tokens=graph.tokens)


def stage_chip(chip: ChipConfig, plan: StagePlan, stage: int) -> ChipConfig:
    """The chip stage ``stage`` of ``plan`` runs on: its cores, its share of the L2 (capacity
    and banks), its input from DRAM unless it is the first stage and its output to DRAM unless
    it is the last."""
    s = plan.stages
    l2 = chip.l2
    if l2.present and s > 1:
        l2 = replace(l2, capacity_kib=(l2.capacity_bytes // s) / 1024,
                     banks=max(1, l2.banks // s))
    return replace(chip, cores=plan.cores_per_stage, l2=l2,
                   model_input=chip.model_input if stage == 0 else "dram",
                   model_output=chip.model_output if stage == s - 1 else "dram")


def plan_stages(graph: Graph, chip: ChipConfig, stages: int | None = None) -> StagePlan:
    """The stages of ``graph`` on ``chip`` (module docstring); ``stages`` fixes their count
    (``ValueError`` when the graph has fewer cut segments or the chip fewer cores).

    Searching the count, only the largest count giving each ``cores // S`` is costed (with the
    same cores per stage, more stages never lengthen the slowest one), then the fewest stages
    with that count's period are kept (:func:`_fill` counts them)."""
    from compiler.backends.multicore import op_estimate
    segments = _segments(len(graph.ops), cut_points(graph))
    most = min(chip.cores, len(segments))
    if stages is not None and not 1 <= stages <= most:
        raise ValueError(f"stages = {stages}: {graph.name!r} on {chip.name!r} takes 1.."
                         f"{most} pipeline stages ({len(segments)} segments between cuts, "
                         f"{chip.cores} cores)")
    counts: dict[int, list[int]] = {}          # cores per stage -> the stage counts giving it
    for s in ([stages] if stages is not None else range(1, most + 1)):
        counts.setdefault(chip.cores // s, []).append(s)
    shapes = [_shape(op) for op in graph.ops]
    memo: dict = {}
    best = None
    for c, options in counts.items():
        sub = replace(chip, cores=c)
        op_cost = []
        for op, shape in zip(graph.ops, shapes):
            if (shape, c) not in memo:
                memo[shape, c] = op_estimate(op, sub)
            op_cost.append(memo[shape, c])
        cost = [sum(op_cost[a:b]) for a, b in segments]
        prefix = list(itertools.accumulate(cost, initial=0.0))
        parts = _partition(cost, prefix, max(options))
        period = max(prefix[hi] - prefix[lo] for lo, hi in parts)
        fewest = max(min(options), len(_fill(prefix, period)))
        if fewest < len(parts):
            parts = _partition(cost, prefix, fewest)
        bounds = tuple((segments[lo][0], segments[hi - 1][1]) for lo, hi in parts)
        plan = StagePlan(bounds, c, tuple(prefix[hi] - prefix[lo] for lo, hi in parts))
        if best is None or (max(plan.estimates), plan.stages) < (max(best.estimates),
                                                                 best.stages):
            best = plan
    return best


def _shape(op) -> tuple:
    """``op`` without its name and inputs: what its cost depends on."""
    return (type(op),) + tuple(getattr(op, f.name) for f in fields(op)
                               if f.name not in ("name", "inputs"))


def _segments(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    """The runs of ops between cuts: ``(first, end)``."""
    starts = [0] + [i + 1 for i in cuts]
    return [(a, b) for a, b in zip(starts, starts[1:] + [n])]


def _partition(cost: list[float], prefix: list[float], parts: int) -> list[tuple[int, int]]:
    """``cost`` (``prefix``: its running sums from 0) cut into exactly ``parts`` non-empty runs
    (``parts <= len(cost)``) with the smallest largest-run sum: bisection on that sum, each
    bound checked by filling runs greedily; runs the greedy fill leaves short are made up by
    splitting off the last item of the longest run (which never raises the largest sum)."""
    lo, hi = max(cost), prefix[-1]
    for _ in range(100):
        if hi - lo <= 1e-9 * max(hi, 1.0):
            break
        mid = (lo + hi) / 2
        if len(_fill(prefix, mid, parts + 1)) <= parts:
            hi = mid
        else:
            lo = mid
    runs = _fill(prefix, hi)
    while len(runs) < parts:
        k = max(range(len(runs)), key=lambda r: (runs[r][1] - runs[r][0], -r))
        a, b = runs[k]
        runs[k:k + 1] = [(a, b - 1), (b - 1, b)]
    return runs


def _fill(prefix: list[float], limit: float, cap: int | None = None) -> list[tuple[int, int]]:
    """Runs of the items whose running sums are ``prefix``, each summing to at most ``limit``
    (a larger item alone), filled greedily from the start (a bisection per run); at most
    ``cap`` runs are made."""
    n = len(prefix) - 1
    runs, start = [], 0
    while start < n and (cap is None or len(runs) < cap):
        end = bisect.bisect_right(prefix, prefix[start] + limit * (1 + 1e-12)) - 1
        end = min(n, max(end, start + 1))
        runs.append((start, end))
        start = end
    return runs
