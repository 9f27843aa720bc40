"""``npulab soc``: output, JSON keys, and clear errors (npulab/soc_cmd.py).

Gold: the JSON must carry what run_soc computed (recomputed here through hw.system.soc), and
the slowdown column is cycles shared / cycles alone of the same rows.
"""

from __future__ import annotations

import argparse
import json

import pytest

from compiler.frontends import zoo
from compiler.backends.systolic import compile_graph
from hw.chip import ChipConfig
from hw.systolic.config import ConfigError
from hw.system.soc import SocConfig, run_soc
from npulab.cli import soc as soc_cmd
from npulab.cli.common import UserError

SMALL = ["--model", "resnet18", "--image-size", "32"]


def _args(argv):
    parser = argparse.ArgumentParser(prog="npulab")
    sub = parser.add_subparsers(dest="command")
    soc_cmd.add_parser(sub)
    return parser.parse_args(["soc", *argv])


def test_json_matches_run_soc(capsys):
    assert soc_cmd.main(_args([*SMALL, "--format", "json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "name", "dram", "dram_peak_gbps", "accelerators", "makespan_s",
            "dram_bus_bytes", "dram_achieved_gbps", "dram_utilization", "dram_busy_s",
            "row_hits", "row_conflicts", "cpu"} <= set(out)
    assert out["model"] == "resnet18" and out["name"] == "2xnpulab-default"
    accs = out["accelerators"]
    assert len(accs) == 2
    assert set(accs[0]) >= {"cycles_alone", "cycles_shared", "slowdown", "dram_bus_bytes"}
    chip = ChipConfig()
    p = compile_graph(zoo.get("resnet18", image_size=32), chip)
    gold = run_soc(SocConfig(accelerators=(chip, chip)), [p, p]).to_dict()
    assert out["accelerators"] == gold["accelerators"]
    assert out["dram_achieved_gbps"] == gold["dram_achieved_gbps"]
    for a in accs:
        assert a["slowdown"] == a["cycles_shared"] / a["cycles_alone"] > 1.0


def test_table_output_and_cpu(capsys):
    assert soc_cmd.main(_args([*SMALL, "-n", "1", "--dram", "hbm2", "--cpu-copy-mb", "1"])) == 0
    text = capsys.readouterr().out
    assert "sharing one hbm2 DRAM (256.0 GB/s peak)" in text
    assert "slowdown" in text and "GB/s achieved" in text and "row buffer" in text
    assert "cpu          copy 1.0 MiB" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("0 ")]
    assert len(rows) == 1
    alone, shared = (int(x.replace(",", "")) for x in rows[0][2:4])
    assert rows[0][4] == f"{shared / alone:.3f}x"


def test_soc_file(tmp_path, capsys):
    path = tmp_path / "pair.toml"
    path.write_text('[soc]\nname = "pair"\n[[accelerator]]\nconfig = "default"\ncount = 2\n',
                    encoding="utf-8")
    assert soc_cmd.main(_args([*SMALL, "--soc", str(path), "--format", "json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "pair" and len(out["accelerators"]) == 2


def test_errors(tmp_path):
    with pytest.raises(UserError, match=r"--accelerators 0: must be an integer in 1..64"):
        soc_cmd.main(_args([*SMALL, "--accelerators", "0"]))
    with pytest.raises(UserError, match=r"--config nosuch: no such file or preset"):
        soc_cmd.main(_args([*SMALL, "--config", "nosuch"]))
    with pytest.raises(UserError, match=r"unknown model|nosuch_model"):
        soc_cmd.main(_args(["--model", "nosuch_model"]))
    with pytest.raises(UserError, match=r"--cpu-copy-mb 0: must be > 0"):
        soc_cmd.main(_args([*SMALL, "--cpu-copy-mb", "0"]))
    path = tmp_path / "s.toml"
    path.write_text("[[accelerator]]\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"--soc FILE gives the accelerators"):
        soc_cmd.main(_args([*SMALL, "--soc", str(path), "-n", "2"]))
    with pytest.raises(ConfigError, match=r"array.rows = 0"):
        soc_cmd.main(_args([*SMALL, "--set", "array.rows=0"]))
