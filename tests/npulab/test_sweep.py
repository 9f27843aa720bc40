"""Design-space sweeps (npulab/sweep/, npulab/sweep_cmd.py).

Gold models: a brute-force pure-Python Pareto enumeration; direct calls of
:func:`npulab.simulate.simulate` + :func:`npulab.metrics.compute_metrics` and of
:func:`npulab.system_run.plan` for the metrics of a point; a clean serial run for the results
of parallel, killed-and-resumed and repeated runs; hand-listed expansions.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler.frontends import zoo
from hw.configfile import load_chip_config
from hw.systolic.config import ConfigError
from npulab import sweep
from npulab.cli import main
from npulab.metrics import compute_metrics
from npulab.simulate import simulate
from npulab.sweep import (DesignPoint, SweepError, SweepStore, expand, load_spec, pareto_front,
                          run_sweep, spec_from_dict, write_report)

REPO = Path(__file__).resolve().parents[2]

# 6 native-timing points of a small CNN (~0.3-1 s each): 2 dataflows x 3 square shapes.
SMALL = """
[sweep]
name = "small"
tech = "16nm"

[[workload]]
model = "resnet18"
image_size = 32

[[axis]]
key = "array.dataflow"
values = ["os", "ws"]

[[axis]]
name = "shape"
keys = ["array.rows", "array.cols"]
range = {start = 8, stop = 32, factor = 2}

[objectives]
latency_s = "min"
energy_j = "min"
"""


def write_spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def by_id(out_dir: Path) -> dict:
    with SweepStore(out_dir / sweep.STORE_NAME) as store:
        return {r["id"]: r for r in store.rows()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The SMALL sweep run serially once: the gold for every other way of running it."""
    base = tmp_path_factory.mktemp("clean")
    spec = write_spec(base, SMALL)
    summary = run_sweep(spec, base / "out", executor="serial")
    assert (summary.ran, summary.done, summary.failed, summary.skipped) == (6, 6, 0, 0)
    return spec, by_id(base / "out")


# ---- spec parsing and expansion ---------------------------------------------------------------

def test_expansion_order_ranges_zip_and_ids(tmp_path):
    text = """
[[workload]]
model = "resnet18"
image_size = 32
[[workload]]
model = "alexnet"
label = "alex"
[[axis]]
key = "chip.clock_mhz"
range = {start = 500, stop = 1000, step = 250}
[[axis]]
name = "shape"
keys = ["array.rows", "array.cols"]
values = [[16, 8], [32, 32]]
[[axis]]
key = "sram.ifmap.capacity_kib"
range = {start = 0.5, stop = 1.5, step = 0.5}
"""
    spec = load_spec(write_spec(tmp_path, text))
    points = expand(spec)
    # hand-listed: workloads outermost, last axis fastest; stop inclusive
    clocks, shapes, caps = [500, 750, 1000], [[16, 8], [32, 32]], [0.5, 1.0, 1.5]
    gold = [{"workload": w, "chip.clock_mhz": c, "shape": s, "sram.ifmap.capacity_kib": k}
            for w, c, s, k in itertools.product(["resnet18(image_size=32)", "alex"], clocks,
                                                shapes, caps)]
    assert [p.params for p in points] == gold
    assert [p.index for p in points] == list(range(36))
    # id = sha256 of the canonical JSON of the workload's parameters and the axis values
    p = points[4]
    identity = {"workload": {"model": "resnet18", "image_size": 32},
                "axes": {"chip.clock_mhz": 500, "shape": [32, 32],
                         "sram.ifmap.capacity_kib": 1.0}}
    assert p.params["shape"] == [32, 32] and p.params["sram.ifmap.capacity_kib"] == 1.0
    assert p.id == hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":"))
                                  .encode()).hexdigest()[:16]
    assert len({q.id for q in points}) == 36
    assert [q.id for q in expand(load_spec(write_spec(tmp_path, text, "b.toml")))] == \
        [q.id for q in points]
    job = sweep.point_job(spec, p)
    # typed overrides (issue 22): the point's values as they are, no --set text round trip
    assert job["overrides"] == [("chip.clock_mhz", 500), ("array.rows", 32), ("array.cols", 32),
                                ("sram.ifmap.capacity_kib", 1.0)]
    assert job["workload"] == {"model": "resnet18", "image_size": 32}
    assert load_chip_config(None, job["overrides"]).array.rows == 32


