"""The mapper: search tilings, loop orders and dataflows of one op on one chip.

``map_op(problem, chip, objective)`` searches the mapping space of :mod:`compiler.mapper.space`
(DRAM -> scratchpad tile sizes per dimension, the six tile-loop orders, and the dataflows
asked for: by default the chip's own) under the scratchpads' capacity, with the cost model of
:mod:`compiler.mapper.cost` (the timing engine's cycles, the tiler's DRAM traffic, :mod:`npulab.metrics`' energies) and the
search of :mod:`compiler.mapper.search` (exhaustive when small; grid + seeded uniform samples +
local refinement, with a stated quality guarantee, when large); its results are the types of
:mod:`compiler.mapper.result`. ``MapResult.tile_choice`` is the
:class:`~compiler.backends.systolic_tiling.TileChoice` the compiler emits, so the executor runs
exactly the mapping the mapper chose
(``CompileOptions(map="best-latency" | "best-energy" | "best-edp")``, ``npulab run --map ...``).
See ``docs/mapper.md``.
"""

from compiler.mapper.result import MapResult, Mapping
from compiler.mapper.search import (
    DEFAULT_EXHAUSTIVE_LIMIT, DEFAULT_SAMPLES, OBJECTIVES, cost_mapping, map_op,
)
from compiler.mapper.space import MappingSpace, build_space, distinct_trip_sizes

__all__ = ["map_op", "cost_mapping", "MapResult", "Mapping", "OBJECTIVES", "DEFAULT_EXHAUSTIVE_LIMIT",
           "DEFAULT_SAMPLES", "MappingSpace", "build_space", "distinct_trip_sizes"]
