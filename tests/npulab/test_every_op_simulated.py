"""Issue 23's first criterion: every zoo model runs on every shipped systolic preset with no op
left unsimulated, and the run's cycles include the vector work."""

import pytest

from compiler.frontends import zoo
from hw.configfile import load_chip_config
from hw.presets import chip_preset_names
from npulab.simulate import simulate

# The smallest inputs each model accepts (the layer kinds are the same at any size). Native
# timing on the default chip, compute timing (which also times every vector op, on the engine
# alone) on the other presets and for AlexNet and VGG-16, whose native runs take seconds; the
# native path on every preset is sampled by test_layer_windows.
SMALL = {"alexnet": {"image_size": 63}, "vgg16": {"image_size": 32},
         "resnet18": {"image_size": 16}, "resnet50": {"image_size": 16},
         "mobilenetv2": {"image_size": 16}, "googlenet": {"image_size": 16},
         "bert_base_layer": {"seq_len": 8}, "gpt2_block": {"seq_len": 8},
         "transformer_block": {"seq_len": 8}}
SYSTOLIC = [name for name in chip_preset_names() if not name.startswith("nv_")]


def test_the_table_covers_the_zoo_and_the_presets():
    assert set(SMALL) == set(zoo.names())
    assert {"default", "gemmini_like", "tpu_v1_like", "eyeriss_like", "tpu_v5e_like"} <= set(SYSTOLIC)


@pytest.mark.parametrize("preset", SYSTOLIC)
@pytest.mark.parametrize("model", sorted(SMALL))
def test_no_op_is_left_unsimulated(model, preset):
    native = preset == "default" and model not in ("alexnet", "vgg16")
    timing = "native" if native else "compute"
    run = simulate(zoo.get(model, **SMALL[model]), load_chip_config(preset), timing)
    assert run.totals["layers_not_simulated"] == 0
    # every op ran: alone, or (native timing fuses) in its group's anchor's layer
    assert all(x.cycles is not None or (native and x.engine == "fused") for x in run.layers)
    ran = {x.name for x in run.layers if x.cycles is not None}
    anchors = {x.fused.split(":", 1)[1] for x in run.layers if x.fused}
    assert anchors <= ran
    # the vector engine did the work of every vector op and fused group, but for an
    # epilogue that is only a residual add (the accumulators add it: C = A B + D)
    vector = [x for x in run.layers if x.engine == "vector" or (
        x.name in anchors and not x.fused.startswith("epilogue:"))]
    assert vector and all(x.actions.vector_ops > 0 or x.op == "Move" for x in vector)
    busy = sum(x.units["vector"] for x in vector) if timing == "native" else sum(
        x.cycles for x in vector)
    assert busy > 0
    assert run.totals["cycles"] == sum(x.cycles or 0 for x in run.layers)


def test_bert_on_the_transformer_preset_fuses_and_times_its_vector_work():
    # the transformer-oriented single-core preset, native timing with fusion on (the default)
    run = simulate(zoo.get("bert_base_layer", seq_len=128), load_chip_config("tpu_v5e_like"))
    assert run.totals["layers_not_simulated"] == 0
    assert run.totals["layers_fused"] > 0 and run.totals["vector_busy_cycles"] > 0
