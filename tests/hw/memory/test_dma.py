"""DMA engine (hw/memory/dma.py): closed form against an event-driven gold model; config errors."""

from __future__ import annotations

import heapq
import math
from collections import deque
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.memory.dma import (
    DmaConfig, dma_config_from_dict, dma_config_to_dict, dma_steady_bytes_per_cycle,
    dma_transfer_cycles,
)
from hw.systolic.config import ConfigError


def gold_dma_cycles(cfg: DmaConfig, nbytes: int, latency: int, bandwidth: Fraction | None) -> int:
    """Event-driven DMA: after setup, issue requests while fewer than max_outstanding are in
    flight; each reaches the target after ``latency``, then waits for the shared data path
    (first come first served, ``size / bandwidth`` per request; None = infinite bandwidth); its
    completion frees a slot. Exact arithmetic; returns the last completion, rounded up."""
    if nbytes == 0:
        return 0
    size = cfg.request_bytes
    sizes = [min(size, nbytes - start) for start in range(0, nbytes, size)]
    events: list[tuple[Fraction, int, str, int]] = []
    order = 0
    issued = in_flight = 0
    queue: deque[int] = deque()
    path_busy = False
    end = Fraction(0)

    def push(time, kind, req):
        nonlocal order
        heapq.heappush(events, (time, order, kind, req))
        order += 1

    def issue(now):
        nonlocal issued, in_flight
        while issued < len(sizes) and in_flight < cfg.max_outstanding:
            push(now + latency, "arrive", issued)
            issued += 1
            in_flight += 1

    def start_transfer(now):
        nonlocal path_busy
        if queue and not path_busy:
            req = queue.popleft()
            path_busy = True
            push(now + (0 if bandwidth is None else Fraction(sizes[req]) / bandwidth), "done", req)

    issue(Fraction(cfg.descriptor_setup_cycles))
    while events:
        now, _, kind, req = heapq.heappop(events)
        if kind == "arrive":
            queue.append(req)
        else:
            path_busy = False
            in_flight -= 1
            end = now
            issue(now)
        start_transfer(now)
    return math.ceil(end)


def test_defaults_and_dict_round_trip():
    cfg = DmaConfig()
    assert (cfg.descriptor_setup_cycles, cfg.max_outstanding, cfg.request_bytes) == (32, 32, 64)
    assert dma_config_to_dict(cfg) == {"descriptor_setup_cycles": 32, "max_outstanding": 32,
                                       "request_bytes": 64}
    other = dma_config_from_dict({"max_outstanding": 256, "request_bytes": 512}, "f")
    assert dma_config_from_dict(dma_config_to_dict(other), "again") == other
    assert dma_config_from_dict({}, "f") == cfg


