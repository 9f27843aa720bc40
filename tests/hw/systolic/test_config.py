"""ArrayConfig validation (hw/systolic/config.py): bounds, enums, accumulator widths, messages."""

from __future__ import annotations

import dataclasses

import pytest

from hw.systolic.config import (
    MAX_ARRAY_DIM, ArrayConfig, ConfigError, Dataflow, Overflow, Precision,
)


def test_defaults():
    cfg = ArrayConfig()
    assert (cfg.rows, cfg.cols, cfg.dataflow, cfg.precision, cfg.acc_bits, cfg.overflow) == (
        32, 32, Dataflow.WS, Precision.INT8, 32, Overflow.WRAP)
    assert cfg.pes == 1024
    assert MAX_ARRAY_DIM == 4096
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("key", ["rows", "cols"])
@pytest.mark.parametrize("value", [1, 2, 7, 4096])
def test_dims_accepted(key, value):
    cfg = ArrayConfig(**{key: value})
    assert getattr(cfg, key) == value
    assert cfg.pes == value * 32


@pytest.mark.parametrize("key", ["rows", "cols"])
@pytest.mark.parametrize("value", [0, -1, 4097, 10**9, True, False, 8.0, "8", None])
def test_dims_rejected(key, value):
    with pytest.raises(ConfigError) as err:
        ArrayConfig(**{key: value})
    msg = str(err.value)
    assert msg.startswith("ArrayConfig: ")
    assert f"{key} = {value!r}" in msg
    assert "1..4096" in msg


@pytest.mark.parametrize("key, text, member", [
    ("dataflow", "os", Dataflow.OS), ("dataflow", "OS", Dataflow.OS),
    ("dataflow", "Ws", Dataflow.WS),
    ("dataflow", "iS", Dataflow.IS), ("dataflow", Dataflow.IS, Dataflow.IS),
    ("precision", "INT8", Precision.INT8), ("precision", "Int16", Precision.INT16),
    ("precision", "fP16", Precision.FP16), ("precision", Precision.INT16, Precision.INT16),
    ("overflow", "WRAP", Overflow.WRAP), ("overflow", "Saturate", Overflow.SATURATE),
    ("overflow", Overflow.SATURATE, Overflow.SATURATE),
])
def test_enum_strings_case_insensitive(key, text, member):
    cfg = ArrayConfig(**{key: text})
    got = getattr(cfg, key)
    assert got is member and type(got) is type(member)


@pytest.mark.parametrize("key, value, allowed", [
    ("dataflow", "xs", "'os', 'ws', 'is'"), ("dataflow", " os", "'os', 'ws', 'is'"),
    ("dataflow", 1, "'os', 'ws', 'is'"), ("dataflow", Precision.INT8, "'os', 'ws', 'is'"),
    ("precision", "int2", "'int8', 'int16', 'fp16', 'bf16', 'fp8_e4m3', 'fp8_e5m2', 'int4'"),
    ("precision", "fp8", "'int8', 'int16', 'fp16', 'bf16', 'fp8_e4m3', 'fp8_e5m2', 'int4'"),
    ("precision", None, "'int8', 'int16', 'fp16'"),
    ("overflow", "clip", "'wrap', 'saturate'"), ("overflow", True, "'wrap', 'saturate'"),
])
def test_enum_rejected(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        ArrayConfig(**{key: value})
    msg = str(err.value)
    assert f"{key} = {value!r}" in msg and allowed in msg and msg.startswith("ArrayConfig: ")


@pytest.mark.parametrize("precision, want", [("int8", 32), ("int16", 64), ("fp16", 32), ("int4", 32),
                                             ("bf16", 32), ("fp8_e4m3", 32), ("fp8_e5m2", 32)])
def test_acc_bits_defaults(precision, want):
    assert ArrayConfig(precision=precision).acc_bits == want


@pytest.mark.parametrize("precision, ok", [
    ("int8", [16, 17, 20, 32, 40, 63, 64]), ("int16", [32, 33, 40, 64]), ("fp16", [32]),
])
def test_acc_bits_accepted(precision, ok):
    for bits in ok:
        assert ArrayConfig(precision=precision, acc_bits=bits).acc_bits == bits


@pytest.mark.parametrize("precision, bits, expect", [
    ("int8", 15, "16..64"), ("int8", 8, "16..64"), ("int8", 65, "16..64"), ("int8", 0, "16..64"),
    ("int8", True, "16..64"), ("int8", 32.0, "16..64"), ("int8", "32", "16..64"),
    ("int16", 31, "32..64"), ("int16", 16, "32..64"), ("int16", 65, "32..64"),
    ("int16", True, "32..64"),
    ("fp16", 16, "must be 32"), ("fp16", 64, "must be 32"), ("fp16", True, "must be 32"),
    ("fp16", "32", "must be 32"),
])
def test_acc_bits_rejected(precision, bits, expect):
    with pytest.raises(ConfigError) as err:
        ArrayConfig(precision=precision, acc_bits=bits)
    msg = str(err.value)
    assert f"acc_bits = {bits!r}" in msg and expect in msg and msg.startswith("ArrayConfig: ")


def test_fp16_acc_bits_must_be_int():
    with pytest.raises(ConfigError, match=r"acc_bits = 32\.0"):
        ArrayConfig(precision="fp16", acc_bits=32.0)


def test_validate_names_source_and_prefix():
    cfg = ArrayConfig(rows=4, cols=4)
    object.__setattr__(cfg, "cols", 0)
    with pytest.raises(ConfigError, match=r"^sys\.toml \[array\]: array\.cols = 0: must be an "
                                          r"integer in 1\.\.4096$"):
        cfg.validate("sys.toml [array]", "array.")
    object.__setattr__(cfg, "cols", 4)
    object.__setattr__(cfg, "dataflow", "diagonal")
    with pytest.raises(ConfigError, match=r"^x\.cfg: a\.dataflow = 'diagonal': must be one of"):
        cfg.validate("x.cfg", "a.")


def test_frozen_and_precision_properties():
    cfg = ArrayConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rows = 8  # type: ignore[misc]
    assert (Precision.INT8.bits, Precision.INT16.bits, Precision.FP16.bits) == (8, 16, 16)
    assert Precision.INT8.operand_range == (-128, 127)
    assert Precision.INT16.operand_range == (-32768, 32767)
    assert [p.is_float for p in Precision] == [False, False, True, True, True, True, False,
                                               False]
    assert [p.bits for p in Precision] == [8, 16, 16, 16, 8, 8, 4, 1]
    assert Precision.INT4.operand_range == (-8, 7)
    assert Precision.BINARY.operand_range == (-1, 1)
    assert [p.max_macs_per_pe for p in Precision] == [1, 1, 1, 1, 1, 1, 2, 8]
    assert [p.min_acc_bits for p in Precision] == [16, 32, 32, 32, 16, 16, 8, 8]
    from hw.numerics import FLOAT_FORMATS        # each float precision's format has its width
    assert all(FLOAT_FORMATS[p.value].bits == p.bits for p in Precision if p.is_float)
