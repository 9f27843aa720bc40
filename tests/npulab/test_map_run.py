"""``npulab.map_run.map_op(op, device, MapOptions)``: the library behind ``npulab map``.

Gold: the command's JSON (the same call), :func:`compiler.mapper.map_op` on the problem the
systolic backend builds, and the pipeline's device forms."""

from __future__ import annotations

import json

import pytest

from compiler.ir import Gemm
from compiler.backends.systolic import tile_problem
from compiler.options import CompileOptions
from compiler.mapper import map_op as search
from hw.configfile import load_chip, load_chip_config
from npulab.cli import main
from npulab.map_run import MapOptions, map_op, mapped_chip
from npulab.pipeline import OptionError

SETS = ["array.rows=8", "array.cols=8"]
OP = Gemm(name="gemm 40x24x72", m=40, n=24, k=72)   # as --gemm 40,24,72 names it


def test_map_op_is_what_npulab_map_prints(capsys):
    chip = load_chip(None, SETS)
    options = MapOptions(objective="edp", keep=3, dataflows=("os", "ws"))
    mapping = map_op(OP, chip, options)
    argv = ["map", "--gemm", "40,24,72", "--objective", "edp", "--top", "3", "--dataflows",
            "os,ws", "--format", "json", *(x for s in SETS for x in ("--set", s))]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert mapping.to_dict("--gemm") == printed
    ref = search(tile_problem(OP, chip.config, CompileOptions()), chip.config, "edp", tech="16nm",
                 dataflows=("os", "ws"), keep=3)
    assert [m.index for m in mapping.search.ranked] == [m.index for m in ref.ranked]
    assert mapping.utilization(mapping.search.best) == (
        40 * 24 * 72 / (64 * mapping.search.best.latency_cycles))


def test_every_device_form_is_the_same_chip():
    chip = load_chip_config(None, SETS)
    a = map_op(OP, chip, MapOptions(keep=1))
    b = map_op(OP, load_chip(None, SETS), MapOptions(keep=1))
    assert a.to_dict() == b.to_dict()
    assert map_op(OP, None, MapOptions(keep=1)).chip == load_chip_config(None)


def test_an_nvdla_build_and_an_off_array_op_are_refused():
    with pytest.raises(ValueError, match="nv_small is an NVDLA build, whose mapping is fixed"):
        map_op(OP, "nv_small")
    with pytest.raises(ValueError, match="nv_small is an NVDLA build"):
        mapped_chip(load_chip("nv_small"))
    from compiler.frontends import zoo
    pool = zoo.get("resnet18").op("maxpool")
    with pytest.raises(ValueError, match="maxpool: a Pool op, which runs off the array"):
        map_op(pool, None)


@pytest.mark.parametrize("field, value", [
    ("objective", "speed"), ("dataflows", ("os", "xs")), ("dataflows", ()),
    ("dataflows", ["os"]), ("loop_order", "abc"), ("conv_lowering", "x"), ("keep", 0),
    ("samples", -1), ("seed", 1.5), ("exhaustive_limit", True), ("tech", ""),
    ("dram_kind", "ddr9"),
])
def test_options_are_typed_and_name_the_bad_field(field, value):
    with pytest.raises(OptionError) as info:
        MapOptions(**{field: value})
    assert (info.value.option, info.value.value) == (field, value)
    assert str(info.value).startswith(f"{field} = {value!r}: must be ")
    with pytest.raises(TypeError):
        MapOptions(objectve="edp")                  # a misspelt option is an error
