"""DRAM timing model: configuration, presets, trace replay and the stateful model the executor uses.

A cycle-level controller + device model in the manner of DRAMsim3 (channels, ranks, bank groups,
banks, open/closed page, FR-FCFS command queues, refresh), computed event by event in Numba
(:mod:`hw.memory._dram_kernel`, whose docstring states the exact per-cycle semantics).

Timing contract
---------------
Cycles are DRAM command-clock cycles of ``tck_ns``. A request offered at cycle ``a`` enters its
channel's transaction queue; the controller moves it into a command queue at ``a`` (one move per
channel per cycle) and its first command can issue at ``a + 1``. A read *completes* when its last
data beat has been transferred: RD issue + CL + tBurst, so a lone read to a closed bank completes
``1 + tRCD + CL + tBurst`` after it was offered (``tBurst = burst_length / transfers_per_clock``).
A write completes when its last beat is written: WR issue + CWL + tBurst. Latency = completion -
the cycle the request was offered (its ``issue_cycle``). DRAMsim3 measures its read latency the
same way, from the cycle the transaction was added.

The parts, one module per topic:

* :mod:`hw.memory.dram.config`: :class:`DramConfig` (organisation, timings, mapping, queues) and
  :func:`decode_address`;
* :mod:`hw.memory.dram.presets`: the presets and the ``[dram]`` table (a preset plus overrides);
* :mod:`hw.memory.dram.ini`: DRAMsim3 ``.ini`` files;
* :mod:`hw.memory.dram.model`: :class:`DramModel`, the stateful model the executor uses;
* :mod:`hw.memory.dram.replay`: trace files, :func:`replay` and its :func:`replay_summary`.

Every public name is importable from ``hw.memory.dram``.
"""

from hw.memory.dram.config import MAPPING_FIELDS, DramConfig, decode_address
from hw.memory.dram.ini import dram_config_from_dramsim3_ini
from hw.memory.dram.model import DramModel
from hw.memory.dram.presets import (DEFAULT_PRESET, DRAM_PRESET_SOURCES, DRAM_PRESETS,
                                    dram_config_from_dict, dram_config_to_dict, dram_preset)
from hw.memory.dram.replay import (MAX_TRACE_CYCLE, ReplayResult, TraceError, read_trace, replay,
                                   replay_summary)

__all__ = ["DramConfig", "DRAM_PRESETS", "DRAM_PRESET_SOURCES", "DEFAULT_PRESET", "dram_preset",
           "dram_config_from_dict", "dram_config_to_dict", "dram_config_from_dramsim3_ini",
           "decode_address", "ReplayResult", "replay", "replay_summary", "read_trace", "TraceError",
           "DramModel", "MAPPING_FIELDS", "MAX_TRACE_CYCLE"]
