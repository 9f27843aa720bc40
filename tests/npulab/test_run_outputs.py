"""`npulab run -o DIR`: the five files, their agreement with each other, and the energy options."""

import csv
import json

import pytest

from npulab.cli import main
from npulab.output import OUTPUT_FILES, SCHEMA, read_summary


def _run(capsys, *argv):
    status = main(["run", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_run_writes_every_output_and_they_agree(tmp_path, capsys):
    status, out, err = _run(capsys, "--model", "resnet18", "--image-size", "64", "-o",
                            str(tmp_path), "--tech", "45nm")
    assert status == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OUTPUT_FILES)
    assert "wrote summary.json, layers.csv, report.txt, report.html, trace.json" in err
    summary = read_summary(tmp_path)
    assert summary["schema"] == SCHEMA
    net = summary["metrics"]["network"]
    assert summary["metrics"]["technology"]["name"] == "45nm"
    # The table on stdout is report.txt and carries the energy lines.
    assert (tmp_path / "report.txt").read_text() == out
    assert f"{net['tops_per_w']:.3g} TOPS/W" in out
    # layers.csv: one row per op of the graph, metric columns filled for simulated layers.
    rows = list(csv.DictReader((tmp_path / "layers.csv").read_text().splitlines()))
    assert [r["name"] for r in rows] == [x["name"] for x in summary["run"]["layers"]]
    costed = [r for r in rows if r["energy_uj"]]
    # 21 on the array, the 10 vector ops fused into their layers
    assert len(costed) == net["layers_costed"] == 31 - summary["run"]["totals"]["layers_fused"]
    assert summary["run"]["totals"]["layers_fused"] == 10
    assert sum(float(r["energy_uj"]) for r in costed) == pytest.approx(1e6 * (
        net["energy_j"] - net["energy_breakdown_j"]["static"]
        + sum(x["energy_breakdown_j"]["static"] for x in summary["metrics"]["layers"])))
    for r in costed:
        parts = [float(v) for k, v in r.items() if k.startswith("energy_") and k.endswith("_uj")
                 and k != "energy_uj" and v]
        assert sum(parts) == pytest.approx(float(r["energy_uj"]))
    trace = json.loads((tmp_path / "trace.json").read_text())
    from npulab.timeline import validate_trace
    validate_trace(trace)
    html = (tmp_path / "report.html").read_text()
    assert "<html" in html and "resnet18" in html


def test_json_carries_the_metrics_and_quiet_is_quiet(tmp_path, capsys):
    status, out, err = _run(capsys, "--model", "resnet18", "--image-size", "32", "--timing",
                            "compute", "--format", "json", "-q", "-o", str(tmp_path))
    assert status == 0 and err == ""
    doc = json.loads(out)
    assert doc["metrics"]["network"]["energy_breakdown_j"]["dram"] == 0
    assert doc["metrics"]["technology"]["name"] == "16nm"         # the default table


@pytest.mark.parametrize("argv, message", [
    (["--tech", "3nm"], "technology = '3nm': not a shipped table (45nm, 16nm, 7nm)"),
    (["--tech", "missing.toml"], "missing.toml: no such energy table"),
    (["--dram-type", "sdram"], "invalid choice: 'sdram'"),
])
def test_bad_energy_options(capsys, argv, message):
    try:
        status = main(["run", "--model", "resnet18", "--image-size", "32", *argv])
    except SystemExit as exc:          # argparse's own errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and message in err


def test_dram_type_changes_only_dram_energy(capsys):
    docs = []
    for kind in ("ddr4", "hbm2"):
        status, out, _ = _run(capsys, "--config", "nv_small", "--model", "resnet18",
                              "--image-size", "64", "--format", "json", "--dram-type", kind)
        docs.append(json.loads(out)["metrics"]["network"]["energy_breakdown_j"])
    ddr4, hbm2 = docs
    assert hbm2["dram"] / ddr4["dram"] == pytest.approx(3.9 / 20.3)
    assert {k: v for k, v in ddr4.items() if k != "dram"} == \
        {k: v for k, v in hbm2.items() if k != "dram"}
