"""What the mapper returns: one costed :class:`Mapping` and a search's :class:`MapResult`.

A mapping is a tile choice, a loop order and a dataflow with its costs (as in
:mod:`compiler.mapper.cost`); :class:`MapResult` ranks the best few a search found and shows them
as a table, a DataFrame, HTML or a plot (the notebook API). :mod:`compiler.mapper.search` fills
them in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from compiler.backends.systolic_tiling import TileChoice
from hw.systolic.config import Dataflow

__all__ = ["Mapping", "MapResult"]


@dataclass(frozen=True)
class Mapping:
    """One costed mapping. Tile sizes as :class:`~compiler.backends.systolic_tiling.TileChoice`
    (``m_units`` in output rows for direct convolutions, ``k_units`` in input channels) plus the
    GEMM-element sizes ``m_tile``/``k_tile`` the schedule reports; costs as in
    :mod:`compiler.mapper.cost`."""

    group_tile: int
    m_units: int
    n_tile: int
    k_units: int
    order: str
    dataflow: Dataflow
    m_tile: int
    k_tile: int
    latency_cycles: int
    compute_cycles: int
    dram_bytes: int
    dram_bus_bytes: int
    tiles: int
    energy_j: float
    edp_js: float
    objective: float
    energy_breakdown_j: dict
    counters: dict
    ifmap_bytes: int
    filter_bytes: int
    ofmap_bytes: int
    index: int

    @property
    def tile_choice(self) -> TileChoice:
        """The :class:`~compiler.backends.systolic_tiling.TileChoice` the backend's emitter
        consumes."""
        return TileChoice(group_tile=self.group_tile, m_units=self.m_units, n_tile=self.n_tile,
                          k_units=self.k_units, order=self.order, ifmap_bytes=self.ifmap_bytes,
                          filter_bytes=self.filter_bytes, ofmap_bytes=self.ofmap_bytes,
                          dram_bytes=self.dram_bytes, compute_cycles=self.compute_cycles,
                          estimated_cycles=self.latency_cycles, tiles=self.tiles,
                          dataflow=self.dataflow)

    def describe(self) -> str:
        return (f"g{self.group_tile} m{self.m_tile} n{self.n_tile} k{self.k_tile} {self.order} "
                f"{self.dataflow.value}")

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["dataflow"] = self.dataflow.value
        return out

    def __repr__(self) -> str:
        return (f"Mapping({self.describe()}: {self.latency_cycles:,} cycles, "
                f"{self.dram_bytes:,} DRAM B, {self.energy_j * 1e6:.4g} uJ, {self.tiles:,} tiles)")


@dataclass(frozen=True)
class MapResult:
    """The outcome of :func:`map_op`: the best mapping, the ``ranked`` best few (best first),
    how many mappings were costed (``evaluated``, per phase in ``phases``), the size of the
    feasible space and whether it was searched exhaustively."""

    op: str
    objective: str
    best: Mapping
    ranked: tuple[Mapping, ...]
    evaluated: int
    space_size: int
    exhaustive: bool
    phases: dict
    seconds: float = field(compare=False)

    @property
    def tile_choice(self) -> TileChoice:
        return self.best.tile_choice

    @property
    def mappings_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else math.inf

    def top(self, k: int = 10) -> list[Mapping]:
        """The best ``k`` mappings found (at most ``len(ranked)``), best first."""
        return list(self.ranked[:k])

    def table(self, k: int = 10) -> str:
        """A plain-text ranking of the best ``k``."""
        head = (f"{'#':>3}  {'mapping':<32} {'latency cyc':>12} {'compute cyc':>12} "
                f"{'DRAM B':>12} {'energy uJ':>10} {'EDP J*s':>10}")
        lines = [head]
        for i, mp in enumerate(self.top(k), 1):
            lines.append(f"{i:>3}  {mp.describe():<32} {mp.latency_cycles:>12,} "
                         f"{mp.compute_cycles:>12,} {mp.dram_bytes:>12,} "
                         f"{mp.energy_j * 1e6:>10.3f} {mp.edp_js:>10.3e}")
        return "\n".join(lines)

    # ---- notebook API ------------------------------------------------------------------------

    _SCALARS = ("dataflow", "order", "group_tile", "m_tile", "n_tile", "k_tile", "m_units",
                "k_units", "latency_cycles", "compute_cycles", "dram_bytes", "dram_bus_bytes",
                "tiles", "energy_j", "edp_js", "objective", "ifmap_bytes", "filter_bytes",
                "ofmap_bytes", "index")

    def rows(self) -> tuple[list[str], list[list]]:
        """Header and rows of :meth:`to_pandas`: ``rank`` (1 = best), ``mapping`` (as
        :meth:`Mapping.describe`), the scalar fields of :meth:`Mapping.to_dict` (the names of
        ``npulab map --format json``'s ``ranked`` entries) and ``energy_<component>_j``."""
        comps = list(dict.fromkeys(k for mp in self.ranked for k in mp.energy_breakdown_j))
        header = (["rank", "mapping"] + list(self._SCALARS)
                  + [f"energy_{c}_j" for c in comps])
        rows = []
        for i, mp in enumerate(self.ranked, 1):
            d = mp.to_dict()
            rows.append([i, mp.describe()] + [d[k] for k in self._SCALARS]
                        + [mp.energy_breakdown_j.get(c) for c in comps])
        return header, rows

    def to_pandas(self):
        """One row per ranked mapping, best first (:meth:`rows`). Needs pandas."""
        from hw._notebook import frame
        return frame(*self.rows())

    def _lines(self) -> list[str]:
        b = self.best
        how = "exhaustive" if self.exhaustive else "pruned search"
        return [f"best: {b.describe()}, {b.latency_cycles:,} cycles, {b.dram_bytes:,} DRAM B, "
                f"{b.energy_j * 1e6:.4g} uJ, EDP {b.edp_js:.3g} J*s",
                f"{self.evaluated:,} mappings costed of {self.space_size:,} ({how}), "
                f"{len(self.ranked)} ranked (to_pandas(), top(k), table(k))"]

    def __repr__(self) -> str:
        return "\n".join([f"MapResult: {self.op}, objective {self.objective}"]
                         + ["  " + line for line in self._lines()])

    def _repr_html_(self) -> str:
        from hw._notebook import html_table
        header, rows = self.rows()
        cols = ["rank", "mapping", "latency_cycles", "compute_cycles", "dram_bytes", "energy_j",
                "edp_js"]
        idx = [header.index(c) for c in cols]
        return html_table(f"MapResult: {self.op}, objective {self.objective}", cols,
                          [[r[i] for i in idx] for r in rows], lines=self._lines())

    def plot(self, x: str = "latency_cycles", y: str = "energy_j"):
        """The ranked mappings as points of two :meth:`rows` columns (default latency against
        energy), the best one starred: a matplotlib Figure."""
        from hw._notebook import figure
        header, rows = self.rows()
        for key, name in (("x", x), ("y", y)):
            if name not in header[2:] or name in ("dataflow", "order"):
                raise ValueError(f"{key} = {name!r}: must be a numeric column of "
                                 f"MapResult.rows(): {', '.join(header[4:])}")
        fig = figure(6.5, 4.5)
        ax = fig.add_subplot()
        xi, yi = header.index(x), header.index(y)
        ax.scatter([r[xi] for r in rows[1:]], [r[yi] for r in rows[1:]], s=24, label="ranked")
        ax.scatter([rows[0][xi]], [rows[0][yi]], marker="*", s=160, color="gold",
                   edgecolors="black", zorder=3, label=f"best: {rows[0][1]}")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{self.op}: {len(rows)} best mappings by {self.objective}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        return fig

    def to_dict(self) -> dict:
        return {"op": self.op, "objective": self.objective, "evaluated": self.evaluated,
                "space_size": self.space_size, "exhaustive": self.exhaustive,
                "phases": dict(self.phases), "seconds": self.seconds,
                "ranked": [m.to_dict() for m in self.ranked]}
