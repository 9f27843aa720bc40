"""``npulab run --map``: the run's tiling strings are the mapper's choices, bad uses are
one-line errors."""

from __future__ import annotations

import json

import pytest

from compiler.frontends import zoo
from compiler.backends.systolic import tile_problem
from compiler.options import CompileOptions
from compiler.mapper import map_op
from hw.configfile import load_chip_config
from npulab.cli import main

SETS = ["--set", "chip.model_input=dram", "--set", "chip.model_output=dram",
        "--set", "array.rows=16", "--set", "array.cols=16"]


def test_run_map_uses_the_mappers_tiling(capsys):
    args = ["run", "--model", "resnet18", "--image-size", "32", "--map", "best-edp",
            "--tech", "45nm", "--no-keep-on-chip", "--format", "json", "-q", *SETS]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    chip = load_chip_config(None, [s for s in SETS if s != "--set"])
    graph = zoo.get("resnet18", image_size=32)
    layers = {x["name"]: x for x in out["layers"]}
    checked = 0
    for op in graph.ops:
        if op.gemm_shape() is None:
            continue
        p = tile_problem(op, chip, CompileOptions())
        best = map_op(p, chip, "edp", tech="45nm").best
        expect = (f"{p.lowering} g{best.group_tile} m{best.m_tile} n{best.n_tile} "
                  f"k{best.k_tile} {best.order}")
        assert layers[op.name]["tiling"] == expect
        checked += 1
    assert checked == 21


def test_run_map_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--map", "fastest", "-q"])
    assert exc.value.code == 2
    assert "invalid choice: 'fastest'" in capsys.readouterr().err
    assert main(["run", "--map", "best-latency", "--timing", "compute", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npulab: error: --map applies to --timing native")
    assert main(["run", "--map", "best-energy", "--tech", "3nm", "-q", "--model", "resnet18",
                 "--image-size", "32"]) == 2
    assert "npulab: error:" in capsys.readouterr().err
