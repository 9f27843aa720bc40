"""Design-space sweeps: a TOML spec expanded to design points, run in parallel, stored in SQLite.

A sweep spec (``sim_configs/sweeps/*.toml`` are examples; every key is in ``docs/sweeps.md``)
names a base design, the axes to vary, the workloads, and the objectives and constraints the
report ranks points by::

    [sweep]
    name = "shapes"
    kind = "chip"                 # chip: one chip (simulate + compute_metrics); system: many chips
    timing = "native"             # chip: native | compute | scalesim
    tech = "16nm"                 # chip: energy table (name or TOML path, relative to the spec)

    [base]
    config = "default"            # chip preset or TOML path (relative to the spec)
    set = ["dram.preset=hbm2"]    # fixed SECTION.KEY=VALUE overrides

    [run]                         # chip, native timing: compiler.options.CompileOptions(**table)
    loop_order = "mnk"

    [[workload]]
    model = "resnet50"            # a zoo model (system kind: an LLM preset or a zoo model)
    image_size = 224

    [[axis]]
    key = "array.dataflow"
    values = ["os", "ws", "is"]

    [[axis]]                      # a zipped axis: several keys move together
    name = "shape"
    keys = ["array.rows", "array.cols"]
    range = {start = 8, stop = 128, factor = 2}     # or values = [[16, 16], [32, 8]]

    [objectives]
    latency_s = "min"
    energy_j = "min"

    [constraints]
    area_mm2 = "<= 2.0"

Expansion (:func:`expand`): workloads outermost, then the axes in file order, the last axis
fastest (``itertools.product``). Each :class:`DesignPoint` has an ``index`` in that order and a
stable ``id``: the first 16 hex digits of the SHA-256 of its canonical parameter JSON (sorted
keys, no spaces), so a resumed sweep matches stored points exactly whatever their order.

Running (:func:`run_sweep`): executors ``local`` (a process pool, ``os.cpu_count()`` workers by
default), ``serial`` (in this process) and ``ray`` (``ray.init(address)``; a local cluster
without an address). Each result is committed to ``DIR/sweep.sqlite`` (WAL, the parent process
is the only writer) as it arrives, so a killed sweep resumes where it stopped; a point that
raises is stored as ``failed`` with ``Type: message``; a worker process that dies takes no
other point with it (the points it may have been running are re-run one by one in fresh
processes, and the one that kills its process again is stored failed).

Reporting (:func:`write_report`): ``points.csv``, ``pareto.csv`` (the feasible non-dominated
points per workload) and PNG plots (Pareto scatter, heatmap over two axes, sensitivity per axis).

Spec errors are :class:`~hw.systolic.config.ConfigError` naming the spec file, the key, the
value and what is allowed, raised before anything runs; output-directory errors are
:class:`SweepError` (a ValueError).

The modules, one topic each (this package re-exports the public names):

- :mod:`~npulab.sweep.spec`: :class:`SweepSpec`, :class:`Axis`, the keys and metric names, the
  names a spec refers to (presets, models, energy tables, shipped sweeps);
  :mod:`~npulab.sweep.load`: reading and validating a spec (:func:`load_spec`,
  :func:`spec_from_dict`); :mod:`~npulab.sweep.axes`: the ``[[axis]]`` tables and ranges.
- :mod:`~npulab.sweep.points`: :class:`DesignPoint`, :func:`expand`, :func:`point_job`;
  :mod:`~npulab.sweep.evaluation`: one point's metrics (:func:`evaluate`, :func:`run_job`).
- :mod:`~npulab.sweep.store`: :class:`SweepStore`; :mod:`~npulab.sweep.lock`: one writer per
  directory; :mod:`~npulab.sweep.errors`: :class:`SweepError`.
- :mod:`~npulab.sweep.executors`: serial, process pool, Ray; :mod:`~npulab.sweep.run`:
  :func:`run_sweep`, :class:`SweepSummary`.
- :mod:`~npulab.sweep.results`: :class:`SweepResults`, :func:`load_results`, feasibility and
  the Pareto front; :mod:`~npulab.sweep.report`: :func:`write_report`;
  :mod:`~npulab.sweep.plots`: the report's plots.
"""

from __future__ import annotations

from npulab.sweep.errors import SweepError
from npulab.sweep.evaluation import evaluate, run_job
from npulab.sweep.executors import EXECUTORS
from npulab.sweep.load import load_spec, spec_from_dict
from npulab.sweep.points import DesignPoint, expand, point_job
from npulab.sweep.report import write_report
from npulab.sweep.results import SweepResults, csv_table, feasible, load_results, pareto_front
from npulab.sweep.run import SPEC_COPY, SweepSummary, run_sweep
from npulab.sweep.spec import (CHIP_METRICS, KINDS, SYSTEM_METRICS, Axis, SweepSpec, resolve_spec,
                               sweep_names)
from npulab.sweep.store import SCHEMA, STORE_NAME, SweepStore

__all__ = ["SweepSpec", "Axis", "DesignPoint", "SweepSummary", "SweepStore", "SweepError",
           "load_spec", "spec_from_dict", "expand", "point_job", "evaluate", "run_sweep",
           "pareto_front", "feasible", "write_report", "load_results", "SweepResults",
           "csv_table", "sweep_names", "resolve_spec", "run_job",
           "KINDS", "EXECUTORS", "CHIP_METRICS", "SYSTEM_METRICS", "STORE_NAME", "SCHEMA",
           "SPEC_COPY"]
