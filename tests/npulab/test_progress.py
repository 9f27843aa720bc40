"""The progress bar and the executor's per-layer progress.

Gold values are worked out by hand in the comments: a fake clock makes elapsed time, ETA and
the redraw count exact.
"""

from __future__ import annotations

import io

import pytest

from compiler.ir import Gemm, Graph, Pool, conv2d
from compiler.backends.systolic import compile_graph
from hw.chip import ChipConfig
from hw.executor import execute
from hw.memory.sram import SramConfig
from hw.systolic.config import ArrayConfig
from hw.vector.config import VectorConfig
from npulab.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def tick(self) -> None:
        self.t += self.step

    def __call__(self) -> float:
        return self.t


def test_bar_draws_in_place_and_ends_with_a_newline(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    stream, clock = Tty(), FakeClock(1.0)
    bar = Progress(stream, clock=clock, width=10)
    for done, name in ((1, "conv1"), (2, "conv2"), (3, "fc")):
        clock.tick()
        bar(done, 3, name)
    out = stream.getvalue()
    draws = out.split("\r")[1:]
    assert len(draws) == 3 and out.endswith("\n") and out.count("\n") == 1
    # 1 of 3 after 1 s: 3 of 10 bar cells, 33.3 %, the other 2 items take 2 s more.
    assert draws[0].rstrip() == "[###-------] 1/3  33.3%  conv1  0:01 elapsed, ETA 0:02"
    assert draws[1].rstrip() == "[######----] 2/3  66.7%  conv2  0:02 elapsed, ETA 0:01"
    assert draws[2].endswith("\n")       # (blank-padded over the longer line before it)
    assert draws[2].rstrip() == "[##########] 3/3 100.0%  fc  0:03 elapsed"
    # A second final report (the executor, then the runner) draws nothing more.
    bar(3, 3, "done")
    assert stream.getvalue() == out


def test_default_line_fits_an_80_column_terminal(monkeypatch):
    # The docs' example: 12 of 53 after 3 s -> 4 of 20 cells (22.6 %), ETA 3 * 41 / 12 = 10.25 s
    monkeypatch.setenv("COLUMNS", "80")
    line = Progress(Tty()).line(12, 53, "layer2.0.conv1", 3.0)
    assert line == "[####----------------] 12/53  22.6%  layer2.0.conv1  0:03 elapsed, ETA 0:10"
    assert len(line) < 80


def test_at_most_one_redraw_per_interval():
    # 64 calls 1/64 s apart with a 1/8 s interval: draws at calls 1, 9, 17, ..., 57 (8 draws,
    # each 8 calls = 1/8 s after the previous) and the final one at call 64: 9 in one second.
    stream, clock = Tty(), FakeClock(1 / 64)
    bar = Progress(stream, clock=clock, min_interval=1 / 8)
    for i in range(1, 65):
        clock.tick()
        bar(i, 64, f"layer{i}")
    assert bar.redraws == 9 == stream.getvalue().count("\r")
    assert "layer57" in stream.getvalue() and "layer56" not in stream.getvalue()


def test_shorter_line_blanks_the_rest_of_the_longer_one(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    stream = Tty()
    bar = Progress(stream, min_interval=0, width=4)
    bar(1, 2, "a_very_long_layer_name")
    first = stream.getvalue()[1:]
    bar(2, 2, "b")
    second = stream.getvalue()[1 + len(first) + 1:]
    assert len(second.rstrip("\n")) == len(first)      # padded with blanks to the old length


def test_long_names_are_cut_to_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    stream = Tty()
    Progress(stream, width=10)(1, 2, "x" * 200)
    line = stream.getvalue()[1:]
    assert len(line) <= 59 and "~" in line and line.startswith("[#####-----] 1/2  50.0%")


@pytest.mark.parametrize("make", [lambda: (io.StringIO(), {}), lambda: (Tty(), {"quiet": True})])
def test_silent_when_not_a_terminal_or_quiet(make):
    stream, kw = make()
    bar = Progress(stream, **kw)
    for i in range(1, 4):
        bar(i, 3, "conv")
    bar.close()
    assert stream.getvalue() == "" and bar.redraws == 0


def test_close_ends_an_interrupted_bar():
    stream = Tty()
    with Progress(stream) as bar:
        bar(1, 5, "conv1")
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1


@pytest.mark.parametrize("call, message", [
    (lambda p: p(4, 3, "x"), "done = 4: must be at most total = 3"),
    (lambda p: p(-1, 3, "x"), "done = -1: must be an integer >= 0"),
    (lambda p: p(1, 2.5, "x"), "total = 2.5: must be an integer >= 0"),
    (lambda p: Progress(Tty(), min_interval=-1), "min_interval = -1"),
    (lambda p: Progress(Tty(), width=0), "width = 0: must be an integer in 1..200"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call(Progress(Tty()))


# ------------------------------------------------------------------ executor per-layer progress
def _graph_and_chip():
    graph = Graph("tiny", (
        conv2d("conv1", 16, 8, 16, 3, padding=1),
        Pool(name="pool1", kind="max", in_h=16, in_w=16, channels=16, kernel_h=2, kernel_w=2,
             stride_h=2, stride_w=2),
        conv2d("conv2", 8, 16, 32, 3, padding=1),
        Gemm(name="fc", m=1, n=10, k=8 * 8 * 32)))
    small = SramConfig(capacity_kib=4)
    # an ideal vector engine: the pools get no commands (the layers these tests are about)
    chip = ChipConfig(array=ArrayConfig(rows=8, cols=8, dataflow="ws"), ifmap_sram=small,
                      filter_sram=small, ofmap_sram=small, vector=VectorConfig(ideal=True))
    return graph, chip


def test_executor_reports_each_layer_once_in_completion_order():
    graph, chip = _graph_and_chip()
    program = compile_graph(graph, chip)
    calls = []
    run = execute(program, chip, progress=lambda *a: calls.append(a))
    names = [ls.name for ls in program.layers]
    assert [c[0] for c in calls] == [1, 2, 3, 4]                  # monotonic, ends at total
    assert all(c[1] == 4 for c in calls)
    assert sorted(c[2] for c in calls) == sorted(names)            # each layer exactly once
    # pool1 has no commands: it completes as soon as conv1 (every layer before it) has.
    order = [c[2] for c in calls]
    assert order.index("pool1") == order.index("conv1") + 1
    assert program.layers[1].first == program.layers[1].last       # (pool1 really is empty)
    # A layer completes when its last command was simulated; the trace is the same as without
    # a callback.
    plain = execute(program, chip)
    assert (plain.trace.start == run.trace.start).all() and plain.cycles == run.cycles


def test_layers_without_commands_first_and_last():
    # pool0 has no commands and nothing before it: done at once; pool2 right after conv1.
    _, chip = _graph_and_chip()
    graph = Graph("edges", (
        Pool(name="pool0", kind="max", in_h=16, in_w=16, channels=8, kernel_h=2, kernel_w=2,
             stride_h=2, stride_w=2),
        conv2d("conv1", 8, 8, 16, 3, padding=1),
        Pool(name="pool2", kind="avg", in_h=8, in_w=8, channels=16, kernel_h=8, kernel_w=8,
             stride_h=8, stride_w=8)))
    calls = []
    execute(compile_graph(graph, chip), chip, progress=lambda *a: calls.append(a))
    assert calls == [(1, 3, "pool0"), (2, 3, "conv1"), (3, 3, "pool2")]


def test_executor_drives_the_bar_to_its_end():
    graph, chip = _graph_and_chip()
    stream = Tty()
    execute(compile_graph(graph, chip), chip, progress=Progress(stream, min_interval=0))
    out = stream.getvalue()
    assert out.count("\r") == 4 and out.endswith("\n") and "4/4 100.0%" in out


def test_executor_rejects_a_progress_that_is_not_callable():
    graph, chip = _graph_and_chip()
    with pytest.raises(ValueError, match="progress = 'yes': must be a callable"):
        execute(compile_graph(graph, chip), chip, progress="yes")
