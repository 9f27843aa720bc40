"""Run a :class:`~hw.program.Program` on a chip: array + scratchpads + DRAM + host link + DMA.

Timing contract (all times in core cycles from 0, the cycle the program is started):

* Each engine (``load`` DMA, ``array``, ``store`` DMA) runs its commands in program order; a
  command starts at ``max(engine free, every dependency finished)``. Commands are simulated in
  the order they start (the engine head that can start earliest goes next), so the shared DRAM
  model sees transfers in time order.
* ``COMPUTE``: the systolic timing engine's cycles for the tile (:mod:`hw.systolic.timing`:
  weight preload, skew, fill, compute and drain of a tile started on an empty array) plus the
  cycles the scratchpads need beyond one per vector when the vectors an edge reads per cycle
  collide in SRAM banks (:func:`hw.memory.sram.vector_access_cycles`); and never shorter than
  its scratchpad ports allow (below).
* Scratchpad ports: each scratchpad moves at most ``banks x bank_width_bytes x ports`` bytes
  per cycle in each direction (a read side and a write side, as a 1R1W macro; the
  :meth:`~hw.memory.sram.SramConfig.bytes_per_cycle` that :mod:`npulab.metrics` takes as the
  peak). Every command that uses a side books ``ceil(bits / (8 x peak))`` cycles on it,
  starting when the command starts (DMA: after descriptor setup) or when the side is free,
  whichever is later, and cannot finish before its booking ends. Sides and users: the array
  reads its two operand scratchpads (operand width) and reads (partial sums) and writes the
  ofmap scratchpad (accumulator width); ``LOAD`` writes ifmap, filter or (partial sums) ofmap;
  ``STORE`` reads ofmap; ``MOVE`` reads ofmap and writes ifmap. Bookings on one side never
  overlap, so no scratchpad moves more than its peak over any run or layer span: a compute
  that waits for a port is an ``sram`` stall.
* ``LOAD`` / ``STORE`` (DRAM): DMA descriptor setup, then every contiguous chunk of the tile's
  box goes to the cycle-level DRAM model (:mod:`hw.memory.dram`) as column requests; the
  command finishes when the last request completes (converted from the DRAM clock to the core
  clock, rounded up). Both DMA engines share one DRAM controller; a transfer that starts while
  another is still in flight queues behind it (transfers are served one after another, their
  requests are not interleaved).
* ``HOST_IN`` / ``HOST_OUT``: the link copy (:func:`hw.memory.link.link_transfer_cycles`) runs
  alongside the DRAM side of the copy; the command takes the longer of the two.
* ``MOVE`` (on chip, ofmap -> ifmap scratchpad): setup plus its bookings on the ofmap read
  and ifmap write sides (bytes over each one's peak).
* Several chips on one DRAM (:func:`execute_shared`, the SoC of :mod:`hw.system.soc`): the
  same event loop runs every chip's engine heads, in start order across chips (start times
  compared in seconds, since the chips may run at different clocks), against ONE DRAM model;
  each chip keeps its own engines, scratchpads and counters. A transfer that starts while
  another chip's is in flight queues behind it, exactly as the two DMA engines of one chip do.

Stall accounting: the array's timeline is cut into compute cycles, bank-conflict cycles (cause
``sram``) and idle gaps. A gap is charged to the cause of the dependency that arrived last
before the next compute: ``dram`` (a DRAM load or store, including waiting for an accumulator
buffer to drain), ``link`` (host copies) or ``sram`` (on-chip moves). The idle tail after the
last compute is charged to whatever finished last. Each layer owns a window of the program's
cycles, and the timeline's segments are charged to the windows (:mod:`hw.layer_windows`): the
layers' cycles add up to the program's, and in each window ``cycles = compute + stall_dram +
stall_link + stall_sram`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hw.chip import ChipConfig
from hw.compute_cost import ComputeCosts
from hw.layer_windows import (
    CAUSE_DRAM, CAUSE_LINK, CAUSE_NONE, CAUSE_SRAM, CAUSE_VECTOR, COMPUTE, charge_windows,
    layer_ends, window_cycles,
)
from hw.memory.dma_box import Clocks
from hw.memory.dram import DramConfig, DramModel
from hw.memory.link import link_transfer_cycles
from hw.memory_path import _READ, _SRAMS, _WRITE, MemoryPath
from hw.program import Engine, Kind, Operand, Program
from hw.vector.config import OPS as VECTOR_OPS
from hw.vector.timing import T_ALU, T_CYCLES, T_SFU, TileTiming

__all__ = ["ExecutionResult", "Trace", "execute", "execute_shared", "SharedExecution",
           "LAYER_COUNTERS", "PER_CORE_COUNTERS"]


# Per-layer counter columns (int64).
LAYER_COUNTERS = (
    "cycles", "compute_cycles", "stall_dram_cycles", "stall_link_cycles", "stall_sram_cycles",
    "array_busy_cycles", "pe_busy_cycles",
    "ifmap_sram_reads", "filter_sram_reads", "ofmap_sram_writes", "ofmap_sram_reads",
    "ifmap_sram_fill_bytes", "filter_sram_fill_bytes", "ofmap_sram_drain_bytes",
    "sram_conflict_cycles", "sram_bandwidth_cycles",
    # cycles booked on each scratchpad side (see the module docstring)
    "ifmap_read_port_cycles", "ifmap_write_port_cycles", "filter_read_port_cycles",
    "filter_write_port_cycles", "ofmap_read_port_cycles", "ofmap_write_port_cycles",
    "dram_ifmap_read_bytes", "dram_filter_read_bytes", "dram_psum_read_bytes",
    "dram_ofmap_write_bytes", "dram_psum_write_bytes",
    # a fused epilogue's residual tiles: activation reads (within dram_ifmap_read_bytes)
    # that fill the ofmap scratchpad beside the accumulators
    "dram_residual_read_bytes", "ofmap_sram_fill_bytes",
    "dram_bus_read_bytes", "dram_bus_write_bytes", "dram_row_hits", "dram_row_misses",
    "dram_row_conflicts", "dram_activates",
    "link_in_bytes", "link_out_bytes", "onchip_move_bytes",
    "dram_transfer_cycles", "link_transfer_cycles",   # busy time of DRAM / link for the layer
    "loads", "stores", "computes",
    # the vector engine (hw.vector): its busy cycles (ALU and special-function paths overlap),
    # commands, elements, scratchpad bytes read and written, and operations of each kind
    "stall_vector_cycles", "vector_busy_cycles", "vector_alu_cycles", "vector_sfu_cycles",
    "vectors", "vector_elements", "ifmap_vector_read_bytes", "filter_vector_read_bytes",
    "ofmap_vector_read_bytes", "ofmap_vector_write_bytes",
    *(f"vector_{op}_ops" for op in VECTOR_OPS),
    # a multi-core chip (module docstring): bytes the shared L2 read and wrote, the bytes of
    # loads it served (hits) and of those that came from DRAM (misses), bytes on the network;
    # cycles booked on the L2's sides, on one core's network port (in: loads, out: stores) and
    # on the whole network; of the L2's, those its busiest bank added (hw.memory.l2)
    "l2_read_bytes", "l2_write_bytes", "l2_hit_bytes", "l2_miss_bytes", "noc_bytes",
    "l2_read_port_cycles", "l2_write_port_cycles", "noc_in_port_cycles", "noc_out_port_cycles",
    "noc_network_in_cycles", "noc_network_out_cycles", "l2_conflict_cycles",
)
#: Counters of work each core does on its own share (the executor runs one core's commands):
#: multiplied by the layer's cores in the results. Busy and port cycles are one core's time.
PER_CORE_COUNTERS = (
    "pe_busy_cycles", "ifmap_sram_reads", "filter_sram_reads", "ofmap_sram_writes",
    "ofmap_sram_reads", "ifmap_sram_fill_bytes", "filter_sram_fill_bytes",
    "ofmap_sram_drain_bytes", "ofmap_sram_fill_bytes", "onchip_move_bytes", "loads", "stores",
    "computes", "vectors", "vector_elements", "ifmap_vector_read_bytes",
    "filter_vector_read_bytes", "ofmap_vector_read_bytes", "ofmap_vector_write_bytes",
    *(f"vector_{op}_ops" for op in VECTOR_OPS),
)
_N_ENGINES = len(Engine)


@dataclass(frozen=True)
class Trace:
    """Timed events: one per command (``start``/``finish`` core cycles, engine, kind, layer).

    Per command, copied from the :class:`~hw.program.Program`: ``operand``, the tile indices
    ``tile_g/m/n/k`` and ``nbytes`` (bytes a transfer moves, 0 for compute). Host copies run
    their two sides in parallel (module docstring): ``dram_finish`` is when the DRAM side
    finished (``finish`` for every other command) and ``link_start``/``link_finish`` bound the
    link side (``descriptor setup`` .. ``setup + link_transfer_cycles``; -1 for commands that
    do not use the link). ``work`` names a ``VECTOR`` command's work (an index into
    ``work_names``; -1 for other commands). The full timeline (tracks, regions, windows) is
    :func:`npulab.timeline.chrome_trace`.
    """

    start: np.ndarray
    finish: np.ndarray
    engine: np.ndarray
    kind: np.ndarray
    layer: np.ndarray
    layer_names: tuple[str, ...]
    clock_mhz: float
    operand: np.ndarray
    tile_g: np.ndarray
    tile_m: np.ndarray
    tile_n: np.ndarray
    tile_k: np.ndarray
    nbytes: np.ndarray
    dram_finish: np.ndarray
    link_start: np.ndarray
    link_finish: np.ndarray
    work: np.ndarray | None = None      # VECTOR commands: index into work_names; else -1
    work_names: tuple[str, ...] = ()

    def events(self) -> list[dict]:
        """Plain-data events, e.g. for a timeline plot."""
        return [
            {"engine": Engine(int(e)).name.lower(), "kind": Kind(int(k)).name.lower(),
             "layer": self.layer_names[int(lay)], "start": int(s), "finish": int(f),
             "operand": Operand(int(o)).name.lower(), "tile": (int(g), int(m), int(n), int(kk)),
             "bytes": int(b)}
            for s, f, e, k, lay, o, g, m, n, kk, b in zip(
                self.start, self.finish, self.engine, self.kind, self.layer, self.operand,
                self.tile_g, self.tile_m, self.tile_n, self.tile_k, self.nbytes)
        ]



@dataclass(frozen=True)
class ExecutionResult:
    """What running a program cost. ``layers[i]`` holds :data:`LAYER_COUNTERS` for layer ``i``."""

    cycles: int
    layers: list[dict]
    totals: dict
    dram: dict
    trace: Trace = field(repr=False)


def execute(program: Program, chip: ChipConfig, progress=None,
            durations=None) -> ExecutionResult:
    """Run ``program`` on ``chip`` (see the module docstring for the timing contract).

    ``durations``, if given, are every command's cycles (int[len(program)]), instead of what
    the cost models above give: the RTL core's (:func:`hw.core.timing.durations`). The
    schedule (engines in order, dependencies) is the same; the counters are the models'.

    ``progress``, if given, is called as ``progress(done, total, layer_name)`` once per layer
    of ``program.layers`` (``total`` = their number) as layers complete: a layer is complete
    when its last command has been simulated, and a layer without commands when every layer
    before it is complete. ``done`` counts completed layers (1, 2, ..., ``total``)."""
    if progress is not None and not callable(progress):
        raise ValueError(f"progress = {progress!r}: must be a callable progress(done, total, "
                         f"name) or None")
    dram = None if chip.dram.is_ideal else DramModel(chip.dram)
    run = _ChipRun(program, chip, dram, progress)
    if durations is not None:
        fixed = np.asarray(durations)
        if fixed.shape != (len(program),) or fixed.dtype.kind not in "iu" or (fixed < 0).any():
            raise ValueError(f"execute: durations: must be {len(program)} integers >= 0, one "
                             f"per command")
        run.fixed = fixed.tolist()
    _run_together([run], [])
    return run.result()


@dataclass(frozen=True)
class SharedExecution:
    """Outcome of :func:`execute_shared`: one :class:`ExecutionResult` per program (cycles in
    that chip's core clock) and the shared DRAM's totals (:meth:`DramModel.counters`; empty for
    an ideal DRAM)."""

    results: list[ExecutionResult]
    dram: dict


def execute_shared(programs, chips, dram: DramConfig, *, addr_offsets=None,
                   agents=(), progress=None, progress_total: int | None = None
                   ) -> SharedExecution:
    """Run several programs, each on its own chip, against ONE shared DRAM model.

    Each chip keeps its own engines, array, scratchpads and counters (its own ``dram`` field is
    ignored: every chip uses ``dram``). Commands of all chips are simulated in one event loop in
    the order they start (in seconds, ties: chip order, then program order), exactly as the
    engines of one chip are, so the shared DRAM sees every transfer in time order; a transfer
    that starts while another chip's transfer is in flight queues behind it on the DRAM
    controller (served one after another, requests not interleaved). With one program this is
    :func:`execute` command for command.

    ``addr_offsets[j]`` (bytes, default 0) is added to every DRAM address of program ``j`` (to
    give each chip its own region of the shared DRAM). ``agents`` are other DRAM masters (e.g.
    :class:`hw.system.soc.CpuStream`'s runner): objects with ``next_time_s() -> float | None``
    (when their next DRAM access starts, None when done) and ``step(dram_model) -> None`` (make
    that access); they join the same time-ordered loop after the chips.

    ``progress``, if given, is called as ``progress(done, total, layer_name)`` as layers of any
    program complete (``done`` counts them over all programs; ``total``: ``progress_total``,
    default every program's layers).
    """
    programs, chips = list(programs), list(chips)
    if not programs or len(programs) != len(chips):
        raise ValueError(f"execute_shared: need one chip per program and at least one program "
                         f"(got {len(programs)} programs, {len(chips)} chips)")
    if not isinstance(dram, DramConfig):
        raise ValueError(f"execute_shared: dram = {dram!r}: must be a DramConfig")
    offsets = [0] * len(programs) if addr_offsets is None else [int(o) for o in addr_offsets]
    if len(offsets) != len(programs) or min(offsets) < 0:
        raise ValueError(f"execute_shared: addr_offsets = {addr_offsets!r}: must be one "
                         f"integer >= 0 per program ({len(programs)})")
    model = None if dram.is_ideal else DramModel(dram)
    runs = [_ChipRun(p, c, model, _counted(progress, programs, progress_total), off, dram)
            for p, c, off in zip(programs, chips, offsets)]
    _run_together(runs, list(agents), model)
    return SharedExecution(results=[r.result() for r in runs],
                           dram=model.counters() if model is not None else {})


def _counted(progress, programs, total: int | None):
    """One progress callback for several programs' runs: layers counted over all of them."""
    if progress is None:
        return None
    total = sum(len(p.layers) for p in programs) if total is None else total
    done = [0]

    def report(_done, _total, name):
        done[0] += 1
        progress(done[0], total, name)
    return report


def _run_together(runs: list, agents: list, model=None) -> None:
    """The event loop: repeatedly run the command (or agent access) that starts earliest.

    A chip's candidate depends only on its own state, so it is recomputed only after that chip
    ran a command."""
    if len(runs) == 1 and not agents:   # one chip: no cross-chip ordering needed
        run = runs[0]
        while (cand := run.peek()) is not None:
            run.step(cand)
        return
    cands = [r.peek() for r in runs]
    while True:
        best, who = None, -1
        for j, (r, c) in enumerate(zip(runs, cands)):
            if c is not None:
                key = (c[0] / r.clock_hz, j, c[1])
                if best is None or key < best:
                    best, who = key, j
        for a, agent in enumerate(agents):
            t = agent.next_time_s()
            if t is not None:
                key = (t, len(runs) + a, 0)
                if best is None or key < best:
                    best, who = key, len(runs) + a
        if best is None:
            return
        if who < len(runs):
            runs[who].step(cands[who])
            cands[who] = runs[who].peek()
        else:
            agents[who - len(runs)].step(model)


# Counter columns the event loop adds to (indices into LAYER_COUNTERS), resolved once.
_AT = {name: i for i, name in enumerate(LAYER_COUNTERS)}
_OFMAP = int(Operand.OFMAP)
_K_LOAD, _K_STORE, _K_COMPUTE, _K_MOVE, _K_HOST_IN, _K_HOST_OUT, _K_VECTOR = (
    int(k) for k in (Kind.LOAD, Kind.STORE, Kind.COMPUTE, Kind.MOVE, Kind.HOST_IN,
                     Kind.HOST_OUT, Kind.VECTOR))


def _transfer_columns() -> dict:
    """``(kind, operand) -> (scratchpad, byte columns, count column)`` of a one-core ``LOAD`` /
    ``STORE``: the scratchpad whose side it books, the counters its bytes add to, the counter
    it adds one to. A pair missing here is a load of an operand no scratchpad holds."""
    table = {}
    for op in Operand:
        if op in (Operand.IFMAP, Operand.FILTER, Operand.PSUM):
            name = op.name.lower()
            fills = () if op == Operand.PSUM else (f"{name}_sram_fill_bytes",)
            table[_K_LOAD, int(op)] = (2 if op == Operand.PSUM else int(op),
                                       (f"dram_{name}_read_bytes", *fills), "loads")
        elif op == Operand.RESIDUAL:
            table[_K_LOAD, int(op)] = (2, ("dram_ifmap_read_bytes", "dram_residual_read_bytes",
                                           "ofmap_sram_fill_bytes"), "loads")
        name = "psum" if op == Operand.PSUM else "ofmap"
        table[_K_STORE, int(op)] = (2, (f"dram_{name}_write_bytes", "ofmap_sram_drain_bytes"),
                                    "stores")
    return {key: (sram, tuple(_AT[c] for c in cols), _AT[count])
            for key, (sram, cols, count) in table.items()}


_TRANSFER_COLUMNS = _transfer_columns()
_COMPUTE_COLUMNS = tuple(_AT[c] for c in (
    "array_busy_cycles", "pe_busy_cycles", "ifmap_sram_reads", "filter_sram_reads",
    "ofmap_sram_writes", "ofmap_sram_reads", "sram_conflict_cycles", "sram_bandwidth_cycles",
    "computes"))
_MOVE_COLUMNS = tuple(_AT[c] for c in ("onchip_move_bytes", "ifmap_sram_fill_bytes",
                                       "ofmap_sram_drain_bytes"))
_DRAM_TRANSFER, _LINK_TRANSFER = _AT["dram_transfer_cycles"], _AT["link_transfer_cycles"]
_LINK_IN, _LINK_OUT = _AT["link_in_bytes"], _AT["link_out_bytes"]
_VECTOR_COLUMNS = tuple(_AT[c] for c in (
    "vector_busy_cycles", "vector_alu_cycles", "vector_sfu_cycles", "vectors", "vector_elements",
    "filter_vector_read_bytes", "ofmap_vector_write_bytes"))
_VECTOR_READ = tuple(_AT[f"{name}_vector_read_bytes"] for name in _SRAMS)


class _ChipRun(MemoryPath):
    """One chip's executor state: its engine queues, timeline, counters and trace columns.

    :meth:`peek` names the command that can start earliest (``(ready, index, gate, engine)``),
    :meth:`step` simulates it, :meth:`result` builds the :class:`ExecutionResult`. ``dram`` is
    the (possibly shared) :class:`DramModel`, None for an ideal DRAM.

    The event loop runs once per command, so it reads plain Python lists (a numpy element
    costs ~100 ns, a list item ~10 ns): the program's columns are copied into lists here, the
    per-command times and the counters are kept in lists and become the result's arrays in
    :meth:`result`."""

    def __init__(self, program: Program, chip: ChipConfig, dram, progress=None,
                 addr_offset: int = 0, dram_cfg: DramConfig | None = None):
        self.program, self.chip, self.dram, self.progress = program, chip, dram, progress
        self.addr_offset = int(addr_offset)
        dram_cfg = chip.dram if dram_cfg is None else dram_cfg
        self.clock_hz = chip.clock_hz
        cols = self.cols = program.columns
        n = self.n = len(program)
        n_layers = self.n_layers = len(program.layers)
        self.nbytes_col = np.where(cols["kind"] == Kind.COMPUTE, 0,
                                   cols["n2"] * cols["n1"] * cols["chunk_bytes"]).astype(np.int64)
        # Per-layer progress: commands left per layer; layers report in completion order.
        self.cmds_left = np.zeros(n_layers, np.int64)
        if n:
            self.cmds_left[:] = np.bincount(cols["layer"], minlength=n_layers)[:n_layers]
        self.reported = np.zeros(n_layers, np.bool_)
        self.n_reported = 0
        self.next_layer = 0   # every layer before this index has been reported
        if progress is not None:
            self._report(-1)
        # per command, filled as commands run (lists; arrays in result())
        self.start = [0] * n
        self.finish = [0] * n
        self.dram_finish = [0] * n
        self.link_start = [-1] * n
        self.link_finish = [-1] * n
        self.cause = [CAUSE_NONE] * n
        self.gates = [-1] * n
        self.done = [False] * n
        self.engine_free = [0] * _N_ENGINES
        self.counters = np.zeros((n_layers, len(LAYER_COUNTERS)), np.int64)
        self.col = dict(_AT)
        self.setup = chip.dma.descriptor_setup_cycles
        self.max_out = chip.dma.max_outstanding
        self.clocks = None if dram is None else Clocks(chip.clock_mhz, dram_cfg.clock_mhz)
        # what each COMPUTE costs on its layer's array variant (hw.compute_cost)
        self.compute = ComputeCosts(program, chip)
        # Scratchpad sides: peak bits per cycle and the cycle each side is free again.
        self.port_bits = [8 * chip.sram(name).bytes_per_cycle for name in _SRAMS]
        self.port_free = [[0, 0] for _ in _SRAMS]
        self.port_col = [[_AT[f"{name}_{d}_port_cycles"] for d in ("read", "write")]
                         for name in _SRAMS]
        self.req_bytes = 0 if dram is None else dram_cfg.request_bytes
        # array timeline
        self.seg_start: list[int] = []
        self.seg_end: list[int] = []
        self.seg_cat: list[int] = []
        self.array_free = 0
        self.dram_busy_until = 0
        self.engine_last = [-1] * _N_ENGINES
        engines = self.engines = cols["engine"]
        self.kinds = cols["kind"]
        self.operands = cols["operand"]
        self.layers = cols["layer"]
        self.kind_l = self.kinds.tolist()
        self.layer_l = self.layers.tolist()
        self.operand_l = self.operands.tolist()
        self.nbytes_l = self.nbytes_col.tolist()
        self.copies_l = cols["copies"].tolist()
        self.boxes = np.stack([cols[c] for c in ("addr", "n2", "stride2", "n1", "stride1",
                                                 "chunk_bytes")], axis=1).tolist()
        self.dep_ptr, self.dep_idx = program.dep_ptr.tolist(), program.dep_idx.tolist()
        # A compute's cost depends only on its array and shape: each distinct (array, count,
        # m, n, k, left_stride, top_stride) is costed once (ComputeCosts.cost), when first run.
        comp = np.flatnonzero(self.kinds == Kind.COMPUTE)
        ids: dict = {}
        keys = zip(self.compute.command_arrays(comp),
                   *(cols[c][comp].tolist() for c in ("count", "m", "n", "k", "left_stride",
                                                      "top_stride")))
        shape_id = np.full(n, -1, np.int64)
        shape_id[comp] = [ids.setdefault(key, len(ids)) for key in keys]
        self.shape_id, self.shapes = shape_id.tolist(), list(ids)
        self.costs = [None] * len(self.shapes)
        # Event order: always run the engine head that can start earliest (ties: program
        # order), so the shared DRAM sees transfers in the order they start.
        self.queues = [np.flatnonzero(engines == e).tolist() for e in range(_N_ENGINES)]
        self.heads = [0] * _N_ENGINES
        # per engine: its head's (ready, index, gate, engine) once every dependency has
        # finished (fixed until the engine runs it), or the dependency it waits for
        self.cand = [None] * _N_ENGINES
        self.blocker = [-1] * _N_ENGINES
        self._time_vectors(chip)
        self.rows = self.counters.tolist()
        self.left = n
        # a multi-core chip: each layer's cores, the transfers' places, the shared resources
        self.multicore = chip.multicore
        self.layer_cores = np.array([ls.cores for ls in program.layers] or [1], np.int64)
        self.locations = cols["location"]
        self.res_free = dict.fromkeys(("l2_read", "l2_write", "noc_in", "noc_out", "net_in",
                                       "net_out"), 0)
        self.noc_latency = chip.noc.latency_cycles(chip.cores) if chip.multicore else 0
        self.noc_aggregate = chip.noc.aggregate_bytes_per_cycle(chip.cores)
        self.dram_cached = dram is not None and dram_cfg.model == "cached"
        self.shape_cache: dict = {}
        self.bus_free = 0
        self.idle = None
        self.first_latency: dict = {}
        self.refresh_stretch = 1.0
        self.fixed = None       # per-command cycles given to execute(durations=...)

    def _report(self, li: int) -> None:
        progress, layers = self.progress, self.program.layers
        if li >= 0:
            self.reported[li] = True
            self.n_reported += 1
            progress(self.n_reported, self.n_layers, layers[li].name)
        # Layers without commands complete once every layer before them has.
        while self.next_layer < self.n_layers and (self.reported[self.next_layer]
                                                   or self.cmds_left[self.next_layer] == 0):
            if not self.reported[self.next_layer]:
                self.reported[self.next_layer] = True
                self.n_reported += 1
                progress(self.n_reported, self.n_layers, layers[self.next_layer].name)
            self.next_layer += 1

    def _book(self, sram: int, side: int, start: int, bits: int, row) -> int:
        """Book ``bits`` on one scratchpad side from ``start`` (or when it is free); the cycle
        the booking ends (``start`` when there is nothing to move)."""
        cycles = -(-int(bits) // self.port_bits[sram])
        if cycles <= 0:
            return start
        free = self.port_free[sram]
        end = max(start, free[side]) + cycles
        free[side] = end
        row[self.port_col[sram][side]] += cycles
        return end

    def peek(self):
        """``(ready, index, gate, engine)`` of the engine head that can start earliest (ties:
        program order); None when every command has run."""
        if not self.left:
            return None
        done, finish, cand, blocker = self.done, self.finish, self.cand, self.blocker
        dep_ptr, dep_idx = self.dep_ptr, self.dep_idx
        best = None
        for e in range(_N_ENGINES):
            c = cand[e]
            if c is None:
                b = blocker[e]
                if b >= 0 and not done[b]:
                    continue
                queue, head = self.queues[e], self.heads[e]
                if head == len(queue):
                    continue
                i = queue[head]
                ready = self.engine_free[e]
                gate = self.engine_last[e]     # the engine's previous command, if it binds
                for j in range(dep_ptr[i], dep_ptr[i + 1]):
                    d = dep_idx[j]
                    if not done[d]:
                        blocker[e] = d
                        ready = -1
                        break
                    f = finish[d]
                    if f > ready or (gate < 0 and f == ready and ready > 0):
                        ready = f
                        gate = d
                if ready < 0:
                    continue
                c = cand[e] = (ready, i, gate, e)
            if best is None or c[0] < best[0] or (c[0] == best[0] and c[1] < best[1]):
                best = c
        if best is None:
            raise RuntimeError(f"program {self.program.model!r}: no engine head can start "
                               f"(a dependency on a later command of the same engine)")
        return best

    def step(self, best) -> None:
        """Simulate command ``best`` (from :meth:`peek`)."""
        t0, i, gate, e = best
        start, finish, cause = self.start, self.finish, self.cause
        book = self._book
        self.cand[e] = None
        self.blocker[e] = -1
        self.gates[i] = gate
        self.engine_last[e] = i
        self.heads[e] += 1
        self.done[i] = True
        self.left -= 1
        kind = self.kind_l[i]
        lay = self.layer_l[i]
        row = self.rows[lay]
        t_dram = 0
        if kind == _K_COMPUTE:
            sid = self.shape_id[i]
            cost = self.costs[sid]
            if cost is None:
                cost = self.costs[sid] = self.compute.cost(*self.shapes[sid])
            cyc, stretch, bookings, adds = cost
            t1 = t0 + cyc + stretch
            t_port = max([book(sram, side, t0, bits, row) for sram, side, bits in bookings])
            bandwidth = max(0, t_port - t1)
            # Walk the critical path back from the gating dependency: each transfer on it is
            # charged for the part of the gap it was running, the rest goes to what it waited
            # for (a DRAM load that waited on a host copy charges that wait to the link).
            if t0 > self.array_free:
                self._charge_gap(t0, gate)
            seg_start, seg_end, seg_cat = self.seg_start, self.seg_end, self.seg_cat
            seg_start.append(t0)
            seg_end.append(t0 + cyc)
            seg_cat.append(COMPUTE)
            if stretch or bandwidth:
                seg_start.append(t0 + cyc)
                seg_end.append(t1 + bandwidth)
                seg_cat.append(CAUSE_SRAM)
            t1 += bandwidth
            self.array_free = t1
            for c, v in zip(_COMPUTE_COLUMNS, adds):
                row[c] += v
            row[_COMPUTE_COLUMNS[-2]] += bandwidth
            row[_COMPUTE_COLUMNS[-1]] += 1
        elif kind == _K_VECTOR:
            t1 = self._vector(i, t0, row)
        else:
            nbytes = self.nbytes_l[i]
            operand = self.operand_l[i]
            t_set = t0 + self.setup
            if kind == _K_MOVE:
                t1 = max(t_set, book(2, _READ, t_set, 8 * nbytes, row),
                         book(0, _WRITE, t_set, 8 * nbytes, row))
                cause[i] = CAUSE_SRAM
                for c in _MOVE_COLUMNS:
                    row[c] += nbytes
            else:
                host = kind == _K_HOST_IN or kind == _K_HOST_OUT
                copies = self.copies_l[i] if self.multicore else 1
                if self.multicore and not host:
                    t1, release = self._shared(i, t_set, kind, operand, nbytes, copies, row)
                    start[i], finish[i] = t0, t1
                    self.dram_finish[i] = t1
                    self.engine_free[e] = max(t_set, min(t1, release))
                    if self.progress is not None:
                        self._done(lay)
                    return
                is_write = kind == _K_STORE or kind == _K_HOST_IN
                t_dram = self._dram(i, t_set, is_write, copies, row) if nbytes else t_set
                nbytes *= copies
                t1 = t_dram
                cause[i] = CAUSE_DRAM
                if not host:    # the scratchpad side of the copy
                    sram, byte_cols, count_col = _TRANSFER_COLUMNS[kind, operand]
                    t_port = book(sram, _READ if kind == _K_STORE else _WRITE, t_set,
                                  8 * nbytes, row)
                    if t_port > t1:
                        t1 = t_port
                        cause[i] = CAUSE_SRAM
                # DRAM busy time: this transfer's span, minus any part spent queued behind
                # the previous one of this chip (transfers are served one after another).
                row[_DRAM_TRANSFER] += max(0, t_dram - max(t0, self.dram_busy_until))
                self.dram_busy_until = max(self.dram_busy_until, t_dram)
                if host:
                    chip = self.chip
                    t_link = t_set + link_transfer_cycles(chip.host_link, nbytes, chip.clock_mhz)
                    self.link_start[i], self.link_finish[i] = t_set, t_link
                    if t_link >= t_dram:
                        cause[i] = CAUSE_LINK
                    t1 = max(t_dram, t_link)
                    row[_LINK_TRANSFER] += t_link - t0
                    row[_LINK_IN if kind == _K_HOST_IN else _LINK_OUT] += nbytes
                else:
                    for c in byte_cols:
                        row[c] += nbytes
                    row[count_col] += 1
        if self.fixed is not None:
            t1 = t0 + self.fixed[i]
            if kind == _K_COMPUTE:
                self.array_free = t1
        start[i], finish[i] = t0, t1
        self.dram_finish[i] = t_dram if kind == _K_HOST_IN or kind == _K_HOST_OUT else t1
        self.engine_free[e] = t1
        if self.progress is not None:
            self._done(lay)

    def _done(self, lay: int) -> None:
        if self.progress is not None:
            self.cmds_left[lay] -= 1
            if self.cmds_left[lay] == 0:
                self._report(lay)

    def _charge_gap(self, hi: int, d: int) -> None:
        """Charge the array's idle cycles ``[array_free, hi)`` along the critical path that ends
        with command ``d`` (-1: none): walking back through the gating dependencies, each command
        on it is charged for the part of the gap it was running (a DRAM load that waited on a
        host copy charges that wait to the link; a store that waited on the vector engine, the
        vector engine's time to ``vector``); the walk stops at an array compute."""
        seg_start, seg_end, seg_cat = self.seg_start, self.seg_end, self.seg_cat
        start, cause, kinds, gates = self.start, self.cause, self.kind_l, self.gates
        first_seg = len(seg_start)
        array_free = self.array_free
        while hi > array_free:
            lo = array_free if d < 0 else max(array_free, start[d])
            c = cause[d] if d >= 0 and cause[d] >= 0 else CAUSE_DRAM
            if lo < hi:
                seg_start.append(lo)
                seg_end.append(hi)
                seg_cat.append(c)
            hi = lo
            d = gates[d] if d >= 0 and kinds[d] != _K_COMPUTE else -1
        for seg in (seg_start, seg_end, seg_cat):   # appended backwards in time
            seg[first_seg:] = seg[first_seg:][::-1]

    def _time_vectors(self, chip: ChipConfig) -> None:
        """Every ``VECTOR`` command's timing, in one batch of the tile kernel
        (:mod:`hw.vector.timing`), and each layer's vector operations by kind."""
        cols, kinds = self.cols, self.kinds
        idx = np.flatnonzero(kinds == Kind.VECTOR)
        vtime = np.zeros((self.n, 7), np.int64)
        vpasses = np.ones(self.n, np.int64)
        if len(idx):
            timing = TileTiming(chip.vector, self.program.works)
            work = cols["count"][idx]
            passes = timing.passes[work]
            vpasses[idx] = passes
            vb = cols["vb_bytes"][idx]
            # the main operand is read once per pass, the second once
            in_bytes = cols["va_bytes"][idx] + -(-vb // passes)
            vtime[idx] = timing.cycles(work, cols["m"][idx], cols["n"][idx], in_bytes,
                                       cols["vout_bytes"][idx])
            # operations by kind: the works' per-element and per-row counts the timing built
            rows = cols["m"][idx].astype(np.float64)[:, None]
            counts = (timing.per_element[work] * rows * cols["n"][idx][:, None]
                      + timing.per_row[work] * rows)
            ops = np.zeros((self.n_layers, len(VECTOR_OPS)))
            np.add.at(ops, cols["layer"][idx], counts)
            first = _AT[f"vector_{VECTOR_OPS[0]}_ops"]
            self.counters[:, first:first + len(VECTOR_OPS)] += np.rint(ops).astype(np.int64)
        # per VECTOR command (other commands: unused): the engine's cycles and busy paths,
        # its elements, and the bytes it reads (main operand: once per pass) and writes
        self.vector_l = [
            (int(vt[T_CYCLES]), int(vt[T_ALU]), int(vt[T_SFU]), m * n, a * p, b, o)
            for vt, m, n, a, p, b, o in zip(
                vtime[idx], cols["m"][idx].tolist(), cols["n"][idx].tolist(),
                cols["va_bytes"][idx].tolist(), vpasses[idx].tolist(),
                cols["vb_bytes"][idx].tolist(), cols["vout_bytes"][idx].tolist())]
        self.vector_at = dict(zip(idx.tolist(), range(len(idx))))

    def _vector(self, i: int, t0: int, row) -> int:
        """Run ``VECTOR`` command ``i`` from ``t0``; its finish. The engine's cycles come from
        :meth:`_time_vectors`; it also books its scratchpad sides (the main operand read once
        per pass), and cannot finish before they are done."""
        cyc, alu, sfu, elements, va, vb, vo = self.vector_l[self.vector_at[i]]
        src = 2 if self.operand_l[i] == _OFMAP else 0
        t_port = max(self._book(src, _READ, t0, 8 * va, row),
                     self._book(1, _READ, t0, 8 * vb, row),
                     self._book(2, _WRITE, t0, 8 * vo, row))
        self.cause[i] = CAUSE_VECTOR
        for c, v in zip(_VECTOR_COLUMNS, (cyc, alu, sfu, 1, elements, vb, vo)):
            row[c] += v
        row[_VECTOR_READ[src]] += va
        return max(t0 + cyc, t_port)

    def result(self) -> ExecutionResult:
        """Close the array timeline and the layer windows; the run's results."""
        program, col = self.program, self.col
        n_layers, cols = self.n_layers, self.cols
        seg_start, seg_end, seg_cat = self.seg_start, self.seg_end, self.seg_cat
        finish = np.array(self.finish, np.int64)
        total = int(finish.max()) if self.n else 0
        # Tail of the array timeline: its critical path, as every other gap.
        if total > self.array_free:
            self._charge_gap(total, int(np.argmax(finish)))
        counters = self.counters = np.array(self.rows, np.int64).reshape(self.counters.shape)
        if self.multicore and n_layers:
            per_core = [col[name] for name in PER_CORE_COUNTERS]
            counters[:, per_core] *= self.layer_cores[:n_layers, None]
        start = np.array(self.start, np.int64)
        ends = layer_ends(program, finish, start, self.kinds, total)
        window_cycles(counters, col, ends)
        charge_windows(counters, col, ends, seg_start, seg_end, seg_cat)
        names = tuple(ls.name for ls in program.layers)
        layer_dicts = [dict(zip(col, values)) for values in counters.tolist()]
        totals = dict(zip(col, counters.sum(axis=0).tolist()))
        totals["cycles"] = total
        # The DRAM's totals (a shared DRAM's: every master's, as in SharedExecution.dram).
        dram_counters = self.dram.counters() if self.dram is not None else {}
        trace = Trace(start=start, finish=finish, engine=self.engines.copy(),
                      kind=self.kinds.copy(), layer=self.layers.copy(), layer_names=names,
                      clock_mhz=self.chip.clock_mhz, operand=self.operands.copy(),
                      tile_g=cols["tile_g"].copy(), tile_m=cols["tile_m"].copy(),
                      tile_n=cols["tile_n"].copy(), tile_k=cols["tile_k"].copy(),
                      nbytes=self.nbytes_col, dram_finish=np.array(self.dram_finish, np.int64),
                      link_start=np.array(self.link_start, np.int64),
                      link_finish=np.array(self.link_finish, np.int64),
                      work=np.where(self.kinds == Kind.VECTOR, cols["count"], -1),
                      work_names=tuple(w.name for w in program.works))
        return ExecutionResult(cycles=total, layers=layer_dicts, totals=totals,
                               dram=dram_counters, trace=trace)
