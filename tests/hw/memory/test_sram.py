"""SRAM scratchpads (hw/memory/sram.py): config, bank conflicts against a gold model, closed form,
capacity checks and counters."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.memory.sram import (
    OperandCounters, Scratchpad, SramCapacityError, SramConfig, bank_access_cycles,
    sram_config_from_dict, sram_config_to_dict, vector_access_cycles,
)
from hw.systolic.config import ConfigError


def gold_bank_cycles(addresses, elem_bytes, banks, width, ports):
    """Per request cycle: the set of words each bank must deliver; the busiest bank needs
    ceil(words / ports) cycles, at least one."""
    total = 0
    for row in addresses:
        per_bank: dict[int, set[int]] = {}
        for addr in row:
            if addr < 0:
                continue
            for byte in range(addr, addr + elem_bytes):
                word = byte // width
                per_bank.setdefault(word % banks, set()).add(word)
        worst = max((len(words) for words in per_bank.values()), default=0)
        total += max(1, math.ceil(worst / ports))
    return total, total - len(addresses)


def test_defaults_and_properties():
    cfg = SramConfig(capacity_kib=512)
    assert (cfg.banks, cfg.bank_width_bytes, cfg.ports, cfg.double_buffer, cfg.buffer_split) == (
        8, 16, 1, True, 0.5)
    assert cfg.capacity_bytes == 524_288 and cfg.tile_capacity_bytes == 262_144
    assert cfg.bytes_per_cycle == 128
    assert SramConfig(capacity_kib=64, ports=2, banks=16).bytes_per_cycle == 512
    assert SramConfig(capacity_kib=64, double_buffer=False).tile_capacity_bytes == 65_536
    assert SramConfig(capacity_kib=1000, buffer_split=0.7).tile_capacity_bytes == 307_200
    assert SramConfig(capacity_kib=1000, buffer_split=0.3).tile_capacity_bytes == 307_200
    assert SramConfig(capacity_kib=1.5, buffer_split=0.25).tile_capacity_bytes == 384
    assert isinstance(SramConfig(capacity_kib=8).capacity_kib, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.banks = 4


def test_dict_round_trip():
    cfg = sram_config_from_dict({"capacity_kib": 96, "banks": 32, "ports": 2,
                                 "double_buffer": False}, "chip.toml", "ifmap_sram.")
    assert cfg == SramConfig(capacity_kib=96.0, banks=32, ports=2, double_buffer=False)
    data = sram_config_to_dict(cfg)
    assert data == {"capacity_kib": 96.0, "banks": 32, "bank_width_bytes": 16, "ports": 2,
                    "double_buffer": False, "buffer_split": 0.5}
    assert sram_config_from_dict(data, "again") == cfg


ROW = "banks x ifmap_sram.bank_width_bytes = 128 bytes"


@pytest.mark.parametrize("key, value, allowed", [
    ("capacity_kib", 0, "number in (0, 1.07374e+09]"),
    ("capacity_kib", -4, "number in (0, 1.07374e+09]"),
    ("capacity_kib", math.nan, "number in (0, 1.07374e+09]"),
    ("capacity_kib", math.inf, "number in (0, 1.07374e+09]"),
    ("capacity_kib", "512", "number in (0, 1.07374e+09]"),
    ("capacity_kib", True, "number in (0, 1.07374e+09]"),
    ("capacity_kib", 0.1, "whole number of bank rows of ifmap_sram." + ROW),
    ("capacity_kib", 0.0625, "whole number of bank rows of ifmap_sram." + ROW),
    ("capacity_kib", 1.0625, "whole number of bank rows of ifmap_sram." + ROW),
    ("banks", 0, "integer in 1..1024"), ("banks", 2048, "integer in 1..1024"),
    ("banks", 6, "power of two in 1..1024"), ("banks", 8.0, "integer in 1..1024"),
    ("bank_width_bytes", 0, "integer in 1..1024"),
    ("bank_width_bytes", 24, "power of two in 1..1024"),
    ("bank_width_bytes", 4096, "integer in 1..1024"),
    ("ports", 0, "one of 1, 2"), ("ports", 3, "one of 1, 2"), ("ports", True, "one of 1, 2"),
    ("ports", 1.0, "one of 1, 2"),
    ("double_buffer", 1, "true or false"), ("double_buffer", "yes", "true or false"),
    ("buffer_split", 0, "number in (0, 1)"), ("buffer_split", 1, "number in (0, 1)"),
    ("buffer_split", -0.1, "number in (0, 1)"), ("buffer_split", 1.5, "number in (0, 1)"),
    ("buffer_split", math.nan, "number in (0, 1)"), ("buffer_split", "0.5", "number in (0, 1)"),
    ("buffer_split", True, "number in (0, 1)"),
])
def test_config_errors(key, value, allowed):
    data = {"capacity_kib": 64, key: value}
    with pytest.raises(ConfigError) as err:
        sram_config_from_dict(data, "chip.toml", "ifmap_sram.")
    msg = str(err.value)
    assert msg.startswith(f"chip.toml: ifmap_sram.{key} = {value!r}: must be ")
    assert allowed in msg
    with pytest.raises(ConfigError, match=rf"^SramConfig: {key} = "):
        SramConfig(**data)


def test_unknown_and_missing_keys():
    with pytest.raises(ConfigError) as err:
        sram_config_from_dict({"capacity_kib": 8, "size_kb": 8}, "chip.toml", "filter_sram.")
    assert str(err.value) == (
        "chip.toml: filter_sram.size_kb: unknown key; allowed keys in [filter_sram]: capacity_kib, "
        "banks, bank_width_bytes, ports, double_buffer, buffer_split")
    with pytest.raises(ConfigError, match=r"^chip.toml: filter_sram.capacity_kib: missing"):
        sram_config_from_dict({"banks": 4}, "chip.toml", "filter_sram.")


# ------------------------------------------------------------------------------ bank conflicts

def test_bank_conflicts_by_hand():
    # 8 banks x 16 B, 32 lanes of 1 B
    lanes = np.arange(32, dtype=np.int64)
    assert bank_access_cycles((lanes * 1)[None, :], 1, 8, 16, 1) == (1, 0)       # 2 words
    assert bank_access_cycles((lanes * 16)[None, :], 1, 8, 16, 1) == (4, 3)      # 4 words per bank
    assert bank_access_cycles((lanes * 128)[None, :], 1, 8, 16, 1) == (32, 31)   # one bank
    assert bank_access_cycles((lanes * 128)[None, :], 1, 8, 16, 2) == (16, 15)   # dual-ported
    assert bank_access_cycles(np.zeros((3, 32), np.int64), 1, 8, 16, 1) == (3, 0)  # broadcast
    assert bank_access_cycles(np.full((2, 4), -1, np.int64), 1, 8, 16, 1) == (2, 0)  # idle
    assert bank_access_cycles(np.array([[15]], np.int64), 2, 1, 16, 1) == (2, 1)  # spans 2 words
    assert bank_access_cycles(np.empty((0, 4), np.int64), 1, 8, 16, 1) == (0, 0)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 6), st.integers(1, 24), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 2, 4, 16, 32]),
       st.sampled_from([1, 2]))
def test_bank_kernel_matches_gold(data, rows, lanes, banks, width, elem_bytes, ports):
    flat = data.draw(st.lists(st.one_of(st.just(-1), st.integers(0, 4 * banks * width)),
                              min_size=rows * lanes, max_size=rows * lanes))
    addresses = np.array(flat, dtype=np.int64).reshape(rows, lanes)
    got = bank_access_cycles(addresses, elem_bytes, banks, width, ports)
    gold = gold_bank_cycles(addresses, elem_bytes, banks, width, ports)
    assert tuple(int(v) for v in got) == gold


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 300), st.sampled_from([1, 2, 4, 8, 16, 32]),
       st.sampled_from([1, 2, 4, 8, 16, 64]),
       st.sampled_from([1, 2]), st.sampled_from([1, 2, 4, 8]), st.integers(0, 80))
def test_vector_closed_form_matches_kernel(lanes, banks, width, ports, elem_bytes, stride_elems):
    if elem_bytes > width:
        elem_bytes = width
    cfg = SramConfig(capacity_kib=banks * width * 8 / 1024, banks=banks, bank_width_bytes=width,
                     ports=ports)
    stride = stride_elems * elem_bytes
    row = (np.arange(lanes, dtype=np.int64) * stride)[None, :]
    cycles, _ = bank_access_cycles(row, elem_bytes, banks, width, ports)
    assert vector_access_cycles(cfg, lanes, elem_bytes, stride) == cycles


def test_vector_access_by_hand():
    cfg = SramConfig(capacity_kib=64)                        # 8 banks x 16 B
    assert vector_access_cycles(cfg, 32, 1, 1) == 1          # unit stride: 2 words
    assert vector_access_cycles(cfg, 32, 1, 16) == 4         # one word per lane
    assert vector_access_cycles(cfg, 32, 1, 32) == 8         # every other bank
    assert vector_access_cycles(cfg, 32, 1, 128) == 32       # all in one bank
    assert vector_access_cycles(cfg, 32, 4, 0) == 1          # broadcast
    assert vector_access_cycles(cfg, 4, 8, 24) == 1          # words 0, 1, 3, 4: banks 0, 1, 3, 4
    four = dataclasses.replace(cfg, banks=4)
    assert vector_access_cycles(four, 4, 8, 24) == 2         # words 0, 1, 3, 4: banks 0, 1, 3, 0
    assert vector_access_cycles(dataclasses.replace(cfg, ports=2), 32, 1, 128) == 16


@pytest.mark.parametrize("banks, width, elem_bytes, stride", [
    (4, 16, 8, 24), (8, 16, 4, 20), (32, 64, 16, 80), (16, 8, 4, 12), (8, 16, 1, 17),
])
@pytest.mark.parametrize("lanes", [1, 7, 64, 1000, 4099])
def test_vector_closed_form_periodic_strides(banks, width, elem_bytes, stride, lanes):
    """Strides that are neither below nor a multiple of the bank width, over many periods."""
    cfg = SramConfig(capacity_kib=banks * width / 1024, banks=banks, bank_width_bytes=width)
    row = (np.arange(lanes, dtype=np.int64) * stride)[None, :]
    assert vector_access_cycles(cfg, lanes, elem_bytes, stride) == bank_access_cycles(
        row, elem_bytes, banks, width, 1)[0]


@pytest.mark.parametrize("lanes, elem_bytes, stride, match", [
    (0, 1, 1, "lanes"), (4, 0, 1, "elem_bytes"), (4, 1, -1, "stride_bytes"),
    (4, 1.0, 1, "elem_bytes"),
    (4, 32, 32, "must divide bank_width_bytes"), (4, 3, 3, "must divide"), (4, 4, 6, "must divide"),
])
def test_vector_access_bad_arguments(lanes, elem_bytes, stride, match):
    with pytest.raises(ValueError, match=match):
        vector_access_cycles(SramConfig(capacity_kib=64), lanes, elem_bytes, stride)


# ------------------------------------------------------------------------------ scratchpad

def test_reserve_checks_one_buffer():
    pad = Scratchpad("ifmap", SramConfig(capacity_kib=64))
    pad.reserve(32 * 1024, "conv1 ifmap tile")
    pad.reserve(100, "small tile")
    assert pad.peak_tile_bytes == 32 * 1024
    with pytest.raises(SramCapacityError) as err:
        pad.reserve(32 * 1024 + 1, "conv2 ifmap tile 56x56x16")
    assert str(err.value) == (
        "scratchpad 'ifmap': conv2 ifmap tile 56x56x16 needs 32,769 bytes but one buffer holds "
        "32,768 bytes (64 KiB, double-buffered, ping 0.5 of it); use smaller tiles or a larger "
        "ifmap scratchpad")
    single = Scratchpad("filter", SramConfig(capacity_kib=64, double_buffer=False))
    single.reserve(65_536, "whole")
    with pytest.raises(SramCapacityError, match=r"65,537 bytes but one buffer holds 65,536 bytes "
                                                r"\(64 KiB, single-buffered\)"):
        single.reserve(65_537, "too big")
    assert issubclass(SramCapacityError, ValueError)


def test_counters():
    pad = Scratchpad("ofmap", SramConfig(capacity_kib=64))
    pad.write("ofmap", 1024, 4)
    pad.read("ofmap", 512, 4, conflict_cycles=3)
    pad.read("ofmap", 10, 4)
    assert pad.counters("ofmap") == OperandCounters(reads=522, writes=1024, read_bytes=2088,
                                                    write_bytes=4096, conflict_cycles=3)
    assert pad.counters("ifmap") == OperandCounters()
    pad.counters("ofmap").reads = 0                          # a copy
    assert pad.counters("ofmap").reads == 522
    pad.reserve(4096, "tile")
    counters = pad.as_dict()
    assert counters == {"ofmap_sram_reads": 522, "ofmap_sram_writes": 1024,
                        "ofmap_sram_read_bytes": 2088, "ofmap_sram_write_bytes": 4096,
                        "ofmap_sram_conflict_cycles": 3, "ofmap_sram_peak_tile_bytes": 4096}
    assert all(type(v) is int for v in counters.values())


@pytest.mark.parametrize("call, match", [
    (lambda p: p.read("", 1, 1), "operand"), (lambda p: p.read("if map", 1, 1), "operand"),
    (lambda p: p.write("ifmap", -1, 1), "elements"),
    (lambda p: p.write("ifmap", 1.0, 1), "elements"),
    (lambda p: p.read("ifmap", 1, True), "elem_bytes"),
    (lambda p: p.read("ifmap", 1, 1, conflict_cycles=-2), "conflict_cycles"),
    (lambda p: p.reserve(-1, "x"), "nbytes"),
])
def test_scratchpad_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call(Scratchpad("ifmap", SramConfig(capacity_kib=64)))


def test_scratchpad_constructor_checks():
    with pytest.raises(ValueError, match="name"):
        Scratchpad("", SramConfig(capacity_kib=8))
    with pytest.raises(TypeError, match="SramConfig"):
        Scratchpad("ifmap", {"capacity_kib": 8})
