"""The error type of sweep directories, in a module of its own so that every part of the
sweep (the store, the lock, the runner, the report) raises the same type without importing
the others."""

from __future__ import annotations

__all__ = ["SweepError"]


class SweepError(ValueError):
    """An output directory that does not fit the request (not empty, another sweep, ...)."""
