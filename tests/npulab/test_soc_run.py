"""``npulab.soc_run``: an SoC of copies of one chip and a workload run on it (``npulab soc``).

Gold: the programs compiled by hand and run with :func:`hw.system.soc.run_soc`."""

from __future__ import annotations

import pytest

from compiler.frontends import zoo
from compiler.backends.systolic import compile_graph
from hw.configfile import load_chip, load_chip_config
from hw.errors import ConfigError
from hw.memory.dram import dram_preset
from hw.system.soc import SocConfig, run_soc
from npulab.soc_run import run_soc_workload, soc_of

GRAPH = zoo.get("resnet18", image_size=16)


def test_a_workload_runs_as_its_programs_do_by_hand():
    chip = load_chip_config("gemmini_like")
    soc = soc_of("gemmini_like", 2, dram=dram_preset("hbm2"))
    assert soc == SocConfig(name=f"2x{chip.name}", accelerators=(chip, chip),
                            dram=dram_preset("hbm2"))
    program = compile_graph(GRAPH, chip)
    assert run_soc_workload(GRAPH, soc).to_dict() == run_soc(soc, [program] * 2).to_dict()


def test_the_chip_is_any_device_form_and_systolic():
    spec = load_chip(None, ["array.rows=8"])
    assert soc_of(spec, 1) == soc_of(spec.config, 1)
    assert soc_of(spec, 1).dram == spec.config.dram             # the chip's own DRAM
    with pytest.raises(ConfigError, match="accelerator 'nv_small' has a nvdla engine; the SoC runs "
                                          "systolic chips' programs"):
        soc_of("nv_small", 2)
