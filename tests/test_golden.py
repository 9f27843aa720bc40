"""Golden outputs: what users see stays byte-identical while the code is redesigned (issue 22).

``scripts/golden.py`` recorded the outputs of every zoo model on every shipped preset and
timing mode, the documented SCALE-Sim, system, collective, SoC and sweep examples, and the
Python API (``tests/golden/quick.json``, hashes of the bytes). This test runs a slice of those
cases that covers every preset, every timing mode (with and without ``--map best-energy``),
every zoo model, two NVDLA builds and each other command, and checks the bytes; the whole
set is ``python scripts/golden.py check --no-html`` (under 3 minutes; the ``full`` suite, at the models'
default inputs, by hand). A failure names the case and the files that differ;
``scripts/golden.py record --out DIR`` at the old and new commit shows how.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("golden", ROOT / "scripts" / "golden.py")
golden = importlib.util.module_from_spec(_spec)
sys.modules["golden"] = golden
_spec.loader.exec_module(golden)


# The timing of each zoo model (golden.ZOO order) in the slice.
LATIN = ("scalesim", "compute", "native-best-energy", "native", "native", "scalesim", "compute",
         "native-best-energy")


def ci_slice() -> list[str]:
    """Each zoo model once, on the presets in turn and every timing twice (the mapper's
    best-energy search on the two models where it is quick), two NVDLA builds, and every
    other kind of case."""
    names = [f"run/{model}/{golden.CHIPS[i % len(golden.CHIPS)]}/{LATIN[i]}" for i, model in enumerate(golden.ZOO)]
    names += ["run/resnet18/nv_small", "run/gpt2_block/nv_full"]
    names += [name for name, _, _ in golden.cases("quick") if not name.startswith("run/")
              or name.split("/")[1] in ("gemm", "conv", "topology")
              or name.split("/")[-1] in ("tech7nm", "set")]
    return names


@pytest.fixture(scope="module")
def stored():
    return golden.stored("quick")


@pytest.mark.parametrize("name", ci_slice())
def test_golden(name, stored):
    case = next(c for c in golden.cases("quick") if c[0] == name)
    got = golden.compute("quick", selected=[case], html=False)
    assert not golden.differences(got, {name: stored[name]}), golden.differences(
        got, {name: stored[name]})


def test_the_slice_covers_every_preset_timing_and_model():
    names = ci_slice()
    for chip in golden.CHIPS:
        for label, _ in golden.TIMINGS:
            assert any(n.endswith(f"/{label}") for n in names)
        assert any(f"/{chip}/" in n for n in names)
    for model in golden.ZOO:
        assert any(n.startswith(f"run/{model}/") for n in names)
    assert set(names) <= set(golden.stored("quick"))


def test_a_changed_output_is_reported():
    got = {"run/x": {"summary.json": "0" * 64, "layers.csv": "1" * 64}}
    want = {"run/x": {"summary.json": "0" * 64, "layers.csv": "2" * 64}}
    assert golden.differences(got, want) == ["run/x: layers.csv differ"]
    assert golden.differences(got, got) == []
