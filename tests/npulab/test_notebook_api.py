"""The notebook API: short reprs, HTML tables, to_pandas() equal to the CSVs the CLI writes,
figure-returning plots, and pandas kept optional (not imported by ``import npulab``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from compiler.frontends import zoo
from hw._notebook import PANDAS_MESSAGE
from hw.configfile import load_chip_config
from npulab.cli import main as cli_main
from npulab.simulate import simulate

pd = pytest.importorskip("pandas")

MODEL, SIZE = "resnet18", 32


def _read_csv(path):
    # pandas 3 parses floats round-trip by default; pandas 2 needs it asked for
    if int(pd.__version__.split(".")[0]) < 3:
        return pd.read_csv(path, float_precision="round_trip")
    return pd.read_csv(path)


@pytest.fixture(scope="module")
def run():
    return simulate(zoo.get(MODEL, image_size=SIZE), load_chip_config())


@pytest.fixture(scope="module")
def metrics(run):
    return run.metrics()


def test_run_to_pandas_equals_the_cli_layers_csv(run, metrics, tmp_path, capsys):
    assert cli_main(["run", "--model", MODEL, "--image-size", str(SIZE), "-q",
                     "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    csv = _read_csv(tmp_path / "layers.csv")
    df = run.to_pandas(metrics)
    # same columns, same values; integer columns with blanks are nullable Int64 here, float in
    # read_csv's inference
    pd.testing.assert_frame_equal(df, csv, check_dtype=False)
    # read with the frame's dtypes, the CSV gives the frame back exactly
    typed = pd.read_csv(tmp_path / "layers.csv", dtype=df.dtypes.to_dict())
    pd.testing.assert_frame_equal(df, typed)
    assert len(df) == len(run.layers)
    # every resnet18 op ran, alone or in a fused group: blank cycles only for fused ops
    assert df["macs"].dtype == "int64"
    assert df["cycles"].isna().sum() == (df["engine"] == "fused").sum() == 10
    # without metrics: the LayerResult columns only, summing to the run's totals
    plain = run.to_pandas()
    assert list(plain.columns) == list(df.columns[:len(plain.columns)])
    assert int(plain["cycles"].sum()) == run.totals["cycles"]
    assert int(plain["macs"].sum()) == run.totals["macs"]


def test_metrics_to_pandas_matches_the_metrics(metrics):
    df = metrics.to_pandas()
    assert len(df) == metrics.network["layers_costed"]
    assert (df["energy_uj"].sum() + (metrics.network["energy_breakdown_j"]["static"] * 1e6
                                     - df["energy_static_uj"].sum())) == pytest.approx(
        metrics.network["energy_j"] * 1e6, rel=1e-12)
    parts = [c for c in df.columns if c.startswith("energy_") and c.endswith("_uj")
             and c != "energy_uj"]
    assert np.allclose(df[parts].sum(axis=1), df["energy_uj"], rtol=1e-12, atol=0)
    # roofline bound: the ceiling with the lowest attainable MACs/s (hand-computed per layer)
    for m, row in zip(metrics.layers, df.itertuples()):
        ceilings = m["roofline"]["ceilings_macs_per_s"]
        if m["macs"]:
            assert row.roofline_bound == min(ceilings, key=ceilings.get)
        else:   # the vector engine's layers have no MACs: no place on a MAC roofline
            assert pd.isna(row.roofline_bound)


def test_reprs_are_short_and_state_the_headline(run, metrics):
    text = repr(run)
    assert len(text.splitlines()) <= 12
    assert f"{run.totals['cycles']:,}" in text and MODEL in text and run.chip in text
    assert "actions" not in text            # not a dump of the dataclass
    m = repr(metrics)
    assert len(m.splitlines()) <= 12 and "TOPS/W" in m
    layer = next(x for x in run.layers if x.cycles)
    assert repr(layer).count("\n") == 0 and f"{layer.cycles:,} cycles" in repr(layer)
    html = run._repr_html_()
    assert html.count("<tr>") == 1 + min(10, len(run.layers))   # header + head rows
    assert "<script" not in html


def test_plots_return_figures_with_one_mark_per_layer(run, metrics):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    roof = run.plot_roofline(metrics)
    assert isinstance(roof, Figure)
    points = [c for c in roof.axes[0].collections if (c.get_gid() or "").startswith("roofline-dram-")]
    placed = [m for m in metrics.layers if m["roofline"]["intensity_macs_per_byte"].get("dram")
              and m["macs_per_s"]]
    assert len(points) == len(placed) == sum(1 for m in metrics.layers if m["macs"])
    bars = run.plot_breakdown(metrics)
    ax = bars.axes[0]
    heights = {}
    for patch in ax.patches:
        heights[patch.get_x()] = heights.get(patch.get_x(), 0) + patch.get_height()
    # one stack per costed layer, each as tall as the layer's cycles
    assert sorted(heights.values()) == sorted(m["cycles"] for m in metrics.layers)
    assert isinstance(run.plot_energy(metrics), Figure)
    assert isinstance(run.plot_utilization(metrics), Figure)


def test_to_pandas_without_pandas_is_a_clear_import_error(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)     # import pandas -> ImportError
    with pytest.raises(ImportError) as err:
        run.to_pandas()
    assert str(err.value) == PANDAS_MESSAGE == "to_pandas() needs pandas: pip install 'npulab[pandas]'"


def test_importing_npulab_does_not_import_pandas():
    code = ("import sys, npulab, npulab.cli, npulab.sweep, npulab.metrics, npulab.system_run, "
            "compiler.mapper, hw.system.collectives, hw.memory.dram, hw.systolic.regmodel; "
            "assert 'pandas' not in sys.modules, 'pandas imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def _dominated(a, b):
    """b dominates a (both minimised)."""
    return all(y <= x for x, y in zip(a, b)) and any(y < x for x, y in zip(a, b))


def test_sweep_results_table_equals_points_csv_and_front(tmp_path):
    from npulab.sweep import load_results, run_sweep, spec_from_dict, write_report
    spec = spec_from_dict({
        "sweep": {"name": "nb", "kind": "chip", "timing": "compute"},
        "base": {"config": "default"},
        "workload": [{"model": MODEL, "image_size": SIZE}],
        "axis": [{"name": "shape", "keys": ["array.rows", "array.cols"],
                  "values": [[8, 8], [16, 16], [32, 32]]},
                 {"key": "array.dataflow", "values": ["os", "ws"]}],
        "objectives": {"latency_s": "min", "energy_j": "min"}})
    summary = run_sweep(spec, tmp_path / "s", executor="serial")
    write_report(tmp_path / "s")
    res = summary.results()
    df = res.to_pandas()
    csv = _read_csv(tmp_path / "s" / "points.csv")
    pd.testing.assert_frame_equal(df, csv)
    pd.testing.assert_frame_equal(res.to_pandas(pareto_only=True),
                                  _read_csv(tmp_path / "s" / "pareto.csv"))
    # the front, by brute force
    pts = list(zip(df["latency_s"], df["energy_j"]))
    front = [i for i, p in enumerate(pts) if not any(_dominated(p, q) for q in pts)]
    assert list(df.index[df["pareto"]]) == front
    assert res.best()["metrics"]["latency_s"] == df["latency_s"].min()
    text = repr(res)
    assert len(text.splitlines()) <= 12 and "6 points: 6 done" in text
    fig = res.plot_pareto()
    n = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
    assert n == len(df)
    assert load_results(tmp_path / "s").rows == res.rows


def test_map_result_table(tmp_path):
    from compiler.ir import conv2d
    from compiler.backends.systolic import tile_problem
    from compiler.options import CompileOptions
    from compiler.mapper import map_op
    from hw.chip import ChipConfig
    chip = ChipConfig()
    op = conv2d("c", 14, 32, 32, 3, padding=1)
    res = map_op(tile_problem(op, chip, CompileOptions()), chip, "edp")
    df = res.to_pandas()
    assert len(df) == len(res.ranked) and list(df["rank"]) == list(range(1, len(df) + 1))
    assert df.loc[0, "mapping"] == res.best.describe()
    # EDP = energy x latency (cycles over the clock), ranked by it
    assert np.allclose(df["edp_js"], df["energy_j"] * df["latency_cycles"] / chip.clock_hz,
                       rtol=1e-12)
    assert list(df["edp_js"]) == sorted(df["edp_js"])
    assert len(repr(res).splitlines()) <= 12 and f"{res.best.latency_cycles:,}" in repr(res)
    fig = res.plot()
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == len(df)


def test_multichip_collective_dram_and_register_results():
    from hw.memory.dram import DRAM_PRESETS, replay
    from hw.system.collectives import collective
    from hw.system.system import load_system
    from hw.system.topology import topology_from_spec
    from hw.systolic.config import ArrayConfig
    from hw.systolic.regmodel import run_gemm
    from npulab.system_run import plan

    p = plan(load_system("dgx-a100"), "gpt2-small", "dp=2,tp=2,pp=2", comm_mode="analytic")
    assert sum(p.report.breakdown().values()) == pytest.approx(p.report.step_s, rel=1e-9)
    stages = p.to_pandas()
    assert len(stages) == 2 and stages["total"].max() == p.report.memory["total"]
    assert len(repr(p).splitlines()) <= 12
    bars = p.plot_breakdown().axes[0].patches
    assert [b.get_width() for b in bars] == pytest.approx(
        [v * 1e3 for v in p.report.breakdown().values()])

    ring = topology_from_spec("ring:4")
    c = collective(ring, "allgather", 8 << 20, algorithm="direct", groups=[(0, 2), (1, 3)])
    g = c.to_pandas()
    assert list(g["group"]) == [0, 1] and g["time_s"].max() == c.time_s
    assert "allgather" in repr(c)

    issue = np.arange(50, dtype=np.int64) * 3
    rr = replay(DRAM_PRESETS["ddr4-3200"], np.arange(50) * 64, np.zeros(50, bool), issue)
    df = rr.to_pandas()
    assert list(df["issue_cycle"]) == list(issue)
    assert df["latency_cycles"].mean() == pytest.approx(rr.mean_latency_cycles)
    assert len(repr(rr).splitlines()) <= 12

    rng = np.random.default_rng(1)
    a, b = rng.integers(-128, 128, (12, 20)), rng.integers(-128, 128, (20, 9))
    reg = run_gemm(ArrayConfig(rows=4, cols=4), a, b)
    assert np.array_equal(reg.output[0] if reg.output.ndim == 3 else reg.output, a @ b)
    assert f"{reg.counters.cycles:,} cycles" in repr(reg) and "[[" not in repr(reg)


def test_nvdla_run_repr_and_table():
    from hw.nvdla.config import load_nvdla_config
    from npulab.nvdla_run import simulate_nvdla
    from npulab.cli.common import resolve_config
    cfg = load_nvdla_config(resolve_config("nv_small"))
    run = simulate_nvdla(zoo.get(MODEL, image_size=SIZE), cfg)
    assert "NVDLA" in repr(run) and f"{run.totals['cycles']:,}" in repr(run)
    df = run.to_pandas(run.metrics())
    assert int(df["cycles"].sum()) == run.totals["cycles"]
