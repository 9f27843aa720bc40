"""The decompositions ONNX exporters emit for ops the vector engine runs as one typed op, each
collapsed into that op: layer norm before opset 17, RMS norm, GELU (erf and tanh forms), SiLU.

What exporters write (sources in ``docs/onnx.md``):

* **layernorm**: ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div ->
  [Mul(gamma)] -> [Add(beta)] (PyTorch ``layer_norm`` below opset 17, pytorch/pytorch#84563), or
  with the variance as E[x^2] - E[x]^2 (its first version, pytorch/pytorch#22265).
* **rmsnorm**: Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div, or Sqrt -> Reciprocal (or
  Div(1, .)) -> Mul, then [Mul(gamma)]: Llama's and T5's ``x * rsqrt(mean(x^2) + eps) * w``.
* **gelu**: Div(x, sqrt 2) (or Mul by 1/sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5), the 0.5
  applied anywhere in the product (PyTorch below opset 20).
* **gelu_tanh**: Pow(x, 3) (or x*x*x) -> Mul(0.044715) -> Add(x) -> Mul(sqrt(2/pi)) -> Tanh ->
  Add(1) -> Mul(x) -> Mul(0.5) (Hugging Face ``gelu_new``).
* **silu**: Sigmoid(x) -> Mul(x).

Squares may be Mul(t, t), every Add and Mul may take its operands in either order, and Casts
inside a chain (fp16 exports, microsoft/onnxruntime#14118) are part of it. A chain is
collapsed only when that changes nothing another node sees: every tensor it makes, except its
output, is read by the chain alone and is no graph output; it reads one activation tensor
(through casts) besides constants; its output has that tensor's shape; the norms reduce over
trailing axes with ``keepdims`` and gamma/beta are vectors over those axes; the constants are
the formula's (relative tolerance 1e-3, which admits fp16 constants) and eps is a constant in
(0, 0.01]. Anything else is imported node by node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any, Iterator

from compiler.frontends.onnx_graph import Importer
from compiler.frontends.onnx_support import is_static, node_attrs, node_label
from compiler.ir import Activation, Norm

__all__ = ["Match", "find_patterns", "emit_pattern"]

_REL_TOL = 1e-3
_MAX_EPS = 0.01
_SQRT2 = math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


@dataclass(frozen=True)
class Match:
    """A recognised chain and the one IR op it becomes.

    Attributes
    ----------
    pattern:
        ``layernorm``, ``rmsnorm``, ``gelu``, ``gelu_tanh`` or ``silu``.
    nodes:
        Every node of the chain, casts included, in topological order; the last one makes
        :attr:`output`.
    first:
        The first node that is not a Cast: the IR op is named after it.
    inputs:
        The activation tensors the chain reads (one tensor, or casts of it).
    output:
        The tensor the chain makes.
    cls, fields:
        The IR op's class and its fields besides ``name`` and ``inputs``.
    """

    pattern: str
    nodes: tuple
    first: Any
    inputs: tuple[str, ...]
    output: str
    cls: type
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Chain:
    """A candidate before the checks: its core nodes (no casts, no affine), the input tensor
    (cast-free) and, for the norms, the reductions whose axes must agree."""

    pattern: str
    core: tuple
    x: str
    reductions: tuple = ()


def find_patterns(imp: Importer) -> dict[int, Match]:
    """Every recognised chain, by ``id`` of each of its nodes. Chains end at a Div or Mul;
    scanning those in topological order, the first candidate that passes the checks wins."""
    matcher, found = _Matcher(imp), {}
    for node in imp.nodes:
        if node.op_type not in ("Div", "Mul") or id(node) in found or imp.is_const_node(node):
            continue
        match = matcher.match(node)
        if match is not None and not any(id(n) in found for n in match.nodes):
            found.update((id(n), match) for n in match.nodes)
    return found


def emit_pattern(imp: Importer, match: Match) -> None:
    """Append the chain's IR op (call it at the chain's last node) and report the chain."""
    op = imp.build(match.first, match.cls, name=imp.op_name(match.first),
                   inputs=imp.sources(match.inputs, match.first), **match.fields)
    imp.emit(match.nodes[-1], op, outputs=[match.output])
    imp.report["fused"].extend((n.op_type, node_label(n)) for n in match.nodes)
    imp.report["fused_patterns"].append((match.pattern, node_label(match.first),
                                         len(match.nodes)))


class _Matcher:
    """Walks upstream from a chain's last node; tensors are compared through Casts."""

    def __init__(self, imp: Importer) -> None:
        self.imp = imp
        self.order = {id(node): i for i, node in enumerate(imp.nodes)}

    # --- reading the graph ---------------------------------------------------------------

    def _through_casts(self, tensor: str):
        """``(tensor, producer)`` after walking up through non-constant Casts."""
        node = self.imp.producers.get(tensor)
        while node is not None and node.op_type == "Cast" and not self.imp.is_const_node(node):
            tensor = node.input[0]
            node = self.imp.producers.get(tensor)
        return tensor, node

    def root(self, tensor: str) -> str:
        """The tensor before any casts."""
        return self._through_casts(tensor)[0]

    def producer(self, tensor: str, *op_types: str):
        """The non-constant default-domain node making ``tensor`` (through casts), if it is one
        of ``op_types``; else None."""
        node = self._through_casts(tensor)[1]
        if (node is None or node.op_type not in op_types or node.domain not in ("", "ai.onnx")
                or self.imp.is_const_node(node)):
            return None
        return node

    def near(self, tensor: str, value: float) -> bool:
        """``tensor`` is a one-element constant equal to ``value`` within the tolerance."""
        const = self.imp.const_scalar(tensor)
        return const is not None and math.isclose(const, value, rel_tol=_REL_TOL)

    @staticmethod
    def operands(node) -> list[tuple[str, str]]:
        """A binary node's operands in each order it may be written in (Add and Mul commute)."""
        a, b = node.input[0], node.input[1]
        return [(a, b), (b, a)] if node.op_type in ("Add", "Mul") else [(a, b)]

    def by_const(self, tensor: str, op_type: str, value: float):
        """``(node, operand)`` when ``tensor`` is ``op_type(operand, c)`` with the constant
        ``c`` equal to ``value`` (for Add and Mul in either order); else None."""
        node = self.producer(tensor, op_type)
        if node is not None and len(node.input) == 2:
            for operand, const in self.operands(node):
                if operand not in self.imp.consts and self.near(const, value):
                    return node, operand
        return None

    def square(self, tensor: str):
        """``([node], base)`` when ``tensor`` is ``Pow(base, 2)`` or ``Mul(base, base)``."""
        hit = self.by_const(tensor, "Pow", 2.0)
        if hit is not None:
            return [hit[0]], hit[1]
        node = self.producer(tensor, "Mul")
        if node is not None and node.input[0] not in self.imp.consts and (
                self.root(node.input[0]) == self.root(node.input[1])):
            return [node], node.input[0]
        return None

    def cube(self, tensor: str):
        """``(nodes, base)`` when ``tensor`` is ``Pow(base, 3)`` or ``base * base * base``."""
        hit = self.by_const(tensor, "Pow", 3.0)
        if hit is not None:
            return [hit[0]], hit[1]
        node = self.producer(tensor, "Mul")
        if node is not None:
            for a, b in self.operands(node):
                sq = self.square(a)
                if sq is not None and self.root(sq[1]) == self.root(b):
                    return sq[0] + [node], b
        return None

    # --- candidates ------------------------------------------------------------------------

    def match(self, node) -> Match | None:
        """The first candidate ending at ``node`` that passes the checks."""
        for chain in self._candidates(node):
            match = self._check(chain)
            if match is not None:
                return match
        return None

    def _candidates(self, node) -> Iterator[_Chain]:
        yield from self._norms(node)
        if node.op_type == "Mul":
            yield from self._gelus(node)
            for x, gate in self.operands(node):
                sigmoid = self.producer(gate, "Sigmoid")
                if sigmoid is not None and self.root(sigmoid.input[0]) == self.root(x):
                    yield _Chain("silu", (sigmoid, node), self.root(x))

    def _normalized(self, node) -> Iterator[tuple[str, str, list]]:
        """``(a, var, nodes)`` for ``node`` = a / sqrt(var + eps), a * Reciprocal(sqrt(..)) or
        a * Div(1, sqrt(..)); ``nodes`` from the Add on."""
        pairs = []
        if node.op_type == "Div":
            pairs.append((node.input[0], node.input[1], [node]))
        else:
            for a, inverse in self.operands(node):
                inv = self.producer(inverse, "Reciprocal", "Div")
                if inv is not None and inv.op_type == "Reciprocal":
                    pairs.append((a, inv.input[0], [inv, node]))
                elif inv is not None and self.near(inv.input[0], 1.0):
                    pairs.append((a, inv.input[1], [inv, node]))
        for a, root, tail in pairs:
            sqrt = self.producer(root, "Sqrt")
            add = sqrt and self.producer(sqrt.input[0], "Add")
            if not add or a in self.imp.consts:
                continue
            for var, eps in self.operands(add):
                value = self.imp.const_scalar(eps)
                if value is not None and 0 < value <= _MAX_EPS and var not in self.imp.consts:
                    yield a, var, [add, sqrt, *tail]

    def _norms(self, node) -> Iterator[_Chain]:
        """Layer norm (either variance form) before RMS norm: in a layer norm, the part after
        the Sub is an RMS norm of x - mean."""
        for a, var, tail in self._normalized(node):
            sub = self.producer(a, "Sub")
            mean = sub and self.producer(sub.input[1], "ReduceMean")
            centered = mean is not None and self.root(mean.input[0]) == self.root(sub.input[0])
            reduced = self.producer(var, "ReduceMean")
            sq = reduced and self.square(reduced.input[0])
            if sq and self.root(sq[1]) == self.root(a):  # mean(a^2)
                if centered:
                    yield _Chain("layernorm", (mean, sub, *sq[0], reduced, *tail),
                                 self.root(sub.input[0]), (mean, reduced))
                yield _Chain("rmsnorm", (*sq[0], reduced, *tail), self.root(a), (reduced,))
            minus = self.producer(var, "Sub")  # E[x^2] - E[x]^2
            if centered and minus is not None:
                second = self.producer(minus.input[0], "ReduceMean")
                sq_x = second and self.square(second.input[0])
                sq_mean = self.square(minus.input[1])
                x = self.root(sub.input[0])
                if (sq_x and sq_mean and self.root(sq_x[1]) == x
                        and self.producer(sq_mean[1], "ReduceMean") is mean):
                    yield _Chain("layernorm", (mean, sub, *sq_x[0], second, *sq_mean[0], minus,
                                               *tail), x, (mean, second))

    def _gelus(self, node) -> Iterator[_Chain]:
        """``node`` is a product of three factors, x, 0.5 and a gate 1 + erf(..) or
        1 + tanh(..), in two Muls associated either way."""
        for a, b in self.operands(node):
            inner = self.producer(b, "Mul")
            if inner is None:
                continue
            for p, q in self.operands(inner):
                for half, gate_t, x in permutations((a, p, q)):
                    gate = self.near(half, 0.5) and self._gate(gate_t)
                    if gate and self.root(x) == gate.x:
                        yield _Chain(gate.pattern, (*gate.core, inner, node), gate.x)

    def _gate(self, tensor: str) -> _Chain | None:
        """``1 + erf(x / sqrt 2)`` or ``1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))``."""
        hit = self.by_const(tensor, "Add", 1.0)
        fn = hit and self.producer(hit[1], "Erf", "Tanh")
        if not fn:
            return None
        add, z = hit[0], fn.input[0]
        if fn.op_type == "Erf":
            scaled = self.by_const(z, "Div", _SQRT2) or self.by_const(z, "Mul", 1 / _SQRT2)
            if scaled:
                return _Chain("gelu", (scaled[0], fn, add), self.root(scaled[1]))
            return None
        scaled = self.by_const(z, "Mul", _SQRT_2_PI)
        inner = scaled and self.producer(scaled[1], "Add")
        if not inner:
            return None
        for x, cubic in self.operands(inner):
            term = self.by_const(cubic, "Mul", _GELU_CUBIC)
            cube = term and self.cube(term[1])
            if cube and self.root(cube[1]) == self.root(x):
                return _Chain("gelu_tanh", (*cube[0], term[0], inner, scaled[0], fn, add),
                              self.root(x))
        return None

    # --- checks ----------------------------------------------------------------------------

    def _check(self, chain: _Chain) -> Match | None:
        """The chain as a :class:`Match` if its shapes, axes and readers allow it."""
        imp = self.imp
        core = list({id(n): n for n in chain.core}.values())
        xs = imp.shapes.get(chain.x)
        if not is_static(xs) or not xs or 0 in xs:
            return None
        elements = math.prod(xs)
        if chain.pattern in ("layernorm", "rmsnorm"):
            axes = [imp.reduce_axes(r, len(xs)) for r in chain.reductions]
            trailing = list(range(len(xs) - len(axes[0] or ()), len(xs)))
            if not trailing or any(a != trailing for a in axes) or any(
                    node_attrs(imp.onnx, r).get("keepdims", 1) != 1 for r in chain.reductions):
                return None
            cols = math.prod(xs[len(xs) - len(trailing):])
            affine = self._affine(core, chain.pattern, xs, len(trailing))
            fields = dict(kind=chain.pattern, rows=elements // cols, cols=cols, affine=affine)
            cls = Norm
        else:
            fields, cls = dict(fn=chain.pattern, elements=elements), Activation
        output = core[-1].output[0]
        if imp.shapes.get(output) != xs:
            return None
        closed = self._closed(core, chain.x, output)
        if closed is None:
            return None
        nodes, inputs = closed
        first = next(n for n in nodes if n.op_type != "Cast")
        return Match(chain.pattern, nodes, first, inputs, output, cls, fields)

    def _affine(self, core: list, pattern: str, xs, axes: int) -> bool:
        """Append to ``core`` the Mul(gamma), and for layer norm then the Add(beta), that alone
        read the norm's output, gamma and beta being constant vectors over the normalized
        ``axes``; True when there is a gamma."""
        appended = 0
        for op_type in ("Mul", "Add") if pattern == "layernorm" else ("Mul",):
            node = self._sole_reader(core[-1].output[0])
            if node is None or node.op_type != op_type:
                break
            consts = [t for t in node.input if t in self.imp.consts]
            if len(consts) != 1 or not self._per_column(consts[0], xs, axes):
                break
            core.append(node)
            appended += 1
        return appended > 0

    def _sole_reader(self, tensor: str):
        """The one node reading ``tensor``, through casts read by one node; None otherwise."""
        imp = self.imp
        while tensor not in imp.graph_outputs and len(imp.consumers.get(tensor, ())) == 1:
            node = imp.consumers[tensor][0]
            if node.op_type != "Cast":
                return node
            tensor = node.output[0]
        return None

    def _per_column(self, tensor: str, xs, axes: int) -> bool:
        """``tensor``'s shape broadcasts over ``xs`` as a vector of the trailing ``axes``."""
        shape = self.imp.shapes.get(tensor)
        if not is_static(shape) or len(shape) > len(xs):
            return False
        padded = (1,) * (len(xs) - len(shape)) + tuple(shape)
        lead = len(xs) - axes
        return all(d == 1 for d in padded[:lead]) and padded[lead:] == tuple(xs[lead:])

    def _closed(self, core: list, x: str, output: str):
        """``(nodes, inputs)`` when the chain (core plus the casts between its nodes and from
        ``x``) is read by nobody else: every tensor it makes but ``output`` is read inside only
        and is no graph output, and it reads no activation but ``x`` (through casts)."""
        imp = self.imp
        members = {id(n): n for n in core}
        casts = {}
        for node in core:
            for tensor in node.input:
                producer = imp.producers.get(tensor)
                while (producer is not None and producer.op_type == "Cast"
                       and id(producer) not in members and not imp.is_const_node(producer)):
                    casts[id(producer)] = producer
                    producer = imp.producers.get(producer.input[0])
        members.update(casts)
        changed = True
        while changed:  # a cast also read outside the chain stays outside (elided as usual)
            changed = False
            for key, cast in casts.items():
                if key in members and not self._read_inside(cast.output[0], members):
                    del members[key]
                    changed = True
        for node in members.values():
            if imp.is_const_node(node) or any(
                    t and t != output and not self._read_inside(t, members) for t in node.output):
                return None
        made = {t for node in members.values() for t in node.output if t}
        inputs = list(dict.fromkeys(t for node in members.values() for t in node.input
                                    if t and t not in imp.consts and t not in made))
        if not inputs or any(self.root(t) != x for t in inputs):
            return None
        nodes = tuple(sorted(members.values(), key=lambda n: self.order[id(n)]))
        return nodes, tuple(inputs)

    def _read_inside(self, tensor: str, members: dict) -> bool:
        return tensor not in self.imp.graph_outputs and all(
            id(n) in members for n in self.imp.consumers.get(tensor, ()))
