"""Where the shipped presets are found (hw/presets.py): ``sim_configs`` beside ``hw/presets.py``
in an installed copy (package data ``hw.sim_configs``), else the checkout's ``sim_configs/``;
never by looking for ``npulab``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from hw.presets import chip_preset_names, nvdla_preset_names, presets_dir

REPO = Path(__file__).resolve().parents[2]

_PROBE = textwrap.dedent("""
    import json, sys
    from hw.presets import chip_preset_names, nvdla_preset_names, presets_dir
    print(json.dumps({"dir": str(presets_dir()), "chips": chip_preset_names(),
                      "nvdla": nvdla_preset_names(), "npulab": "npulab" in sys.modules}))
""")


def test_presets_are_the_folder_that_ships_with_hw():
    here = presets_dir()
    assert here.is_dir() and (here / "default.toml").is_file()
    assert "default" in chip_preset_names() and "nv_small" in nvdla_preset_names()
    assert not any(name.startswith("nv_") for name in chip_preset_names())


def test_pyproject_installs_sim_configs_as_package_data_of_hw():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "hw.sim_configs" in setuptools["packages"]
    assert setuptools["package-dir"]["hw.sim_configs"] == "sim_configs"
    assert "*.toml" in setuptools["package-data"]["hw.sim_configs"]


def test_an_installed_layout_finds_the_presets_beside_hw(tmp_path):
    """site-packages/hw/sim_configs, as ``pip install`` lays it out, with no checkout around."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "hw", site / "hw", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "sim_configs", site / "hw" / "sim_configs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert Path(seen["dir"]) == site / "hw" / "sim_configs"
    assert seen["chips"] == chip_preset_names() and seen["nvdla"] == nvdla_preset_names()
    assert not seen["npulab"]
