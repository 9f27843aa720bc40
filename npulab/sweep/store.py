"""The SQLite store of a sweep directory (``DIR/sweep.sqlite``): one row per design point.

The parent process is the only writer; each result is its own committed transaction, so a
killed sweep loses nothing it stored and resumes where it stopped.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable

from npulab.sweep.errors import SweepError
from npulab.sweep.points import DesignPoint

__all__ = ["SweepStore", "STORE_NAME", "SCHEMA"]

STORE_NAME = "sweep.sqlite"
SCHEMA = "npulab.sweep/1"


class SweepStore:
    """``DIR/sweep.sqlite``: table ``meta`` (key, value) and table ``points`` (one row per
    design point: ``id`` primary key, ``idx``, ``params`` JSON, ``status`` pending | done |
    failed, ``metrics`` JSON, ``error``, ``elapsed_s``, ``worker``, ``attempts``). WAL journal;
    each :meth:`record` is its own committed transaction. A file that SQLite cannot read (not
    a database, damaged) raises :class:`SweepError` naming it, from any method."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db = None
        with self._guard():
            self.db = sqlite3.connect(str(self.path), timeout=30.0)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            with self.db:
                self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, "
                                "value TEXT)")
                self.db.execute(
                    "CREATE TABLE IF NOT EXISTS points (id TEXT PRIMARY KEY, idx INTEGER NOT "
                    "NULL, params TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending', "
                    "metrics TEXT, error TEXT, elapsed_s REAL, worker TEXT, attempts INTEGER "
                    "NOT NULL DEFAULT 0)")

    @contextmanager
    def _guard(self):
        """sqlite3 errors -> one :class:`SweepError` naming the file and what to do."""
        try:
            yield
        except (sqlite3.DatabaseError, ValueError) as exc:
            if isinstance(exc, SweepError):
                raise
            if self.db is not None:
                self.db.close()
            raise SweepError(
                f"{self.path}: damaged or not a sweep store ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'unreadable'}); move it aside and "
                f"run the sweep again into a new -o DIR (points.csv, if written, keeps the "
                f"results of the last report)") from None

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    def __enter__(self) -> "SweepStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        with self._guard():
            return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def set_meta(self, **values) -> None:
        with self._guard(), self.db:
            self.db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in values.items()])

    def add_points(self, points: Iterable[DesignPoint]) -> None:
        """Insert points not stored yet (pending)."""
        with self._guard(), self.db:
            self.db.executemany("INSERT OR IGNORE INTO points (id, idx, params) VALUES (?, ?, ?)",
                                [(p.id, p.index, json.dumps(p.params)) for p in points])

    def statuses(self) -> dict[str, str]:
        with self._guard():
            return dict(self.db.execute("SELECT id, status FROM points"))

    def record(self, result: dict) -> None:
        metrics = None if result["metrics"] is None else json.dumps(result["metrics"])
        with self._guard(), self.db:
            self.db.execute("UPDATE points SET status = ?, metrics = ?, error = ?, elapsed_s = ?, "
                            "worker = ?, attempts = attempts + 1 WHERE id = ?",
                            (result["status"], metrics, result["error"], result["elapsed_s"],
                             result["worker"], result["id"]))

    def rows(self) -> list[dict]:
        """Every point in index order, JSON decoded."""
        out = []
        with self._guard():
            cur = self.db.execute("SELECT id, idx, params, status, metrics, error, elapsed_s, "
                                  "worker, attempts FROM points ORDER BY idx")
            for pid, idx, params, status, metrics, error, elapsed, worker, attempts in cur:
                out.append({"id": pid, "index": idx, "params": json.loads(params),
                            "status": status,
                            "metrics": None if metrics is None else json.loads(metrics),
                            "error": error, "elapsed_s": elapsed, "worker": worker,
                            "attempts": attempts})
        return out

    def counts(self) -> dict[str, int]:
        out = {"pending": 0, "done": 0, "failed": 0}
        with self._guard():
            for status, n in self.db.execute("SELECT status, COUNT(*) FROM points "
                                             "GROUP BY status"):
                out[status] = n
        return out