@pytest.mark.parametrize("rng, gold", [
    ({"start": 1, "stop": 10, "step": 3}, [1, 4, 7, 10]),
    ({"start": 1, "stop": 9, "step": 3}, [1, 4, 7]),
    ({"start": 10, "stop": 1, "step": -4}, [10, 6, 2]),
    ({"start": 0.1, "stop": 0.3, "step": 0.1}, [0.1, 0.2, 0.3]),
    ({"start": 8, "stop": 100, "factor": 2}, [8, 16, 32, 64]),
    ({"start": 64, "stop": 8, "factor": 0.5}, [64.0, 32.0, 16.0, 8.0]),
    ({"start": 1, "stop": 1000, "factor": 10}, [1, 10, 100, 1000]),
])
def test_ranges_are_inclusive(rng, gold):
    data = {"workload": [{"model": "resnet18"}], "axis": [{"key": "chip.clock_mhz",
                                                           "range": rng}]}
    spec = spec_from_dict(data, "r.toml")
    assert list(spec.axes[0].values) == gold
    assert [type(v) for v in spec.axes[0].values] == [type(v) for v in gold]


def test_zipped_range_and_workload_axis():
    data = {"workload": [{"model": "bert_base_layer", "seq_len": 16}],
            "axis": [{"keys": ["array.rows", "array.cols"], "range": {"start": 4, "stop": 16,
                                                                     "factor": 2}},
                     {"key": "workload.batch", "values": [1, 2]},
                     {"key": "run.loop_order", "values": ["mnk", "nkm"]}]}
    spec = spec_from_dict(data, "z.toml")
    points = expand(spec)
    assert len(points) == 3 * 2 * 2
    assert spec.axes[0].name == "array.rows+array.cols"
    assert spec.axes[0].values == ((4, 4), (8, 8), (16, 16))
    job = sweep.point_job(spec, points[-1])
    assert job["workload"] == {"model": "bert_base_layer", "seq_len": 16, "batch": 2}
    assert job["run"] == {"loop_order": "nkm"}
    assert job["overrides"] == [("array.rows", 16), ("array.cols", 16)]


BASE = {"workload": [{"model": "resnet18"}]}


@pytest.mark.parametrize("data, needles", [
    ({**BASE, "axes": []}, ["axes: unknown key", "allowed keys: sweep"]),
    ({**BASE, "sweep": {"kind": "rack"}}, ["sweep.kind = 'rack'", "chip, system"]),
    ({**BASE, "sweep": {"timing": "fast"}}, ["sweep.timing = 'fast'", "native"]),
    ({**BASE, "sweep": {"tech": "3nm"}}, ["sweep.tech", "3nm"]),
    ({"workload": [{"model": "resnet99"}]}, ["workload[0].model = 'resnet99'", "resnet50"]),
    ({"workload": [{"model": "resnet18", "seq_len": 4}]}, ["workload[0].seq_len: unknown key",
                                                           "image_size"]),
    ({"workload": [{"model": "resnet18"}, {"model": "resnet18"}]}, ["workload[1].label",
                                                                    "unique"]),
    ({}, ["[[workload]]: missing"]),
    ({**BASE, "base": {"config": "tpu_v2"}}, ["base.config = 'tpu_v2'", "tpu_v1_like"]),
    ({**BASE, "base": {"set": ["array.rows=0"]}}, ["[base]", "array.rows"]),
    ({**BASE, "run": {"loop_ordr": "mnk"}}, ["[run]", "loop_ordr", "conv_lowering"]),
    ({**BASE, "run": {"loop_order": "xyz"}}, ["[run]", "'xyz'"]),
    ({**BASE, "axis": [{"key": "array.row", "values": [1]}]}, ["axis[0].key = 'array.row'",
                                                              "not a chip config key"]),
    ({**BASE, "axis": [{"key": "workload.seq_len", "values": [1]}]},
     ["axis[0].key = 'workload.seq_len'", "takes no 'seq_len'"]),
    ({**BASE, "axis": [{"key": "array.rows"}]}, ["axis[0]", "exactly one of values"]),
    ({**BASE, "axis": [{"key": "array.rows", "range": {"start": 1, "stop": 8}}]},
     ["axis[0].range", "start, stop and step"]),
    ({**BASE, "axis": [{"key": "array.rows", "range": {"start": 8, "stop": 1, "step": 1}}]},
     ["axis[0].range.step = 1", "from start = 8 to stop = 1"]),
    ({**BASE, "axis": [{"key": "array.rows", "range": {"start": 1, "stop": 8, "factor": 1}}]},
     ["axis[0].range.factor = 1"]),
    ({**BASE, "axis": [{"keys": ["array.rows", "array.cols"], "values": [[8, 8], [16]]}]},
     ["axis[0].values = [16]", "list of 2 scalars"]),
    ({**BASE, "axis": [{"key": "array.rows", "values": [8, 8]}]}, ["axis[0].values = 8",
                                                                 "appears twice"]),
    ({**BASE, "axis": [{"key": "array.rows", "values": [8]},
                       {"key": "array.rows", "values": [16]}]}, ["axis[1].key = 'array.rows'",
                                                                 "already varied"]),
    ({**BASE, "objectives": {"speed": "max"}}, ["objectives = 'speed'", "latency_s"]),
    ({**BASE, "objectives": {"latency_s": "low"}}, ["objectives.latency_s = 'low'",
                                                    "min or max"]),
    ({**BASE, "constraints": {"area_mm2": "< big"}}, ["constraints.area_mm2 = '< big'",
                                                      "OP NUMBER"]),
    ({**BASE, "sweep": {"kind": "system"}, "run": {}}, ["[run]", "chip"]),
    ({"sweep": {"kind": "system"}, "workload": [{"model": "gpt2-small"}],
      "axis": [{"key": "array.rows", "values": [8]}]}, ["axis[0].key = 'array.rows'",
                                                        "not a system sweep key"]),
    ({"sweep": {"kind": "system"}, "workload": [{"model": "gpt2-small"}],
      "base": {"system": "ring:x"}}, ["[base]", "ring:x"]),
])
def test_spec_errors_name_file_key_and_value(data, needles):
    with pytest.raises(ConfigError) as info:
        spec_from_dict(data, "my_sweep.toml")
    message = str(info.value)
    assert message.startswith("my_sweep.toml: ")
    assert "\n" not in message
    for needle in needles:
        assert needle in message


