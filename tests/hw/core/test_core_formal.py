"""Formal checks of the core's sequencer (hw.core.formal): SymbiYosys with z3, all from PyPI.

A two-tile program (two loads, two vector commands, two stores, sharing the scratchpads'
halves) is small enough to check in seconds: the dependency and port properties hold for every
timing of abstract engines, the bounded liveness holds, the done state is reachable, and the
``start-early`` sequencer mutation is caught. docs/core.md reports the same on a GEMM chain.
"""

import pytest

from compiler.backends.core import lower
from compiler.backends.systolic import compile_graph
from compiler.ir import Activation, Graph
from hw.core import formal
from hw.core.isa import core_chip

pytestmark = pytest.mark.skipif(formal.available() is not None,
                                reason=f"formal tools missing: {formal.available()}")


@pytest.fixture(scope="module")
def program():
    chip = core_chip()
    graph = Graph("two_tiles", (Activation(name="r", fn="relu", elements=900),))
    core = lower(compile_graph(graph, chip), graph, chip)
    assert [len(q) for q in core.queues] == [2, 0, 2, 2]
    return core


def test_the_sequencer_keeps_dependencies_ports_and_finishes(program, tmp_path):
    result = formal.check(program, latency=2, workdir=tmp_path)
    assert result.ok, result.log
    assert result.depth == formal.bound(program, 2) + 1


def test_the_done_state_is_reachable(program, tmp_path):
    result = formal.check(program, latency=2, mode="cover", workdir=tmp_path)
    assert result.ok, result.log


def test_a_sequencer_that_starts_early_is_caught(program, tmp_path):
    result = formal.check(program, latency=2, mutation="start-early", workdir=tmp_path)
    assert result.status == "FAIL"
    assert "failed assertion" in result.log
