"""Backward-pass ops derived from a forward graph, and which ops carry trainable weights.

For a matrix op ``out (m x n) = a (m x k) @ w (k x n)`` (repeated ``count`` times) reverse-mode
differentiation needs two products with the forward's MACs each (Rumelhart et al. 1986; the
GEMM forms below are the ones cuBLAS-based frameworks run, e.g. Megatron-LM's
``LinearWithGradAccumulation``)::

    forward  out = a @ w                      m x n  from (m x k) @ (k x n)
    dgrad    da  = dout @ w^T                 m x k  from (m x n) @ (n x k)   -> Gemm(m, n=k, k=n)
    wgrad    dw  = a^T @ dout                 k x n  from (k x m) @ (m x n)   -> Gemm(m=k, n, k=m)

so a weighted layer's backward costs exactly twice its forward MACs. A product of two
activations (attention ``Q K^T`` and ``P V``) has no weight; its backward is two
activation-gradient GEMMs of the same shapes (``grad_a`` for the first operand, ``grad_b`` for
the second). A convolution is treated as its im2col GEMM (:meth:`compiler.ir.Conv2d.gemm_shape`).

Vector ops: the backward of an :class:`~compiler.ir.Eltwise` is an ``Eltwise`` over the same
element count named ``<op>_grad`` that reads the incoming gradient plus the forward operands
(``operands + 1``); a :class:`~compiler.ir.Pool` backward is an ``Eltwise`` ``<kind>pool_grad``
writing the input-sized gradient and reading the output-sized one (``elements = batch *
channels * in_h * in_w``, ``operands = 1``); a :class:`~compiler.ir.Move` backward is the
inverse move of the same size. These are memory-bound; their time comes from the op-time model.

Which GEMMs are activation x activation: ``Gemm`` ops with ``batch > 1`` (the IR uses ``batch``
for the per-head products, :mod:`compiler.attention`) or whose name ends in ``.scores`` /
``.context`` (so a single-head, batch-1 attention is still recognised). Every other ``Gemm`` and
every ``Conv2d`` has a weight of ``count * k * n`` parameters (biases are not modelled, as in
the zoo).
"""

from __future__ import annotations

from compiler.ir import (
    ELEMENTWISE_OPS, Conv2d, Eltwise, Gemm, Graph, IRError, Move, Op, Pool,
)

__all__ = [
    "ACTIVATION_PRODUCT_SUFFIXES",
    "is_activation_product",
    "has_weights",
    "param_count",
    "graph_params",
    "backward_ops",
]

ACTIVATION_PRODUCT_SUFFIXES = (".scores", ".context")


def is_activation_product(op: Op) -> bool:
    """True for a ``Gemm`` whose both operands are activations (attention scores / context)."""
    if not isinstance(op, Gemm):
        return False
    return op.batch > 1 or op.name.endswith(ACTIVATION_PRODUCT_SUFFIXES)


def has_weights(op: Op) -> bool:
    """True for ops with a trainable weight: every ``Conv2d`` and every non-activation ``Gemm``."""
    return isinstance(op, Conv2d) or (isinstance(op, Gemm) and not is_activation_product(op))


def param_count(op: Op) -> int:
    """Weight elements of ``op`` (:attr:`~compiler.ir.Gemm.weight_elements`) if it has weights,
    else 0."""
    return op.weight_elements if has_weights(op) else 0


def graph_params(graph: Graph) -> int:
    """Total weight elements of a graph (what data parallelism all-reduces)."""
    return sum(param_count(op) for op in graph)


def _grad_op_for_input(op: Op, index: int) -> str:
    """Name of the backward op that produces the gradient of ``op``'s ``index``-th input."""
    if has_weights(op):
        return f"{op.name}.dgrad"
    if isinstance(op, Gemm):  # activation product
        return f"{op.name}.grad_a" if index == 0 else f"{op.name}.grad_b"
    return f"{op.name}.grad"


def backward_ops(graph: Graph, *, input_grad: bool = True) -> Graph:
    """The backward pass of ``graph`` as a new graph, ops in reverse forward order.

    Each forward op ``X`` becomes (see the module docstring for shapes):

    * weighted ``Gemm`` / ``Conv2d``: ``X.dgrad`` and ``X.wgrad`` (2x the forward MACs);
    * activation product ``Gemm``: ``X.grad_a`` and ``X.grad_b`` (2x the forward MACs);
    * ``Eltwise`` / ``Pool`` / ``Move``: ``X.grad``.

    Edges: the backward ops of ``X`` read the ops that produce the gradient of ``X``'s output,
    i.e. the gradient ops of ``X``'s consumers; an op nobody consumes (a graph output) reads the
    loss gradient, the backward graph's input (empty ``inputs``).

    ``input_grad=False`` drops the ``dgrad`` of weighted ops that read the graph input (the first
    layer of a whole network needs no input gradient). Keep it ``True`` for a slice of a network
    (a transformer layer, a pipeline stage) whose input gradient is sent upstream.

    Raises
    ------
    IRError
        ``graph`` is not a :class:`compiler.ir.Graph`.
    """
    if not isinstance(graph, Graph):
        raise IRError(f"backward_ops: graph = {graph!r}: must be a compiler.ir.Graph")
    if not isinstance(input_grad, bool):
        raise IRError(f"backward_ops: input_grad = {input_grad!r}: must be True or False")
    consumers: dict[str, list[str]] = {op.name: [] for op in graph}
    for op in graph:
        for i, src in enumerate(op.inputs):
            name = _grad_op_for_input(op, i)
            if name not in consumers[src]:
                consumers[src].append(name)

    emitted: set[str] = set()
    out: list[Op] = []
    for op in reversed(graph.ops):
        reads = tuple(n for n in consumers[op.name] if n in emitted)
        new: list[Op] = []
        if isinstance(op, (Gemm, Conv2d)):
            s = op.gemm_shape()
            if has_weights(op):
                if input_grad or op.inputs:
                    new.append(Gemm(name=f"{op.name}.dgrad", batch=s.count, m=s.m, n=s.k, k=s.n,
                                    inputs=reads))
                new.append(Gemm(name=f"{op.name}.wgrad", batch=s.count, m=s.k, n=s.n, k=s.m,
                                inputs=reads))
            else:
                new.append(Gemm(name=f"{op.name}.grad_a", batch=s.count, m=s.m, n=s.k, k=s.n,
                                inputs=reads))
                new.append(Gemm(name=f"{op.name}.grad_b", batch=s.count, m=s.k, n=s.n, k=s.m,
                                inputs=reads))
        elif isinstance(op, ELEMENTWISE_OPS):
            new.append(Eltwise(name=f"{op.name}.grad", op=f"{op.work().name}_grad",
                               elements=op.elements, operands=op.operands + 1, inputs=reads))
        elif isinstance(op, Pool):
            new.append(Eltwise(name=f"{op.name}.grad", op=f"{op.kind}pool_grad",
                               elements=op.input_elements, operands=1,
                               inputs=reads))
        elif isinstance(op, Move):
            new.append(Move(name=f"{op.name}.grad", kind=f"{op.kind}_grad",
                            elements=op.elements, inputs=reads))
        else:  # pragma: no cover - Graph already rejects other types
            raise IRError(f"backward_ops: unsupported op {op!r}")
        out += new
        emitted.update(o.name for o in new)
    return Graph(f"{graph.name}.backward", tuple(out))