def test_spec_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such sweep spec"):
        load_spec(tmp_path / "missing.toml")
    bad = write_spec(tmp_path, "[sweep\n", "bad.toml")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_spec(bad)
    with pytest.raises(ConfigError, match="no such file or shipped sweep; shipped sweeps: "):
        load_spec("no_such_sweep")


def test_shipped_examples_parse():
    names = sweep.sweep_names()
    assert {"resnet50_shapes", "sram_dram_gpt2", "gpt2_chips_strategy"} <= set(names)
    counts = {name: len(expand(load_spec(name))) for name in names}
    assert counts["resnet50_shapes"] == 15
    assert counts["sram_dram_gpt2"] == 20
    assert counts["gpt2_chips_strategy"] == 20


# ---- running: results, executors, resume ------------------------------------------------------

def _gold_metrics(dataflow: str, rows: int) -> dict:
    chip = load_chip_config(None, [f"array.dataflow={dataflow}", f"array.rows={rows}",
                                   f"array.cols={rows}"])
    run = simulate(zoo.get("resnet18", image_size=32), chip, "native")
    m = compute_metrics(run, "16nm")
    return {"cycles": m.network["cycles"], "latency_s": m.network["seconds"],
            "energy_j": m.network["energy_j"], "area_mm2": m.chip["area_total_mm2"],
            "power_w": m.network["average_power_w"], "tops_per_w": m.network["tops_per_w"],
            "dram_bytes": run.totals["dram_read_bytes"] + run.totals["dram_write_bytes"]}


def test_serial_results_equal_direct_simulation(clean):
    _, rows = clean
    assert len(rows) == 6
    for r in rows.values():
        assert r["status"] == "done" and r["attempts"] == 1 and r["error"] is None
        df, (n, _) = r["params"]["array.dataflow"], r["params"]["shape"]
        gold = _gold_metrics(df, n)
        assert {k: r["metrics"][k] for k in gold} == gold
        assert set(r["metrics"]) == set(sweep.CHIP_METRICS)
        assert r["metrics"]["edp_js"] == gold["energy_j"] * gold["latency_s"]


def test_local_pool_and_a_repeat_give_identical_results(clean, tmp_path):
    spec, gold = clean
    a = run_sweep(spec, tmp_path / "local", executor="local", jobs=2)
    assert (a.ran, a.done, a.failed) == (6, 6, 0)
    rows = by_id(tmp_path / "local")
    assert {k: r["metrics"] for k, r in rows.items()} == {k: r["metrics"] for k, r in gold.items()}
    assert len({r["worker"] for r in rows.values()}) >= 1
    b = run_sweep(spec, tmp_path / "serial2", executor="serial")
    assert b.done == 6
    assert {k: r["metrics"] for k, r in by_id(tmp_path / "serial2").items()} == \
        {k: r["metrics"] for k, r in gold.items()}


