"""What a vector op computes, independent of the hardware: :class:`VectorWork`.

A vector op works on ``rows`` independent rows of ``cols`` elements (a softmax or a norm
reduces along the row; pooling's rows are output rows; an element-wise op is one long row, cut
anywhere into tiles). Its work is stated once, per element of that ``rows x cols`` view and
per row, in the operations of the cost table
(:data:`hw.vector.config.OPS`); the compiler's IR ops (:mod:`compiler.ir`) each return one,
and the timing model (:mod:`hw.vector.timing`) and the energy rates read nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.vector.config import OPS

__all__ = ["VectorWork"]

_INDEX = {op: i for i, op in enumerate(OPS)}


def _pairs(value, what: str, name: str) -> tuple:
    items = value.items() if isinstance(value, dict) else value
    out = []
    for op, count in items:
        if op not in _INDEX:
            raise ValueError(f"VectorWork {name!r}: {what} names {op!r}: must be one of "
                             f"{', '.join(OPS)}")
        if isinstance(count, bool) or not isinstance(count, (int, float)) or not count >= 0:
            raise ValueError(f"VectorWork {name!r}: {what}[{op!r}] = {count!r}: must be a "
                             f"number >= 0")
        if count:
            out.append((op, float(count)))
    return tuple(sorted(out, key=lambda p: _INDEX[p[0]]))


@dataclass(frozen=True)
class VectorWork:
    """The work of one vector op (module docstring).

    Attributes
    ----------
    name:
        What it computes (``softmax``, ``gelu``, ``add``, ...), for reports.
    per_element:
        ``{op: count}`` operations per element of the ``rows x cols`` view (e.g. softmax: one max, two adds, one exp,
        one multiply).
    per_row:
        ``{op: count}`` operations per row (e.g. one reciprocal of a softmax row's sum).
    reductions:
        Cross-lane reduction trees per row (softmax 2: the max and the sum; RMSNorm 1).
    passes:
        Times the engine reads a row's input from the scratchpad (softmax 3: max, exp-and-sum,
        normalise; an online softmax 2).
    """

    name: str
    per_element: tuple = ()
    per_row: tuple = ()
    reductions: int = 0
    passes: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"VectorWork: name = {self.name!r}: must be a non-empty string")
        object.__setattr__(self, "per_element", _pairs(self.per_element, "per_element", self.name))
        object.__setattr__(self, "per_row", _pairs(self.per_row, "per_row", self.name))
        for key, lo in (("reductions", 0), ("passes", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= 64:
                raise ValueError(f"VectorWork {self.name!r}: {key} = {value!r}: must be an "
                                 f"integer in {lo}..64")

    def op_counts(self, rows: int, cols: int) -> dict[str, float]:
        """Operations of each kind for ``rows`` rows of ``cols`` elements."""
        out: dict[str, float] = {}
        for op, c in self.per_element:
            out[op] = out.get(op, 0.0) + c * rows * cols
        for op, c in self.per_row:
            out[op] = out.get(op, 0.0) + c * rows
        return out

    def ops_per_element(self, cols: int) -> float:
        """All operations per output element, per-row ones spread over the row."""
        return (sum(c for _, c in self.per_element)
                + sum(c for _, c in self.per_row) / max(1, cols))

    def arrays(self):
        """``(per_element, per_row)`` as float64 arrays indexed like :data:`OPS` (the timing
        kernel's form; numpy is imported here, so that the IR loads without it)."""
        import numpy as np

        e = np.zeros(len(OPS))
        r = np.zeros(len(OPS))
        for op, c in self.per_element:
            e[_INDEX[op]] = c
        for op, c in self.per_row:
            r[_INDEX[op]] = c
        return e, r
