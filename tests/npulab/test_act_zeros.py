"""Zero activations gating MAC energy (issue 27: "activations' zeros gating energy (not
cycles) with a sparsity ratio per layer"): a PE whose streamed activation is zero does not
switch its multiplier and adder, so those MACs cost no MAC energy and nothing else changes."""

from __future__ import annotations

import json

import pytest

import npulab
from compiler.ir import Conv2d, Gemm, Graph, IRError
from compiler.frontends import zoo
from compiler.options import CompileOptions, parse_act_zeros
from hw.configfile import load_chip_config
from hw.energy import DEFAULT_TECHNOLOGY, load_technology
from npulab.record import LayerActions


def _graph(**zeros):
    conv = Conv2d(name="conv1", in_h=14, in_w=14, in_channels=32, out_channels=64, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1,
                  act_zeros=zeros.get("conv1"))
    fc = Gemm(name="fc", m=196, n=32, k=64, inputs=("conv1",), act_zeros=zeros.get("fc"))
    return Graph("g", (conv, fc))


def _energy(run):
    return [layer["energy_breakdown_j"] for layer in run.metrics().layers]


def test_zero_activations_cut_mac_energy_only():
    chip = load_chip_config()
    base = npulab.simulate(_graph(), chip)
    gated = npulab.simulate(_graph(), chip, options=CompileOptions(act_zeros=0.5))
    assert base.totals["cycles"] == gated.totals["cycles"]
    for b, g in zip(_energy(base), _energy(gated)):
        for part, joules in b.items():
            if part == "mac":
                assert g[part] == pytest.approx(joules / 2, rel=1e-12)
            else:
                assert g[part] == joules, part
    # the MAC energy is the MACs that switched x the table's per-MAC figure
    tech = load_technology(DEFAULT_TECHNOLOGY)
    macs = sum(op.macs for op in _graph().ops)
    assert gated.metrics().network["energy_breakdown_j"]["mac"] == pytest.approx(
        macs * 0.5 * tech.mac_pj("int8") * 1e-12, rel=1e-12)
    assert all(layer.actions.gated_macs == layer.actions.macs / 2 for layer in gated.layers)


def test_per_layer_ratios_from_the_model_and_from_patterns():
    chip = load_chip_config()
    own = npulab.simulate(_graph(conv1=0.0, fc=0.6), chip)          # the IR's ratios
    assert [layer.actions.act_zeros for layer in own.layers] == [0.0, 0.6]
    assert own.layers[1].tiling.endswith("zeros 0.60") and "zeros" not in own.layers[0].tiling
    # a pattern overrides the model's ratio where it matches; first match wins
    opts = CompileOptions(act_zeros="fc=0.25,*=0.5")
    assert [opts.act_zeros_of(op) for op in _graph(fc=0.6).ops] == [0.5, 0.25]
    opts = CompileOptions(act_zeros="conv*=0.3")
    assert [opts.act_zeros_of(op) for op in _graph(fc=0.6).ops] == [0.3, 0.6]
    # the record keeps the ratio: a saved summary costs the same energy
    data = own.layers[1].actions.to_dict()
    assert data["act_zeros"] == 0.6 and "act_zeros" not in own.layers[0].actions.to_dict()
    assert LayerActions.from_dict(json.loads(json.dumps(data))) == own.layers[1].actions


def test_fused_attention_takes_its_products_mac_weighted_ratio():
    graph = zoo.bert_base_layer(seq_len=64)
    chip = load_chip_config()
    names = [op.name for op in graph.ops if op.gemm_shape() is not None]
    scores = next(op for op in graph.ops if op.name.endswith("scores"))
    context = next(op for op in graph.ops if op.name.endswith("context"))
    opts = CompileOptions(act_zeros=f"{scores.name}=0.8")
    run = npulab.simulate(graph, chip, options=opts)
    fused = next(layer for layer in run.layers if layer.name == scores.name)
    want = 0.8 * scores.macs / (scores.macs + context.macs)
    assert fused.actions.act_zeros == pytest.approx(want, rel=1e-12)
    assert len(names) >= 4


def test_bad_ratios_are_one_line_errors():
    with pytest.raises(IRError, match="act_zeros = 1.5: must be a ratio in 0..1"):
        Gemm(name="g", m=1, n=1, k=1, act_zeros=1.5)
    for spec, msg in [("1.5", "must be a ratio in 0..1"), ("fc=", "must be a ratio"),
                      ("=0.5", "has no op-name pattern"), ("0.5,fc=0.1", "lacks PATTERN="),
                      ("fc=0.1,,", "an empty item"), ("nan", "must be a ratio")]:
        with pytest.raises(ValueError, match=msg):
            CompileOptions(act_zeros=spec)
    for bad in ([0.5], {"fc": 0.5}, True):        # not hashable, or not a ratio: one line
        with pytest.raises(ValueError, match="must be a ratio in 0..1"):
            CompileOptions(act_zeros=bad)
    with pytest.raises(ValueError, match="must be FORMAT or FORMAT:DENSITY"):
        CompileOptions(weight_format=["csr"])
    assert parse_act_zeros(0.25) == (("*", 0.25),)
    assert parse_act_zeros("a*=0,b=1") == (("a*", 0.0), ("b", 1.0))


def test_an_act_zeros_pattern_that_matches_no_layer_is_a_one_line_error(capsys):
    """A pattern naming no matrix layer would be dropped without a word: the run refuses it,
    naming the pattern and some layers it could have meant."""
    from npulab.cli import main
    argv = ["run", "--model", "resnet18", "--image-size", "32", "-q"]
    assert main(argv + ["--act-zeros", "layer1*=0.5,layre2*=0.4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "layre2* matches no matrix layer of resnet18" in err, err
    assert "conv1, layer1.0.conv1" in err
    assert main(["run", "--op", "softmax:64,64", "--act-zeros", "0.5", "-q"]) == 2
    assert "has no matrix layer" in capsys.readouterr().err
    assert main(argv + ["--act-zeros", "layer1*=0.5"]) == 0


@pytest.mark.parametrize("timing", ["compute", "scalesim"])
def test_the_arrays_alone_charge_each_layers_own_zeros(timing):
    """Compute and SCALE-Sim timing (no tiling options) still read the IR's act_zeros: the MAC
    energy of the gated MACs is left out, as in a native run."""
    chip = load_chip_config()
    base = npulab.simulate(_graph(), chip, timing=timing)
    own = npulab.simulate(_graph(fc=0.5), chip, timing=timing)
    assert [x.actions.act_zeros for x in own.layers] == [0.0, 0.5]
    assert own.totals["cycles"] == base.totals["cycles"]
    fc_base, fc_own = _energy(base)[1]["mac"], _energy(own)[1]["mac"]
    assert fc_own == pytest.approx(fc_base / 2, rel=1e-12)
