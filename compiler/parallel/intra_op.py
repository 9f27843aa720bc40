"""Intra-operator parallelism: a sharding for every op of a layer, chosen by an integer program.

The second level of Alpa's search (Zheng et al., OSDI'22, §4): on a mesh of ``t`` devices (a
tensor-parallel group), every op picks one way to split its work, and every edge between two
ops pays the collective that turns the producer's layout into the one the consumer reads. The
choice minimizing compute plus communication (forward and backward) is an integer linear
program, solved with HiGHS (``highspy``), as Alpa's is with an off-the-shelf ILP solver.

**Layouts** of a tensor on the mesh: ``R`` replicated, ``T`` split along tokens (rows),
``F`` split along features (columns, heads), ``P`` partial sums (each device holds a summand).

**Choices** per op (an op is offered a choice only when its dimension divides by ``t``):

====================  =========================================  ==============  ======
op                    choice                                     reads           writes
====================  =========================================  ==============  ======
weighted Gemm         ``col``: columns ``n/t`` (Megatron column)  ``Rp``          ``F``
                      ``row``: reduction ``k/t`` (Megatron row)   ``F``           ``P``
                      ``tok``: tokens ``m/t``, weights replicated ``T``           ``T``
                      ``rep``: the whole op on every device       ``R``           ``R``
attention Gemm        ``head``: heads ``batch/t``                 ``F``           ``F``
(``Q K^T``, ``P V``)  ``rep``                                     ``R``           ``R``
Norm                  ``rep``, ``tok`` (rows)                     ``R`` / ``T``   same
element-wise          ``rep``, ``tok``, ``feat``                  ``R``/``T``/``F``  same
====================  =========================================  ==============  ======

``Rp`` reads the whole tensor and returns a *partial* input gradient (a column-split GEMM's
``dX = dY_i W_i^T`` is a summand), so its backward all-reduces. A ``tok`` GEMM holds the whole
weight; its weight gradients are all-reduced over the mesh in the backward pass.

**Edges** (producer layout -> what the consumer reads): forward collective / backward
collective, the conjugate pairs of Megatron-LM's ``f`` and ``g`` operators (Shoeybi et al. 2019
§3) and of sequence parallelism (Korthikanti et al. 2022 §4.2.2)::

    R -> R  - / -        R -> Rp  - / AR        R -> T, F  slice / AG
    T -> R  AG / -       T -> Rp  AG / RS + AG  T -> T  - / -          T <-> F  A2A / A2A
    F -> R  AG / -       F -> Rp  AG / RS       F -> F  - / -
    P -> R  AR / -       P -> Rp  AR / AR       P -> T, F  RS / AG

``T -> Rp`` re-gathers in the backward pass (the ``+ AG``): Megatron-LM keeps the sharded
input of a column-parallel GEMM and all-gathers it again for the weight gradient (Korthikanti
et al. §4.2.2), which is also why that edge stores ``1/t`` of the tensor. Full recomputation
runs every forward collective again in the backward pass.

Each collective moves the producer's whole output (nccl-tests ``nbytes``; an all-to-all the
``1/t`` a device holds) and is timed by the ``comm_time(op, nbytes)`` callback on the mesh;
compute is ``op_time`` of the per-device forward op plus its backward ops
(:func:`~compiler.parallel.backward.backward_ops`) plus the recomputed forward.

**Activation memory** per device (what each op keeps for its backward), which reproduces
Korthikanti et al. 2022 Table 2 exactly for Megatron's layouts: a norm, weighted GEMM and GELU
keep their input; ``Q K^T`` keeps Q and K; ``P V`` keeps P and V; a softmax its output; a
dropout (and the dropout before each residual add, a ``Binary`` add) a one-byte mask per
element (``dtype_bytes / 2``). Selective recomputation drops the softmax output, the dropout
mask and P; full recomputation keeps only the layer input.

The layer input is the graph input: an op without inputs reads it, and so does the second
operand of a one-input ``Binary`` (the residual of
:func:`compiler.attention.transformer_block_ops`'s ``add1``). Layers chain, so the last op
writes the layout the layer input has (``R`` or ``T``, tried both: ``T`` is sequence
parallelism).
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from compiler.ir import (
    ELEMENTWISE_OPS, Binary, Eltwise, Gemm, Graph, Norm, Op, Softmax,
)
from compiler.parallel.backward import backward_ops, has_weights, is_activation_product

__all__ = ["OpChoice", "IntraOpProblem", "IntraOpPlan", "TRANSITIONS", "SELECTIVE_SUFFIXES",
           "intra_op_plan"]

SELECTIVE_SUFFIXES = (".attn.scores", ".attn.softmax", ".attn.dropout", ".attn.context")
RECOMPUTE = ("none", "selective", "full")

#: (producer layout, consumer read) -> (forward collectives, backward collectives)
TRANSITIONS: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ("R", "R"): ((), ()), ("R", "Rp"): ((), ("allreduce",)),
    ("R", "T"): ((), ("allgather",)), ("R", "F"): ((), ("allgather",)),
    ("T", "R"): (("allgather",), ()), ("T", "Rp"): (("allgather",), ("reducescatter", "allgather")),
    ("T", "T"): ((), ()), ("T", "F"): (("alltoall",), ("alltoall",)),
    ("F", "R"): (("allgather",), ()), ("F", "Rp"): (("allgather",), ("reducescatter",)),
    ("F", "T"): (("alltoall",), ("alltoall",)), ("F", "F"): ((), ()),
    ("P", "R"): (("allreduce",), ()), ("P", "Rp"): (("allreduce",), ("allreduce",)),
    ("P", "T"): (("reducescatter",), ("allgather",)),
    ("P", "F"): (("reducescatter",), ("allgather",)),
}

GRAPH_INPUT = "<input>"


@dataclass(frozen=True)
class OpChoice:
    """One way to run an op on the mesh: the per-device op, the layout it reads each input in,
    the layout it writes, parameters and saved activation bytes per device."""

    name: str
    op: Op
    reads: tuple[str, ...]
    out: str
    params: float
    saved_bytes: float            # kept for the backward, recompute = none
    selective_bytes: float        # of which selective recomputation drops
    grad_sync_bytes: float = 0.0  # weight gradient all-reduced over the mesh (tok)


@dataclass
class IntraOpPlan:
    """The chosen sharding of a layer on ``t`` devices and what it costs per micro-batch."""

    t: int
    boundary: str                         # the layer input's layout: R, or T (sequence parallel)
    recompute: str
    choices: dict                         # op name -> choice name
    forward_ops: tuple                    # per-device forward ops
    backward_ops: tuple                   # per-device backward ops
    recompute_ops: tuple                  # forward ops run again before the backward
    fwd_collectives: tuple                # ((op, nbytes), ...) forward, in order
    bwd_collectives: tuple                # backward (incl. recomputed forward, weight grads)
    params: float                         # parameter elements per device
    activation_bytes: float               # kept per layer per micro-batch, this recompute
    activation_bytes_full: float          # kept without recomputation (full's transient)
    compute_s: float                      # forward + backward + recompute op time
    comm_s: float                         # collectives on the mesh
    objective_s: float                    # compute_s + comm_s (what the ILP minimized)
    forward_s: float                      # of objective_s: the forward pass and its collectives
    solve_s: float = 0.0
    variables: int = 0
    space: int = 0                        # assignments the ILP chose among
    alternatives: dict = field(default_factory=dict)   # boundary -> objective_s

    @property
    def sequence_parallel(self) -> bool:
        return self.boundary == "T"

    def is_megatron(self) -> bool:
        """True when the plan is Megatron-LM's (column QKV/fc1, row out_proj/fc2, heads split;
        norms and element-wise ops replicated, or token-split with sequence parallelism). On
        one device every sharding is the same, so it is Megatron's too."""
        if self.t == 1:
            return True
        for name, c in self.choices.items():
            want = {"qkv": "col", "fc1": "col", "out_proj": "row", "fc2": "row"}
            key = name.rsplit(".", 1)[-1]
            if key in want and c != want[key]:
                return False
        return True

    def describe(self) -> list[str]:
        layout = "sequence parallel" if self.boundary == "T" else "replicated"
        lines = [f"intra-op plan on {self.t} devices ({layout} layer input), recompute "
                 f"{self.recompute}: {self.objective_s * 1e3:.4g} ms per layer per micro-batch "
                 f"(compute {self.compute_s * 1e3:.4g}, comm {self.comm_s * 1e3:.4g})"]
        lines += [f"  {name:<24} {c}" for name, c in self.choices.items()]
        return lines

    def to_dict(self) -> dict:
        return {"t": self.t, "boundary": self.boundary, "recompute": self.recompute,
                "choices": dict(self.choices), "sequence_parallel": self.sequence_parallel,
                "megatron": self.is_megatron(), "params": self.params,
                "activation_bytes": self.activation_bytes, "compute_s": self.compute_s,
                "comm_s": self.comm_s, "objective_s": self.objective_s,
                "fwd_collectives": [list(c) for c in self.fwd_collectives],
                "bwd_collectives": [list(c) for c in self.bwd_collectives],
                "solve_s": self.solve_s, "variables": self.variables, "space": self.space,
                "alternatives": dict(self.alternatives)}