@pytest.mark.parametrize("key, value, allowed", [
    ("descriptor_setup_cycles", -1, "integer in 0..1000000"),
    ("descriptor_setup_cycles", 10**6 + 1, "integer in 0..1000000"),
    ("descriptor_setup_cycles", 3.0, "integer in 0..1000000"),
    ("descriptor_setup_cycles", True, "integer in 0..1000000"),
    ("max_outstanding", 0, "integer in 1..4096"), ("max_outstanding", 4097, "integer in 1..4096"),
    ("max_outstanding", "8", "integer in 1..4096"),
    ("request_bytes", 0, "integer in 1..4096"), ("request_bytes", 8192, "integer in 1..4096"),
    ("request_bytes", 96, "power of two in 1..4096"), ("request_bytes", 64.0, "integer in 1..4096"),
])
def test_config_errors(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        dma_config_from_dict({key: value}, "chip.toml")
    msg = str(err.value)
    assert msg.startswith(f"chip.toml: dma.{key} = {value!r}: must be ")
    assert allowed in msg
    with pytest.raises(ConfigError, match=rf"^DmaConfig: dma\.{key} = "):
        DmaConfig(**{key: value})


def test_unknown_key():
    with pytest.raises(ConfigError) as err:
        dma_config_from_dict({"outstanding": 4}, "chip.toml")
    assert str(err.value) == ("chip.toml: dma.outstanding: unknown key; allowed keys in [dma]: "
                              "descriptor_setup_cycles, max_outstanding, request_bytes")


def test_bandwidth_bound_by_hand():
    # window 32 x 64 B = 2 KiB; (O-1) R / B = 248 cycles >= latency 100: the data path limits.
    cfg = DmaConfig(descriptor_setup_cycles=32, max_outstanding=32, request_bytes=64)
    assert dma_transfer_cycles(cfg, 4096, 100, 8.0) == 32 + 100 + 512
    assert dma_steady_bytes_per_cycle(cfg, 100, 8.0) == 8.0


def test_window_bound_by_hand():
    # two requests of 64 B in flight, 64 B/cycle, latency 100: d0..d9 = S+101, 102, 202, 203,
    # 303, 304, 404, 405, 505, 506
    cfg = DmaConfig(descriptor_setup_cycles=10, max_outstanding=2, request_bytes=64)
    assert dma_transfer_cycles(cfg, 640, 100, 64) == 10 + 506
    assert gold_dma_cycles(cfg, 640, 100, Fraction(64)) == 516
    assert dma_steady_bytes_per_cycle(cfg, 100, 64) == pytest.approx(128 / 101)


def test_zero_bytes_and_infinite_bandwidth():
    cfg = DmaConfig(descriptor_setup_cycles=5, max_outstanding=4, request_bytes=16)
    assert dma_transfer_cycles(cfg, 0, 100, 1.0) == 0
    # 10 requests, windows of 4: three latency rounds
    assert dma_transfer_cycles(cfg, 160, 100, math.inf) == 5 + 3 * 100
    assert gold_dma_cycles(cfg, 160, 100, None) == 305
    assert dma_steady_bytes_per_cycle(cfg, 0, math.inf) == math.inf


@pytest.mark.parametrize("args, match", [
    ((-1, 100, 1.0), "nbytes"), ((1.5, 100, 1.0), "nbytes"), ((True, 100, 1.0), "nbytes"),
    ((64, -1, 1.0), "latency_cycles"), ((64, 1.5, 1.0), "latency_cycles"),
    ((64, 10, 0), "bytes_per_cycle"), ((64, 10, -2.0), "bytes_per_cycle"),
    ((64, 10, math.nan), "bytes_per_cycle"), ((64, 10, "8"), "bytes_per_cycle"),
])
def test_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        dma_transfer_cycles(DmaConfig(), *args)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 64), st.integers(1, 64), st.sampled_from([1, 4, 16, 64, 256]),
       st.integers(0, 5_000), st.integers(0, 300), st.integers(1, 64), st.integers(1, 8))
def test_closed_form_equals_event_simulation(setup, window, size, nbytes, latency, num, den):
    cfg = DmaConfig(descriptor_setup_cycles=setup, max_outstanding=window, request_bytes=size)
    bandwidth = Fraction(num, den)
    assert dma_transfer_cycles(cfg, nbytes, latency, num / den) == gold_dma_cycles(
        cfg, nbytes, latency, bandwidth)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 64), st.sampled_from([16, 64, 256]), st.integers(0, 1000),
       st.integers(1, 128))
def test_littles_law_throughput(window, size, latency, bandwidth):
    cfg = DmaConfig(descriptor_setup_cycles=0, max_outstanding=window, request_bytes=size)
    nbytes = 2000 * window * size
    cycles = dma_transfer_cycles(cfg, nbytes, latency, float(bandwidth))
    steady = dma_steady_bytes_per_cycle(cfg, latency, float(bandwidth))
    assert nbytes / (cycles - latency) == pytest.approx(steady, rel=2e-3)
    assert steady == pytest.approx(min(bandwidth, window * size / (latency + size / bandwidth)))