def _done_count(db: Path) -> int:
    if not db.is_file():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM points WHERE status = 'done'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


def test_sigkill_mid_way_then_resume_completes_every_point_once(clean, tmp_path):
    spec, gold = clean
    out = tmp_path / "killed"
    db = out / sweep.STORE_NAME
    proc = subprocess.Popen([sys.executable, "-m", "npulab", "sweep", str(spec), "-o", str(out),
                             "--jobs", "2", "--quiet"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _done_count(db) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the sweep did not store 2 points in 120 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)     # the parent and its pool workers
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    before = by_id(out)
    done_before = {k for k, r in before.items() if r["status"] == "done"}
    assert 2 <= len(done_before) < 6, "killed too late to test a resume"
    with pytest.raises(SweepError, match="holds a sweep; pass --resume"):
        run_sweep(spec, out, executor="serial")
    summary = run_sweep(spec, out, executor="local", jobs=2, resume=True)
    assert summary.skipped == len(done_before)
    assert summary.ran == 6 - len(done_before) and summary.failed == 0
    after = by_id(out)
    con = sqlite3.connect(db)
    ids = [row[0] for row in con.execute("SELECT id FROM points")]
    con.close()
    assert sorted(ids) == sorted(gold)              # every point exactly once
    assert all(r["status"] == "done" for r in after.values())
    assert {k: r["metrics"] for k, r in after.items()} == {k: r["metrics"] for k, r in
                                                           gold.items()}
    for k in done_before:                           # stored results were not run again
        assert after[k]["attempts"] == 1 and after[k]["worker"] == before[k]["worker"]
    again = run_sweep(spec, out, executor="serial", resume=True)
    assert (again.ran, again.skipped) == (0, 6)


FAILING = """
[[workload]]
model = "resnet18"
image_size = 32
[[axis]]
key = "sram.ifmap.capacity_kib"
values = [512, 0.125, 0.0625]
"""


@pytest.mark.parametrize("executor", ["serial", "local"])
def test_a_point_that_raises_is_stored_failed_with_its_message(tmp_path, executor):
    spec = write_spec(tmp_path, FAILING)
    s = run_sweep(spec, tmp_path / "out", executor=executor, jobs=2)
    assert (s.ran, s.done, s.failed) == (3, 1, 2)
    rows = {r["params"]["sram.ifmap.capacity_kib"]: r for r in by_id(tmp_path / "out").values()}
    assert rows[512]["status"] == "done" and rows[512]["metrics"]["cycles"] > 0
    # an SRAM too small for any tiling (the compiler's TilingError)
    assert rows[0.125]["status"] == "failed" and rows[0.125]["metrics"] is None
    assert rows[0.125]["error"].startswith("TilingError: conv1: no tiling fits the scratchpads")
    # a bad override value (the config's own error)
    assert rows[0.0625]["error"].startswith("ConfigError: ")
    assert "sram.ifmap.capacity_kib = 0.0625: must be a whole number of bank rows" in \
        rows[0.0625]["error"]
    # --resume skips failed points, --retry-failed runs them again
    r = run_sweep(spec, tmp_path / "out", executor="serial", resume=True)
    assert (r.ran, r.skipped) == (0, 3)
    r = run_sweep(spec, tmp_path / "out", executor="serial", retry_failed=True)
    assert (r.ran, r.failed, r.skipped) == (2, 2, 1)
    assert rows[0.125]["id"] in by_id(tmp_path / "out")
    assert by_id(tmp_path / "out")[rows[0.125]["id"]]["attempts"] == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs fork")
def test_a_dying_worker_loses_no_other_point(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, """
[sweep]
timing = "compute"
[[workload]]
model = "resnet18"
image_size = 32
[[axis]]
key = "array.rows"
values = [4, 8, 12, 16, 20, 24]
""")
    from npulab.sweep import evaluation
    real = evaluation.evaluate

    def dies_on_12(job):        # the forked workers inherit this patch
        if ("array.rows", 12) in job["overrides"]:
            os._exit(7)
        return real(job)

    monkeypatch.setattr(evaluation, "evaluate", dies_on_12)     # run_job looks it up there
    s = run_sweep(spec, tmp_path / "out", executor="local", jobs=2)
    assert (s.ran, s.done, s.failed) == (6, 5, 1)
    rows = {r["params"]["array.rows"]: r for r in by_id(tmp_path / "out").values()}
    assert rows[12]["status"] == "failed"
    assert rows[12]["error"].startswith("WorkerDied: the worker process running this point died")
    for n in (4, 8, 16, 20, 24):
        gold = simulate(zoo.get("resnet18", image_size=32),
                        load_chip_config(None, [f"array.rows={n}"]), "compute")
        assert rows[n]["status"] == "done"
        assert rows[n]["metrics"]["cycles"] == gold.totals["cycles"]


def test_resume_with_a_changed_design_is_an_error(clean, tmp_path):
    spec, _ = clean
    out = tmp_path / "out"
    small = SMALL.replace('values = ["os", "ws"]', 'values = ["os"]')
    run_sweep(write_spec(tmp_path, small, "one.toml"), out, executor="serial")
    with pytest.raises(SweepError, match="the design .* differs from the sweep in"):
        run_sweep(spec, out, executor="serial", resume=True)
    # objectives may change on resume
    changed = small.replace('energy_j = "min"', 'power_w = "min"')
    s = run_sweep(write_spec(tmp_path, changed, "two.toml"), out, executor="serial", resume=True)
    assert (s.ran, s.skipped) == (0, 3)
    with SweepStore(out / sweep.STORE_NAME) as store:
        assert store.meta()["spec"]["objectives"] == [["latency_s", "min"], ["power_w", "min"]]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    with pytest.raises(SweepError, match="is not empty"):
        run_sweep(spec, tmp_path / "junk", executor="serial")
    with pytest.raises(SweepError, match="no sweep.sqlite there"):
        run_sweep(spec, tmp_path / "junk", executor="serial", resume=True)


def test_system_sweep_equals_direct_plans(tmp_path):
    from hw.system.system import load_system
    from npulab.system_run import plan, resolve_model
    spec = write_spec(tmp_path, """
[sweep]
kind = "system"
[base]
system = "switch:{chips}"
comm = "analytic"
[[workload]]
model = "gpt2-small"
global_batch = 16
[[axis]]
key = "chips"
values = [2, 4]
[[axis]]
key = "strategy"
values = ["dp={chips}", "tp={chips}", "dp={chips/4},tp=4"]
[objectives]
step_s = "min"
ranks = "min"
""")
    s = run_sweep(spec, tmp_path / "out", executor="serial")
    assert (s.ran, s.done, s.failed) == (6, 5, 1)
    for r in by_id(tmp_path / "out").values():
        chips, strategy = r["params"]["chips"], r["params"]["strategy"]
        if chips == 2 and strategy == "dp={chips/4},tp=4":
            assert r["error"] == ("ValueError: strategy = 'dp={chips/4},tp=4': chips = 2 is not "
                                  "divisible by 4")
            continue
        text = strategy.replace("{chips}", str(chips)).replace("{chips/4}", str(chips // 4))
        gold = plan(load_system(f"switch:{chips}"), resolve_model("gpt2-small", global_batch=16),
                    text, comm_mode="analytic")
        m = r["metrics"]
        assert m["step_s"] == gold.report.step_s
        assert m["scaling_efficiency"] == gold.scaling_efficiency
        assert m["ranks"] == chips and m["memory_gb"] == gold.report.memory["total"] / 1e9


# ---- Pareto front and report ------------------------------------------------------------------

def _brute_front(values, directions):
    sign = [1 if d == "min" else -1 for d in directions]
    out = []
    for i, v in enumerate(values):
        if any(x is None for x in v):
            continue
        dominated = False
        for j, w in enumerate(values):
            if j == i or any(x is None for x in w):
                continue
            if all(s * a <= s * b for s, a, b in zip(sign, w, v)) and \
                    any(s * a < s * b for s, a, b in zip(sign, w, v)):
                dominated = True
        if not dominated:
            out.append(i)
    return out


def test_pareto_front_constructed_case():
    # (latency min, throughput max): hand-worked front
    values = [(1.0, 10.0),   # 0 front: fastest
              (2.0, 30.0),   # 1 front
              (2.0, 30.0),   # 2 tie with 1: kept
              (2.0, 20.0),   # 3 dominated by 1
              (3.0, 30.0),   # 4 dominated by 1 (same throughput, slower)
              (4.0, 40.0),   # 5 front: highest throughput
              (None, 99.0),  # 6 missing value: never on the front
              (1.0, 5.0)]    # 7 dominated by 0
    assert pareto_front(values, ["min", "max"]) == [0, 1, 2, 5]
    assert pareto_front(values, ["min", "max"]) == _brute_front(values, ["min", "max"])
    assert pareto_front([(3.0,), (1.0,), (1.0,)], ["min"]) == [1, 2]
    assert pareto_front([], ["min"]) == []


def test_pareto_front_matches_brute_force_on_random_points():
    import random
    rng = random.Random(9)
    for trial in range(30):
        k = rng.choice([2, 3])
        values = [tuple(float(rng.randint(0, 5)) for _ in range(k)) for _ in range(25)]
        dirs = [rng.choice(["min", "max"]) for _ in range(k)]
        assert pareto_front(values, dirs) == _brute_front(values, dirs)


def _fake_store(out: Path, info: dict, rows: list[tuple]) -> None:
    out.mkdir()
    with SweepStore(out / sweep.STORE_NAME) as store:
        store.set_meta(schema=sweep.SCHEMA, design_hash="x", spec=info, spec_path="fake.toml")
        store.add_points(DesignPoint(i, f"p{i}", params) for i, (params, _, _) in
                         enumerate(rows))
        for i, (_, status, metrics) in enumerate(rows):
            store.record({"id": f"p{i}", "status": status, "metrics": metrics,
                          "error": None if status == "done" else "ValueError: boom",
                          "elapsed_s": 0.5, "worker": "w:1"})


def test_report_front_per_workload_with_constraints_and_csv_matches_store(tmp_path):
    info = {"name": "fake", "kind": "chip", "description": "", "workloads": ["a", "b"],
            "axes": [{"name": "array.rows", "keys": ["array.rows"]},
                     {"name": "shape", "keys": ["x", "y"]}],
            "objectives": [["latency_s", "min"], ["energy_j", "min"]],
            "constraints": [["area_mm2", "<=", 2.0]], "metrics": list(sweep.CHIP_METRICS)}

    def m(lat, en, area):
        return {"latency_s": lat, "energy_j": en, "area_mm2": area}
    rows = [({"workload": "a", "array.rows": 8, "shape": [1, 2]}, "done", m(1.0, 5.0, 1.0)),
            ({"workload": "a", "array.rows": 16, "shape": [1, 2]}, "done", m(2.0, 2.0, 1.5)),
            ({"workload": "a", "array.rows": 32, "shape": [1, 2]}, "done", m(0.5, 1.0, 3.0)),
            ({"workload": "a", "array.rows": 8, "shape": [3, 4]}, "done", m(3.0, 3.0, 1.0)),
            ({"workload": "a", "array.rows": 16, "shape": [3, 4]}, "failed", None),
            ({"workload": "b", "array.rows": 8, "shape": [1, 2]}, "done", m(9.0, 9.0, 1.0)),
            ({"workload": "b", "array.rows": 16, "shape": [1, 2]}, "done", m(9.0, 9.0, 2.0))]
    out = tmp_path / "rep"
    _fake_store(out, info, rows)
    paths = write_report(out)
    names = sorted(p.name for p in paths)
    assert names == sorted(["points.csv", "pareto.csv", "pareto_a.png", "pareto_b.png",
                            "heatmap_a.png", "heatmap_b.png", "sensitivity_a.png",
                            "sensitivity_b.png"])
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(out / "pareto.csv", newline="", encoding="utf-8") as fh:
        front = list(csv.DictReader(fh))
    # a: p2 is fastest and cheapest but infeasible (area 3 > 2); p0 and p1 trade off; p3 is
    # dominated by p1. b: p5 and p6 tie (both kept; area 2.0 <= 2.0 is feasible).
    assert [r["id"] for r in front] == ["p0", "p1", "p5", "p6"]
    with open(out / "points.csv", newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert [r["id"] for r in table] == [f"p{i}" for i in range(7)]
    with SweepStore(out / sweep.STORE_NAME) as store:
        stored = store.rows()
    for row, s in zip(table, stored):
        assert row["status"] == s["status"] and row["workload"] == s["params"]["workload"]
        assert int(row["array.rows"]) == s["params"]["array.rows"]
        assert [int(row["x"]), int(row["y"])] == s["params"]["shape"]
        for key in sweep.CHIP_METRICS:
            value = (s["metrics"] or {}).get(key)
            assert row[key] == ("" if value is None else repr(value))
        assert row["error"] == (s["error"] or "")
    assert [r["feasible"] for r in table] == ["true", "true", "false", "true", "false", "true",
                                              "true"]
    with pytest.raises(SweepError, match="'z' is not an axis; axes: array.rows, shape"):
        write_report(out, heatmap=("array.rows", "z"))
    with pytest.raises(SweepError, match="--objective speed: unknown metric"):
        write_report(out, objective="speed")


# ---- CLI --------------------------------------------------------------------------------------

def test_cli_runs_and_reports(clean, tmp_path, capsys):
    spec, gold = clean
    out = tmp_path / "cli"
    assert main(["sweep", str(spec), "-o", str(out), "--executor", "serial", "--report"]) == 0
    err = capsys.readouterr().err
    assert "npulab sweep: 6 run (6 done, 0 failed), 0 skipped" in err
    assert "wrote points.csv, pareto.csv, pareto.png, heatmap.png, sensitivity.png" in err
    assert {k: r["metrics"] for k, r in by_id(out).items()} == \
        {k: r["metrics"] for k, r in gold.items()}
    assert (out / "spec.toml").read_text() == spec.read_text()
    assert main(["sweep", "report", str(out), "--heatmap", "shape,array.dataflow",
                 "--objective", "energy_j"]) == 0
    assert "wrote points.csv" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["sweep", "report"], "sweep report: missing DIR"),
    (["sweep", "report", "d", "--resume"], "--resume applies to running a sweep"),
    (["sweep", "SPEC", "extra"], "unexpected argument 'extra'"),
    (["sweep", "SPEC", "--heatmap", "a,b"], "--heatmap applies to the report"),
    (["sweep", "SPEC", "--address", "x:1"], "--address applies to --executor ray"),
    (["sweep", "no_such_sweep"], "'no_such_sweep': no such file or shipped sweep"),
    (["sweep", "SPEC", "--jobs", "0"], "--jobs 0: must be >= 1"),
    (["sweep", "report", "NODIR"], "no sweep.sqlite"),
])
def test_cli_errors_are_one_line(clean, tmp_path, capsys, argv, needle):
    spec, _ = clean
    argv = [str(spec) if a == "SPEC" else str(tmp_path / "nodir") if a == "NODIR" else a
            for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npulab: error: ") and "\n" not in err
    assert needle in err


def test_cli_refuses_a_non_empty_dir(clean, tmp_path, capsys):
    spec, _ = clean
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    assert main(["sweep", str(spec), "-o", str(tmp_path / "busy")]) == 2
    err = capsys.readouterr().err
    assert "busy: is not empty; pass --resume" in err


def test_ray_executor_without_ray_is_a_clear_error(clean, tmp_path, monkeypatch, capsys):
    spec, _ = clean
    monkeypatch.setitem(sys.modules, "ray", None)       # import ray -> ImportError
    with pytest.raises(SweepError, match=r"install it with pip install 'npulab\[ray\]'"):
        run_sweep(spec, tmp_path / "out", executor="ray")
    assert not (tmp_path / "out").exists()              # checked before anything is created
    assert main(["sweep", str(spec), "-o", str(tmp_path / "o"), "--executor", "ray"]) == 2
    assert "--executor ray needs the ray package" in capsys.readouterr().err


def test_limit_runs_the_first_due_points_and_resume_runs_the_rest(tmp_path):
    spec = write_spec(tmp_path, """
[sweep]
timing = "compute"
[[workload]]
model = "resnet18"
image_size = 32
[[axis]]
key = "array.rows"
range = {start = 4, stop = 24, step = 4}
""")
    s = run_sweep(spec, tmp_path / "out", executor="serial", limit=2)
    assert (s.ran, s.skipped, s.stored_done) == (2, 0, 2)
    rows = sorted(by_id(tmp_path / "out").values(), key=lambda r: r["index"])
    assert [r["status"] for r in rows] == ["done"] * 2 + ["pending"] * 4
    s = run_sweep(spec, tmp_path / "out", executor="serial", resume=True, limit=3)
    assert (s.ran, s.skipped, s.stored_done) == (3, 2, 5)
    s = run_sweep(spec, tmp_path / "out", executor="serial", resume=True)
    assert (s.ran, s.skipped, s.stored_done) == (1, 5, 6)
    for r in by_id(tmp_path / "out").values():
        gold = simulate(zoo.get("resnet18", image_size=32),
                        load_chip_config(None, [f"array.rows={r['params']['array.rows']}"]),
                        "compute")
        assert r["attempts"] == 1 and r["metrics"]["cycles"] == gold.totals["cycles"]
    with pytest.raises(ValueError, match="limit = 0: must be an integer >= 1"):
        run_sweep(spec, tmp_path / "out", executor="serial", resume=True, limit=0)


# ---- one writer per directory (npulab.sweep.lock), damaged stores, huge specs -------------------

_HOLD = ("import sys, time\n"
         "from npulab.sweep.lock import SweepLock\n"
         "SweepLock(sys.argv[1]).acquire()\n"
         "print('locked', flush=True)\n"
         "time.sleep(120)\n")


def _holder(out: Path) -> subprocess.Popen:
    """Another process that holds the lock of ``out`` until it is killed."""
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(sweep.__file__).parents[2])})
    line = proc.stdout.readline()
    assert line == "locked\n", proc.stderr.read()
    return proc


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def test_a_second_sweep_on_a_locked_dir_names_the_holder_and_a_killed_holder_frees_it(
        clean, tmp_path):
    from npulab.sweep.lock import SweepLock
    spec, _ = clean
    out = tmp_path / "shared"
    holder = _holder(out)
    try:
        second = subprocess.run([sys.executable, "-m", "npulab", "sweep", str(spec), "-o",
                                 str(out), "--resume", "--quiet", "--executor", "serial"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr
        err = second.stderr.strip()
        assert "\n" not in err and err.startswith("npulab: error: ")
        assert f"{out}: another sweep is running there (pid {holder.pid} on " \
               f"{socket.gethostname()}, started " in err
        assert "pass --wait" in err
        assert not (out / sweep.STORE_NAME).exists()      # it ran nothing, stored nothing
        with pytest.raises(SweepError, match=f"pid {holder.pid}"):
            run_sweep(spec, out, executor="serial", resume=True)
    finally:
        _kill(holder)                      # SIGKILL: the OS drops the lock with the process
    with SweepLock(out) as lock:
        assert json.loads((out / "sweep.lock").read_text())["pid"] == os.getpid()
    assert lock.fd is None


def test_wait_starts_when_the_holder_ends_and_runs_only_what_is_left(clean, tmp_path):
    import shutil
    import threading
    spec, gold = clean
    out = tmp_path / "copy"
    shutil.copytree(spec.parent / "out", out)
    holder = _holder(out)
    notes = []
    timer = threading.Timer(1.0, holder.send_signal, (signal.SIGKILL,))
    timer.start()
    try:
        summary = run_sweep(spec, out, executor="serial", resume=True, wait=True,
                            notice=notes.append)
    finally:
        timer.cancel()
        _kill(holder)
    assert len(notes) == 1 and f"is in use (pid {holder.pid} on" in notes[0]
    assert (summary.ran, summary.skipped) == (0, 6)


def test_a_fresh_sweep_ignores_its_own_lock_file(clean, tmp_path):
    spec, _ = clean
    out = tmp_path / "fresh"
    out.mkdir()
    (out / "sweep.lock").write_text("")      # left by an earlier, killed attempt
    summary = run_sweep(spec, out, executor="serial", limit=1)
    assert summary.ran == 1


@pytest.mark.parametrize("damage", ["garbage", "torn"])
def test_a_damaged_store_is_one_line_naming_the_file(clean, tmp_path, capsys, damage):
    import shutil
    spec, _ = clean
    out = tmp_path / "damaged"
    shutil.copytree(spec.parent / "out", out)
    db = out / sweep.STORE_NAME
    if damage == "garbage":
        db.write_bytes(b"\xffnot a database\n" * 512)
    else:                                   # a valid header, the pages after it overwritten
        data = bytearray(db.read_bytes())
        data[100:] = b"\xa5" * (len(data) - 100)
        db.write_bytes(bytes(data))
    for argv in (["sweep", "report", str(out)],
                 ["sweep", str(spec), "-o", str(out), "--resume", "--executor", "serial"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"npulab: error: {db}: damaged or not a sweep store (")
        assert "\n" not in err and "run the sweep again into a new -o DIR" in err
    with pytest.raises(SweepError, match="damaged or not a sweep store"):
        sweep.load_results(out)


@pytest.mark.parametrize("axes, count", [
    ("[[axis]]\nkey = \"chip.clock_mhz\"\nrange = {start = 1, stop = 40000000, step = 1}\n",
     "40,000,000"),
    ("[[axis]]\nkey = \"chip.clock_mhz\"\nrange = {start = 1, stop = 8000000, step = 1}\n"
     "[[axis]]\nkey = \"array.rows\"\nrange = {start = 1, stop = 8, step = 1}\n", "64,000,000"),
])
def test_too_many_points_are_counted_not_expanded(tmp_path, axes, count):
    """Refused from the axis sizes alone: the peak memory stays far below one value list."""
    import tracemalloc
    path = write_spec(tmp_path, "[[workload]]\nmodel = \"resnet18\"\n" + axes)
    load_spec(write_spec(tmp_path, "[[workload]]\nmodel = \"resnet18\"\n", "warm.toml"))
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=f"{count} design points: at most 10,000,000"):
            load_spec(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, f"{peak / 1e6:.0f} MB to refuse the spec"
