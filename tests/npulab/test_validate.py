"""npulab validate: measurements CSV in, error table out (npulab.validate, npulab.cli.validate)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given, settings, strategies as st

from compiler.frontends.opspec import parse_op
from compiler.ir import Graph
from hw.errors import ConfigError
from npulab.cli import main
from npulab.pipeline import RunOptions, run
from npulab.validate import (
    Measurement, Prediction, family_errors, fit_launch_overhead, read_measurements, validate,
    with_launch_overhead,
)

ROWS = 'family,op,latency_us,source\nmatmul,"gemm:64,64,64",10.0,x\nsoftmax,"softmax:16,64",2.0,y\n'


def _csv(tmp_path, text=ROWS):
    path = tmp_path / "m.csv"
    path.write_text(text)
    return path


def test_each_row_is_what_npulab_run_times_and_errors_are_relative(tmp_path):
    rows = read_measurements(_csv(tmp_path))
    assert [r.op for r in rows] == ["gemm:64,64,64", "softmax:16,64"] and rows[0].extra == {"source": "x"}
    preds = validate(rows, "default")
    for p in preds:
        op = parse_op(p.measured.op)
        direct = run(Graph(name=op.name, ops=(op,)), "default", RunOptions()).totals
        assert p.latency_us == pytest.approx(direct["latency_s"] * 1e6)
        assert p.cycles == direct["cycles"]
        assert p.error == pytest.approx(p.latency_us / p.measured.latency_us - 1)
    fam = family_errors(preds)
    assert fam["matmul"]["mean_abs_error"] == pytest.approx(abs(preds[0].error))


def test_the_cli_prints_the_same_numbers_in_every_format(tmp_path, capsys):
    path = _csv(tmp_path)
    assert main(["validate", str(path), "--format", "json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["validate", str(path), "--format", "csv", "-q"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [float(r["predicted_us"]) for r in rows] == [r["predicted_us"] for r in doc["rows"]]
    assert main(["validate", str(path), "-q"]) == 0
    table = capsys.readouterr().out
    assert f"{doc['rows'][0]['predicted_us']:.2f}" in table
    assert f"{100 * doc['families']['softmax']['mean_abs_error']:.1f}%" in table


@pytest.mark.parametrize("text, message", [
    ("op,latency_us\n", "line 1: no column family"),
    ('family,op,latency_us\nm,"gemm:1,2",5\n', "line 2: op = 'gemm:1,2'"),
    ('family,op,latency_us\nm,"gemm:1,2,3",-5\n', "line 2: latency_us = '-5': must be a number"),
    ('family,op,latency_us\nm,"gemm:1,2,3",nan\n', "latency_us = 'nan'"),
    ('family,op,latency_us\n,"gemm:1,2,3",5\n', "line 2: family = ''"),
    ("family,op,latency_us\n", "no measurement rows"),
])
def test_bad_rows_are_one_line_errors_naming_the_line(tmp_path, capsys, text, message):
    path = _csv(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_measurements(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npulab: error: ") and err.count("\n") == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 100), st.floats(1, 200)), min_size=1, max_size=8))
def test_the_fitted_overhead_minimises_the_mean_error(pairs):
    """Gold: a fine grid search of the mean absolute error over the overhead."""
    preds = [Prediction(Measurement("f", "gemm:1,1,1", m, i + 2), d + 5.0, 0, 5.0)
             for i, (d, m) in enumerate(pairs)]
    best = fit_launch_overhead(preds)["f"]
    fitted = family_errors(with_launch_overhead(preds, {"f": best}))["f"]["mean_abs_error"]

    def cost(o):
        return sum(abs((d + o) / m - 1) for d, m in pairs) / len(pairs)
    grid = min(cost(o / 10) for o in range(0, 3001))
    assert fitted <= grid + 1e-9 and best >= 0
