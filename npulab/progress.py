"""A one-line progress bar on stderr for long runs.

:class:`Progress` is the ``progress(done, total, name)`` callback that
:func:`npulab.simulate.simulate`, :func:`npulab.nvdla_run.simulate_nvdla` and
:func:`hw.executor.execute` accept::

    [####----------------] 12/53  22.6%  layer2.0.conv1  0:03 elapsed, ETA 0:10

It redraws in place with ``\\r`` at most ``1 / min_interval`` times a second (the final state is
always drawn) and ends with a newline when ``done == total`` (a repeated final call is ignored;
a later ``done < total`` starts a new bar). It draws nothing when the stream
is not a terminal (``isatty()`` false: logs, pipes, CI) or when ``quiet=True``, so scripts and
redirected output stay clean.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from typing import Callable, Iterator

__all__ = ["Progress", "compile_notice"]


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Callable ``progress(done, total, name)`` drawing a bar on ``stream`` (default stderr).

    ``quiet``: draw nothing. ``min_interval``: seconds between redraws (default 0.1, i.e. at
    most ~10 per second). ``width``: bar characters. ``clock``: a monotonic time source in
    seconds (``time.monotonic``; tests pass a fake). Elapsed time counts from construction; the
    ETA assumes the remaining items take as long on average as the finished ones, not counting
    the seconds ``overhead()`` returns (one-off work such as compiling kernels: see
    :func:`compile_notice`).
    """

    def __init__(self, stream=None, *, quiet: bool = False, min_interval: float = 0.1,
                 width: int = 20, clock=time.monotonic):
        if isinstance(min_interval, bool) or not isinstance(min_interval, (int, float)) \
                or not min_interval >= 0:
            raise ValueError(f"min_interval = {min_interval!r}: must be a number of seconds >= 0")
        if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 200:
            raise ValueError(f"width = {width!r}: must be an integer in 1..200")
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = not quiet and callable(isatty) and bool(isatty())
        self.min_interval = float(min_interval)
        self.width = width
        self.clock = clock
        self.start = clock()
        self._last_draw: float | None = None
        self._shown = 0          # characters of the line currently on screen
        self._open = False       # a line is drawn and not yet ended
        self._finished = False   # the last call drew the final state
        self.redraws = 0
        self.overhead: Callable[[], float] = lambda: 0.0

    def __call__(self, done: int, total: int, name: str = "") -> None:
        for key, v in (("done", done), ("total", total)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"progress: {key} = {v!r}: must be an integer >= 0")
        if done > total:
            raise ValueError(f"progress: done = {done}: must be at most total = {total}")
        if not self.enabled:
            return
        final = done == total
        if final and self._finished:
            return              # the same end reported twice (e.g. executor, then runner)
        self._finished = False
        now = self.clock()
        if not final and self._last_draw is not None \
                and now - self._last_draw < self.min_interval:
            return
        self._draw(self.line(done, total, str(name), now - self.start))
        self._last_draw = now
        if final:
            self.stream.write("\n")
            self._open = False
            self._shown = 0
            self._finished = True
        self.stream.flush()

    def line(self, done: int, total: int, name: str, elapsed: float) -> str:
        """The text of the bar (without ``\\r``), fitted to the terminal's width."""
        frac = done / total if total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        digits = len(str(total))
        times = f"{_clock_text(elapsed)} elapsed"
        if 0 < done < total:
            working = max(elapsed - self.overhead(), 0.0)
            times += f", ETA {_clock_text(working * (total - done) / done)}"
        head = f"[{bar}] {done:>{digits}}/{total} {100.0 * frac:5.1f}%"
        columns = shutil.get_terminal_size((80, 24)).columns - 1
        room = columns - len(head) - len(times) - 4
        if room < len(name):
            name = name[:max(room - 1, 0)] + "~" if room > 1 else ""
        return f"{head}  {name}  {times}" if name else f"{head}  {times}"

    def _draw(self, text: str) -> None:
        pad = max(0, self._shown - len(text))   # blank what a longer previous line left
        self.stream.write("\r" + text + " " * pad)
        self._shown = len(text)
        self._open = True
        self.redraws += 1

    def note(self, text: str) -> None:
        """Write one line of text above the bar (ending a bar line left open), when the bar
        would be drawn (a terminal, not quiet)."""
        if not self.enabled:
            return
        if self._open:
            self.stream.write("\n")
            self._open = False
            self._shown = 0
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_draw = None

    def close(self) -> None:
        """End a line left open (a run stopped before ``done == total``)."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
            self._shown = 0

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def compile_notice(progress: Progress | None = None, stream=None) -> Iterator[object]:
    """While the body runs: say once, on a terminal, that Numba is compiling npulab's kernels (a
    cold cache: the first run of an installed version), and keep ``progress``'s ETA free of the
    seconds spent compiling. Yields the :class:`hw._jitcache.CompileWatch`."""
    from hw._jitcache import CompileWatch
    bar = progress if progress is not None else Progress(stream)

    def first(cache_dir) -> None:
        bar.note(f"npulab: compiling simulation kernels once for this version (cached in "
                 f"{cache_dir}); later runs start at once")

    watch = CompileWatch(on_first=first)
    bar.overhead = watch.compiling_seconds
    with watch:
        yield watch