def _div(x: int, t: int) -> bool:
    return x % t == 0


def _choices(op: Op, t: int, dtype_bytes: int) -> list[OpChoice]:
    """Every choice op ``op`` has on ``t`` devices (module docstring)."""
    d = float(dtype_bytes)
    mask = d / 2.0                   # a dropout mask byte, scaled as Korthikanti's Table 2
    n_in = 2 if isinstance(op, Binary) else max(len(op.inputs), 1)
    out: list[OpChoice] = []
    if isinstance(op, Gemm) and has_weights(op):
        bias = float(op.n)
        w = float(op.weight_elements)
        act = lambda g: float(g.batch * g.m * g.k) * d      # noqa: E731
        if t == 1:
            return [OpChoice("rep", op, ("R",), "R", w + bias, act(op), 0.0)]
        if _div(op.n, t):
            g = replace(op, n=op.n // t, **op.rows_for(op.n // t))
            out.append(OpChoice("col", g, ("Rp",), "F", (w + bias) / t, act(g), 0.0))
        if _div(op.k, t):
            g = replace(op, k=op.k // t)
            out.append(OpChoice("row", g, ("F",), "P", w / t + bias, act(g), 0.0))
        if _div(op.m, t):
            g = replace(op, m=op.m // t)
            out.append(OpChoice("tok", g, ("T",), "T", w + bias, act(g), 0.0,
                                grad_sync_bytes=w * d))
        out.append(OpChoice("rep", op, ("R",), "R", w + bias, act(op), 0.0))
        return out
    if isinstance(op, Gemm) and is_activation_product(op):
        if op.name.endswith(".context"):
            saved = lambda g: float(g.batch * (g.m * g.k + g.k * g.n)) * d      # noqa: E731
            sel = lambda g: float(g.batch * g.m * g.k) * d                      # noqa: E731
        else:
            saved = lambda g: float(g.batch * (g.m + g.n) * g.k) * d            # noqa: E731
            sel = lambda g: 0.0                                                  # noqa: E731
        reads = ("F",) * n_in
        if t > 1 and _div(op.batch, t):
            g = replace(op, batch=op.batch // t)
            out.append(OpChoice("head", g, reads, "F", 0.0, saved(g), sel(g)))
        out.append(OpChoice("rep", op, ("R",) * n_in, "R", 0.0, saved(op), sel(op)))
        return out
    if not isinstance(op, ELEMENTWISE_OPS):
        raise ValueError(f"intra-op: op {op.name!r} ({type(op).__name__}) has no sharding "
                         f"choices; a layer holds GEMMs and element-wise ops")
    params = 2.0 * op.cols if isinstance(op, Norm) and op.affine else 0.0

    def split(kind: str) -> Op | None:
        if t == 1 or kind == "rep":
            return op
        if isinstance(op, (Norm, Softmax)):
            return replace(op, rows=op.rows // t) if _div(op.rows, t) else None
        if not _div(op.elements, t):
            return None
        if isinstance(op, Binary) and op.other_elements is not None:
            if not _div(op.other_elements, t):
                return None
            return replace(op, elements=op.elements // t, other_elements=op.other_elements // t)
        return replace(op, elements=op.elements // t)

    kinds = [("rep", "R")] if t == 1 else [("rep", "R"), ("tok", "T")] + (
        [] if isinstance(op, Norm) else [("feat", "F")])
    for kind, lay in kinds:
        g = split(kind)
        if g is None:
            continue
        n = float(g.elements)
        is_dropout = isinstance(op, Eltwise) and op.op == "dropout"
        if is_dropout or (isinstance(op, Binary) and op.fn == "add"):
            saved = n * mask                                # dropout mask
        else:
            saved = n * d                 # its input (a softmax: its output, as large)
        sel = saved if op.name.endswith((".attn.softmax", ".attn.dropout")) else 0.0
        out.append(OpChoice(kind, g, (lay,) * n_in, lay, params, saved, sel))
    return out


def _quiet_highs():
    """A HiGHS instance without its start-up banner (which HiGHS writes to file descriptor 1,
    where it would corrupt ``--format json`` output)."""
    import highspy
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("threads", 1)
    return h


_HIGHS = None


class IntraOpProblem:
    """The integer program of one layer on ``t`` devices (module docstring).

    ``comm_time(op, nbytes)`` times one collective on the mesh (every mesh of the system at
    once); ``op_time(op)`` one op on one device. :meth:`evaluate` costs any assignment (a
    choice index per op), :meth:`solve` finds the cheapest with the ILP.
    """

    def __init__(self, ops: Sequence[Op], t: int, op_time: Callable[[Op], float],
                 comm_time: Callable[[str, float], float], *, recompute: str = "none",
                 dtype_bytes: int = 2, boundaries: Sequence[str] = ("R", "T"),
                 memory_limit: float | None = None):
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ValueError(f"intra-op: t = {t!r}: must be an integer >= 1")
        if recompute not in RECOMPUTE:
            raise ValueError(f"intra-op: recompute = {recompute!r}: must be one of "
                             f"{', '.join(RECOMPUTE)}")
        ops = tuple(ops)
        if not ops:
            raise ValueError("intra-op: the layer has no ops")
        bad = [b for b in boundaries if b not in ("R", "T")]
        if bad or not boundaries:
            raise ValueError(f"intra-op: boundaries = {tuple(boundaries)!r}: each must be R or T")
        self.ops, self.t, self.recompute, self.dtype_bytes = ops, t, recompute, dtype_bytes
        self.boundaries = tuple(boundaries) if t > 1 else ("R",)
        self.memory_limit = memory_limit
        self._op_time, self._comm_time = op_time, comm_time
        self._comm_cache: dict = {}
        names = {op.name: i for i, op in enumerate(ops)}
        self.choices = [_choices(op, t, dtype_bytes) for op in ops]
        # edges: (consumer index, input slot, producer index or -1 for the graph input)
        self.edges: list[tuple[int, int, int]] = []
        for i, op in enumerate(ops):
            srcs = list(op.inputs)
            for name in srcs:
                if name not in names or names[name] >= i:
                    raise ValueError(f"intra-op: op {op.name!r} reads {name!r}, which is not an "
                                     f"earlier op of the layer")
            if not srcs or (isinstance(op, Binary) and len(srcs) == 1):
                srcs.append(GRAPH_INPUT)
            for slot, name in enumerate(srcs):
                self.edges.append((i, slot, -1 if name == GRAPH_INPUT else names[name]))
        self.input_elements = self._input_elements()
        self._op_cost = [[self._choice_cost(c) for c in cs] for cs in self.choices]

    # ---- costs -------------------------------------------------------------------------------

    def _input_elements(self) -> float:
        op = self.ops[0]
        if isinstance(op, Binary) and op.other_elements:
            return float(op.other_elements)
        return float(op.input_elements if not isinstance(op, Gemm) else op.m * op.k * op.batch)

    def _comm(self, op: str, nbytes: float) -> float:
        if self.t == 1 or nbytes <= 0:
            return 0.0
        key = (op, float(nbytes))
        if key not in self._comm_cache:
            v = self._comm_time(op, float(nbytes))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ValueError(f"intra-op: comm_time({op!r}, {nbytes}) returned {v!r}: must "
                                 f"be a finite number of seconds >= 0")
            self._comm_cache[key] = float(v)
        return self._comm_cache[key]

    def _recomputed(self, op: Op) -> bool:
        return self.recompute == "full" or (self.recompute == "selective"
                                            and op.name.endswith(SELECTIVE_SUFFIXES))

    def _choice_cost(self, c: OpChoice) -> float:
        f = self._op_time(c.op)
        b = sum(self._op_time(x) for x in backward_ops(Graph("x", (replace(c.op, inputs=()),)))
                .ops)
        r = f if self._recomputed(c.op) else 0.0
        return f + b + r + self._comm("allreduce", c.grad_sync_bytes)

    def _rerun(self, ci: int, src: int) -> bool:
        """Whether the edge from op ``src`` (-1: the layer input) into op ``ci`` runs its
        forward collectives again in the backward pass: always with full recomputation; with
        selective, when both ends are recomputed (an edge into the recomputed attention core
        from a kept op reads the saved input, already in its layout)."""
        if self.recompute == "full":
            return True
        return (self.recompute == "selective" and src >= 0
                and self._recomputed(self.ops[ci]) and self._recomputed(self.ops[src]))

    def _edge_colls(self, producer_out: str, read: str, nbytes: float, rerun: bool):
        fwd, bwd = TRANSITIONS[(producer_out, read)]
        size = lambda op: nbytes / self.t if op == "alltoall" else nbytes   # noqa: E731
        f = [(op, size(op)) for op in fwd]
        b = [(op, size(op)) for op in bwd]
        if rerun:
            b = f + b
        return f, b

    def _edge_cost(self, producer_out: str, read: str, nbytes: float, rerun: bool) -> float:
        f, b = self._edge_colls(producer_out, read, nbytes, rerun)
        return sum(self._comm(op, n) for op, n in f + b)

    def _edge_bytes(self, src: int) -> float:
        el = self.input_elements if src < 0 else float(self.ops[src].output_elements)
        return el * self.dtype_bytes

    def _edge_saved(self, c: OpChoice, producer_out: str, read: str) -> float:
        """Saved-bytes correction of an edge into choice ``c``: a column GEMM fed by token-split
        data keeps the sharded input (Megatron's sequence parallelism), not the gathered one."""
        if producer_out == "T" and read == "Rp":
            return -c.saved_bytes * (1.0 - 1.0 / self.t)
        return 0.0

    def _saved(self, c: OpChoice, recompute: str | None = None) -> float:
        """Bytes choice ``c`` keeps for the backward under ``recompute`` (default: the
        problem's; full recomputation is costed per layer in :meth:`memory`)."""
        if (self.recompute if recompute is None else recompute) == "selective":
            return c.saved_bytes - c.selective_bytes
        return c.saved_bytes

    def evaluate(self, assign: Sequence[int], boundary: str = "R") -> tuple[float, float]:
        """(seconds, activation bytes) of an assignment: a choice index per op; infinite
        seconds when the last op does not write ``boundary``."""
        outs = [self.choices[i][a].out for i, a in enumerate(assign)]
        if outs[-1] != boundary:
            return math.inf, math.inf
        cost = sum(self._op_cost[i][a] for i, a in enumerate(assign))
        for ci, slot, src in self.edges:
            prod = boundary if src < 0 else outs[src]
            cost += self._edge_cost(prod, self.choices[ci][assign[ci]].reads[slot],
                                    self._edge_bytes(src), self._rerun(ci, src))
        return cost, self.memory(assign, boundary)

    def memory(self, assign: Sequence[int], boundary: str, recompute: str | None = None) -> float:
        """Activation bytes per device one layer keeps for its backward (module docstring)."""
        recompute = self.recompute if recompute is None else recompute
        if recompute == "full":
            return self.input_elements * self.dtype_bytes / (self.t if boundary == "T" else 1)
        chosen = [self.choices[i][a] for i, a in enumerate(assign)]
        mem = sum(self._saved(c, recompute) for c in chosen)
        for ci, slot, src in self.edges:
            prod = boundary if src < 0 else chosen[src].out
            mem += self._edge_saved(chosen[ci], prod, chosen[ci].reads[slot])
        return mem

    @property
    def space(self) -> int:
        return math.prod(len(c) for c in self.choices) * len(self.boundaries)

    # ---- the integer program ----------------------------------------------------------------

    def _solve_boundary(self, boundary: str):
        """min sum_i sum_c cost_ic x_ic + sum_e sum_(c,d) cost_ecd y_ecd, one choice per op,
        y_e = x_u (x) x_v linearized as in Alpa (sum_d y_ecd = x_uc, sum_c y_ecd = x_vd)."""
        import numpy as np
        global _HIGHS
        cols_cost, lower, upper, integer = [], [], [], []
        xi: list[list[int]] = []
        for i, cs in enumerate(self.choices):
            row = []
            for a, c in enumerate(cs):
                row.append(len(cols_cost))
                ok = i != len(self.choices) - 1 or c.out == boundary
                cols_cost.append(self._op_cost[i][a])
                lower.append(0.0)
                upper.append(1.0 if ok else 0.0)
                integer.append(True)
            xi.append(row)
        rows: list[tuple[list[int], list[float], float, float]] = []
        for i, row in enumerate(xi):
            rows.append((row, [1.0] * len(row), 1.0, 1.0))
        mem_cols: dict[int, float] = {}
        for i, cs in enumerate(self.choices):
            for a, c in enumerate(cs):
                mem_cols[xi[i][a]] = self._saved(c)
        for ci, slot, src in self.edges:
            nbytes = self._edge_bytes(src)
            cons = self.choices[ci]
            prods = [(None, boundary)] if src < 0 else [(a, c.out) for a, c in
                                                         enumerate(self.choices[src])]
            y = {}
            for pa, pout in prods:
                for ca, c in enumerate(cons):
                    col = len(cols_cost)
                    y[(pa, ca)] = col
                    cols_cost.append(self._edge_cost(pout, c.reads[slot], nbytes,
                                                     self._rerun(ci, src)))
                    lower.append(0.0)
                    upper.append(1.0)
                    integer.append(False)
                    mem_cols[col] = self._edge_saved(c, pout, c.reads[slot])
            for ca in range(len(cons)):        # sum over producer choices = x_consumer
                idx = [y[(pa, ca)] for pa, _ in prods] + [xi[ci][ca]]
                rows.append((idx, [1.0] * (len(idx) - 1) + [-1.0], 0.0, 0.0))
            if src >= 0:
                for pa, _ in prods:            # sum over consumer choices = x_producer
                    idx = [y[(pa, ca)] for ca in range(len(cons))] + [xi[src][pa]]
                    rows.append((idx, [1.0] * (len(idx) - 1) + [-1.0], 0.0, 0.0))
        if self.memory_limit is not None and self.recompute != "full":
            idx = list(mem_cols)
            rows.append((idx, [mem_cols[j] for j in idx], -math.inf, float(self.memory_limit)))
        import highspy
        if _HIGHS is None:
            _HIGHS = _quiet_highs()
        h = _HIGHS
        h.clearModel()
        lp = highspy.HighsLp()
        n = len(cols_cost)
        lp.num_col_, lp.num_row_ = n, len(rows)
        # HiGHS's tolerances are absolute (~1e-7): costs in seconds would tie below that, so the
        # objective is scaled to its largest coefficient (the plan is costed exactly afterwards)
        cost = np.asarray(cols_cost, dtype=float)
        scale = float(np.max(np.abs(cost))) if n else 0.0
        lp.col_cost_ = cost / scale if scale > 0 else cost
        lp.col_lower_ = np.asarray(lower, dtype=float)
        lp.col_upper_ = np.asarray(upper, dtype=float)
        lp.row_lower_ = np.asarray([r[2] if math.isfinite(r[2]) else -highspy.kHighsInf
                                    for r in rows], dtype=float)
        lp.row_upper_ = np.asarray([r[3] for r in rows], dtype=float)
        starts, index, value = [0], [], []
        for idx, vals, _, _ in rows:
            index += idx
            value += vals
            starts.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.asarray(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.asarray(value, dtype=float)
        lp.integrality_ = [highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous
                           for f in integer]
        h.passModel(lp)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.0)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None, n
        sol = h.getSolution().col_value
        assign = [max(range(len(row)), key=lambda a: sol[row[a]]) for row in xi]
        return assign, n

    def solve(self) -> IntraOpPlan:
        """The cheapest assignment over the allowed layer-input layouts (ties: ``R`` first,
        then the ILP's order); raises ValueError when no assignment fits ``memory_limit``."""
        import time
        t0 = time.perf_counter()
        best, alts, nvars = None, {}, 0
        for boundary in self.boundaries:
            assign, n = self._solve_boundary(boundary)
            nvars += n
            if assign is None:
                continue
            cost, _ = self.evaluate(assign, boundary)
            alts[boundary] = cost
            if best is None or cost < best[0] * (1 - 1e-12):
                best = (cost, assign, boundary)
        if best is None:
            raise ValueError(f"intra-op: no sharding of the layer on {self.t} devices fits "
                             f"memory_limit = {self.memory_limit:.4g} bytes of activations")
        return self.plan(best[1], best[2], solve_s=time.perf_counter() - t0, variables=nvars,
                         alternatives=alts)

    def plan(self, assign: Sequence[int], boundary: str, **extra) -> IntraOpPlan:
        """The :class:`IntraOpPlan` of an assignment."""
        cost, mem = self.evaluate(assign, boundary)
        if not math.isfinite(cost):
            raise ValueError(f"intra-op: the assignment does not end in layout {boundary}")
        chosen = [self.choices[i][a] for i, a in enumerate(assign)]
        outs = [c.out for c in chosen]
        fwd_c, bwd_c = [], []
        for ci, slot, src in self.edges:
            prod = boundary if src < 0 else outs[src]
            f, b = self._edge_colls(prod, chosen[ci].reads[slot], self._edge_bytes(src),
                                    self._rerun(ci, src))
            fwd_c += f
            bwd_c += b
        bwd_c += [("allreduce", c.grad_sync_bytes) for c in chosen if c.grad_sync_bytes]
        fwd_ops = tuple(c.op for c in chosen)
        bwd_ops = backward_ops(Graph("layer", fwd_ops)).ops
        rec = tuple(op for op in fwd_ops if self._recomputed(op))
        comm_s = sum(self._comm(op, n) for op, n in fwd_c + bwd_c)
        forward_s = sum(self._op_time(op) for op in fwd_ops) + sum(
            self._comm(op, n) for op, n in fwd_c)
        return IntraOpPlan(
            t=self.t, boundary=boundary, recompute=self.recompute,
            choices={op.name: c.name for op, c in zip(self.ops, chosen)},
            forward_ops=fwd_ops, backward_ops=tuple(bwd_ops), recompute_ops=rec,
            fwd_collectives=tuple(fwd_c), bwd_collectives=tuple(bwd_c),
            params=float(sum(c.params for c in chosen)), activation_bytes=mem,
            activation_bytes_full=self.memory(assign, boundary, "none"),
            compute_s=cost - comm_s, comm_s=comm_s, objective_s=cost, forward_s=forward_s,
            space=self.space, **extra)

    def megatron(self, boundary: str = "R") -> IntraOpPlan:
        """Megatron-LM's sharding as a plan of this problem (to compare with the ILP's):
        column-parallel QKV and fc1, row-parallel out_proj and fc2, attention split by heads,
        the ops between them split as their producer, norms and residual adds replicated
        (``R``) or token-split (``T``: sequence parallelism)."""
        want = {"qkv": "col", "fc1": "col", "out_proj": "row", "fc2": "row"}
        assign, outs = [], []
        for i, (op, cs) in enumerate(zip(self.ops, self.choices)):
            names = [c.name for c in cs]
            key = op.name.rsplit(".", 1)[-1]
            src = [e[2] for e in self.edges if e[0] == i]
            feeds_f = any(s >= 0 and outs[s] == "F" for s in src)
            if key in want:
                pick = want[key]
            elif is_activation_product(op):
                pick = "head"
            elif feeds_f and "feat" in names:
                pick = "feat"
            else:
                pick = "rep" if boundary == "R" else "tok"
            if pick not in names:
                raise ValueError(f"intra-op: Megatron's sharding needs {pick!r} for "
                                 f"{op.name!r}, which does not divide by t = {self.t}")
            assign.append(names.index(pick))
            outs.append(cs[assign[-1]].out)
        return self.plan(assign, boundary)

    def exhaustive(self) -> tuple[float, list[int], str]:
        """The cheapest assignment by trying every one (for checking the ILP on small layers)."""
        best = (math.inf, None, None)
        for boundary in self.boundaries:
            for assign in itertools.product(*(range(len(c)) for c in self.choices)):
                cost, mem = self.evaluate(assign, boundary)
                if self.memory_limit is not None and self.recompute != "full" \
                        and mem > self.memory_limit:
                    continue
                if cost < best[0] * (1 - 1e-12):
                    best = (cost, list(assign), boundary)
        return best


def intra_op_plan(ops: Sequence[Op], t: int, op_time: Callable[[Op], float],
                  comm_time: Callable[[str, float], float], **kw) -> IntraOpPlan:
    """Solve the layer's integer program (:class:`IntraOpProblem`)."""
    return IntraOpProblem(ops, t, op_time, comm_time, **kw).solve()
