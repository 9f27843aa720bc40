"""Start-up of the command line (issue 21, items 15 and 16): ``--version`` and every ``--help``
load neither numpy nor Numba (the measured times are in benchmarks/bench_startup.py), each
command's options are built only when it is named, the one-line help table equals what each
command registers, and the compile notice / ETA behave on a terminal."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npulab import cli
from npulab.progress import Progress, compile_notice

REPO = Path(__file__).resolve().parents[2]
COMMANDS = list(cli.COMMANDS)

_PROBE = textwrap.dedent("""
    import json, sys
    from npulab import cli
    try:
        cli.main(sys.argv[1:])
    except SystemExit:
        pass
    loaded = [m for m in ("numpy", "numba") if type(sys.modules.get(m)).__name__ == "module"]
    print(json.dumps(loaded), file=sys.stderr)
""")


def _heavy_modules_loaded(argv: list[str]) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=REPO, text=True,
                          capture_output=True, timeout=120)
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--version"], ["--help"]] + [[c, "--help"] for c in COMMANDS],
                         ids=lambda a: " ".join(a))
def test_version_and_every_help_load_neither_numpy_nor_numba(argv):
    # Before issue 21 every one of these imported Numba and the DRAM kernels (1.2 s).
    assert _heavy_modules_loaded(argv) == []


def test_the_command_table_is_what_each_command_registers():
    parser = cli.build_parser()            # every command built in full
    sub = parser._subparsers._group_actions[0]
    registered = {choice.dest: choice.help for choice in sub._choices_actions}
    assert registered == {name: text for name, (_, text) in cli.COMMANDS.items()}
    assert list(registered) == COMMANDS    # the order npulab --help lists them


@pytest.mark.parametrize("command", COMMANDS)
def test_a_lazily_built_command_has_the_same_options_as_the_full_parser(command):
    def options(parser):
        sub = parser._subparsers._group_actions[0]
        return sorted(s for a in sub.choices[command]._actions for s in a.option_strings)
    assert options(cli.build_parser([command, "--help"])) == options(cli.build_parser())


def test_top_level_help_lists_every_command_without_building_them():
    lazy, full = io.StringIO(), io.StringIO()
    cli.build_parser(["--help"]).print_help(lazy)
    cli.build_parser().print_help(full)
    assert lazy.getvalue() == full.getvalue()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_compile_notice_is_said_once_and_the_eta_leaves_compile_time_out():
    stream, clock = _Tty(), _Clock()
    bar = Progress(stream, min_interval=0.0, clock=clock)
    with compile_notice(bar) as watch:
        watch.clock = clock
        for _ in range(2):                 # two kernels; the second compiles a callee inside
            watch.on_start(None)
            watch.on_start(None)
            clock.now += 5.0               # 10 s of compiling in all
            watch.on_end(None)
            watch.on_end(None)
        clock.now += 2.0                   # then 1 of 4 layers done in 2 s of real work
        bar(1, 4, "layer0")
    text = stream.getvalue()
    assert text.count("compiling simulation kernels") == 1
    assert watch.kernels == 2 and watch.seconds == pytest.approx(10.0)
    # 12 s elapsed, of which 10 s compiling: 3 layers left x 2 s = 6 s, not 3 x 12 = 36 s.
    assert "0:12 elapsed, ETA 0:06" in text


def test_compile_notice_is_silent_off_a_terminal():
    stream = io.StringIO()
    with compile_notice(Progress(stream)) as watch:
        watch.on_start(None)
        watch.on_end(None)
    assert stream.getvalue() == ""


def test_compile_watch_sees_a_real_numba_compilation():
    from numba import njit

    @njit
    def add_one(x):                        # not cached: compiles in this process
        return x + 1

    with compile_notice(Progress(io.StringIO())) as watch:
        assert add_one(41) == 42
    assert watch.kernels == 1 and watch.seconds > 0
