"""One writer per sweep directory: an OS lock on ``DIR/sweep.lock``.

:class:`SweepLock` takes an exclusive ``fcntl.flock`` on ``DIR/sweep.lock`` and writes who holds
it (``{"pid", "host", "started"}``, JSON) into the file. The operating system drops the lock
when the holder's last descriptor closes, so a sweep that is killed (even with SIGKILL) never
leaves a stale lock: the next ``--resume`` takes it. The file itself stays (it is harmless and
is not part of the results).

A second sweep on the same directory either fails at once with :class:`SweepLocked` (a
:class:`~npulab.sweep.errors.SweepError` naming the holder's pid, host and start time) or, with
``wait=True``, blocks until the holder ends. On platforms without ``fcntl`` (Windows) there is
no lock. Pool workers forked while the lock is held must call :func:`close_inherited` so that a
worker outliving a killed parent does not keep the lock.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Callable

from npulab.sweep.errors import SweepError

try:
    import fcntl
except ImportError:         # pragma: no cover - not POSIX
    fcntl = None

__all__ = ["SweepLock", "SweepLocked", "LOCK_NAME", "close_inherited"]

LOCK_NAME = "sweep.lock"

_HELD: set[int] = set()         # descriptors this process holds locks with


class SweepLocked(SweepError):
    """Another process holds the lock of a sweep directory."""


def close_inherited() -> None:
    """In a forked child: close the lock descriptors inherited from the parent (the parent
    keeps its lock; the child no longer keeps it alive)."""
    while _HELD:
        fd = _HELD.pop()
        try:
            os.close(fd)
        except OSError:
            pass


def _holder_text(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(float(info["started"])))
        return f"pid {int(info['pid'])} on {info['host']}, started {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


class SweepLock:
    """The exclusive lock of sweep directory ``out_dir`` (a context manager; the directory
    must exist). ``wait``: block until the holder ends instead of raising;
    ``notice(text)`` is called once when waiting starts."""

    def __init__(self, out_dir: str | Path, *, wait: bool = False,
                 notice: Callable[[str], None] | None = None):
        self.path = Path(out_dir) / LOCK_NAME
        self.wait = wait
        self.notice = notice
        self.fd: int | None = None

    def acquire(self) -> "SweepLock":
        if fcntl is None:
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SweepError(f"{self.path}: cannot open the sweep lock file "
                             f"({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_text(self.path)
            if not self.wait:
                os.close(fd)
                raise SweepLocked(
                    f"{self.path.parent}: another sweep is running there ({holder}); wait for "
                    f"it to end, or pass --wait to start when it does") from None
            if self.notice is not None:
                self.notice(f"npulab sweep: {self.path.parent} is in use ({holder}); waiting "
                            f"for it to end")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.time()}).encode())
        self.fd = fd
        _HELD.add(fd)
        return self

    def release(self) -> None:
        if self.fd is not None:
            _HELD.discard(self.fd)
            os.close(self.fd)       # closing the last descriptor drops the lock
            self.fd = None

    def __enter__(self) -> "SweepLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
