"""Running a sweep: :func:`run_sweep` checks and locks the output directory, opens its store,
runs the points not stored yet on an executor and records each result as it arrives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from npulab.sweep.errors import SweepError
from npulab.sweep.executors import EXECUTORS, _import_ray, run_tasks
from npulab.sweep.load import load_spec
from npulab.sweep.lock import LOCK_NAME, SweepLock
from npulab.sweep.points import expand, point_job
from npulab.sweep.report import write_report
from npulab.sweep.results import SweepResults, load_results
from npulab.sweep.spec import SweepSpec
from npulab.sweep.store import SCHEMA, STORE_NAME, SweepStore

__all__ = ["run_sweep", "SweepSummary"]

SPEC_COPY = "spec.toml"


@dataclass(frozen=True)
class SweepSummary:
    """What one :func:`run_sweep` call did: ``ran`` points this call (``done`` + ``failed`` of
    them), ``skipped`` already stored, totals in the store after the call."""

    out_dir: str
    total: int
    ran: int
    done: int
    failed: int
    skipped: int
    wall_s: float
    stored_done: int
    stored_failed: int
    interrupted: bool = False

    @property
    def points_per_s(self) -> float:
        return self.ran / self.wall_s if self.wall_s > 0 else 0.0

    def __repr__(self) -> str:
        return f"SweepSummary: {self.line()}"

    def results(self) -> "SweepResults":
        """The points stored in :attr:`out_dir` (:func:`load_results`)."""
        return load_results(self.out_dir)

    def line(self) -> str:
        from npulab.progress import _clock_text
        return (f"npulab sweep: {self.ran} run ({self.done} done, {self.failed} failed), "
                f"{self.skipped} skipped, in {_clock_text(self.wall_s)} "
                f"({self.points_per_s:.2f} points/s); store: {self.stored_done} done, "
                f"{self.stored_failed} failed of {self.total}"
                f"{' (interrupted: continue with --resume)' if self.interrupted else ''}; "
                f"results in {self.out_dir}")


def _check_dir(out: Path, resume: bool) -> None:
    """Raise unless ``out`` can take this sweep (the lock file alone does not count)."""
    store_path = out / STORE_NAME
    if out.exists() and not out.is_dir():
        raise SweepError(f"-o {out}: exists and is not a directory")
    nonempty = out.is_dir() and any(f.name != LOCK_NAME for f in out.iterdir())
    if nonempty and not resume:
        what = "holds a sweep" if store_path.is_file() else "is not empty"
        raise SweepError(f"-o {out}: {what}; pass --resume to continue the sweep there, or "
                         f"choose another directory")
    if nonempty and not store_path.is_file():
        raise SweepError(f"-o {out}: --resume: no {STORE_NAME} there (not a sweep directory) "
                         f"and the directory is not empty")


def _lock_dir(out: Path, resume: bool, wait: bool, notice):
    """Check ``out``, create it and take its lock (:class:`npulab.sweep.lock.SweepLock`);
    checked again under the lock (another sweep may have started there meanwhile)."""
    _check_dir(out, resume)
    out.mkdir(parents=True, exist_ok=True)
    lock = SweepLock(out, wait=wait, notice=notice).acquire()
    try:
        _check_dir(out, resume)
    except BaseException:
        lock.release()
        raise
    return lock


def _prepare_dir(spec: SweepSpec, out: Path, resume: bool) -> SweepStore:
    """Open (or create) the store in ``out`` (checked and locked by :func:`_lock_dir`)."""
    store_path = out / STORE_NAME
    fresh = not store_path.is_file()
    store = SweepStore(store_path)
    if fresh:
        store.set_meta(schema=SCHEMA, design_hash=spec.design_hash(), spec=spec.report_info(),
                       spec_path=spec.path)
    else:
        meta = store.meta()
        if meta.get("schema") != SCHEMA:
            store.close()
            raise SweepError(f"{store_path}: not an npulab sweep store (schema "
                             f"{meta.get('schema')!r}, expected {SCHEMA!r})")
        if meta.get("design_hash") != spec.design_hash():
            store.close()
            raise SweepError(f"{spec.path}: the design (kind, base, run options, settings, "
                             f"workloads or axes) differs from the sweep in {out} (started from "
                             f"{meta.get('spec_path')}); objectives and constraints may change on "
                             f"resume, anything else needs a new -o DIR")
        store.set_meta(spec=spec.report_info(), spec_path=spec.path)
    if spec.text:
        (out / SPEC_COPY).write_text(spec.text, encoding="utf-8")
    return store


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, *, executor: str = "local",
              jobs: int | None = None, address: str | None = None, resume: bool = False,
              retry_failed: bool = False, progress: Callable | None = None,
              report: bool = False, limit: int | None = None, wait: bool = False,
              notice: Callable[[str], None] | None = None) -> SweepSummary:
    """Run every point of ``spec`` not stored yet in ``out_dir`` (:mod:`npulab.sweep`).

    ``resume``: continue the sweep stored in ``out_dir`` (skip done and failed points; with
    ``retry_failed`` run failed ones again); without it ``out_dir`` must be empty or new.
    ``progress``: a ``progress(done, total, name)`` callable (:class:`npulab.progress.Progress`).
    ``report``: also :func:`write_report` at the end. ``limit``: run at most the first N
    points that are due (in index order; the rest stay pending). A KeyboardInterrupt stops the sweep
    cleanly (``interrupted`` in the summary; stored results stay).

    One sweep at a time writes a directory (:mod:`npulab.sweep.lock`): when another process
    holds ``out_dir``, raise :class:`~npulab.sweep.lock.SweepLocked` naming it, or with
    ``wait`` block until it ends (``notice(text)`` says so once)."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    if executor not in EXECUTORS:
        raise ValueError(f"executor = {executor!r}: must be one of {', '.join(EXECUTORS)}")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs = {jobs!r}: must be an integer >= 1")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit = {limit!r}: must be an integer >= 1")
    if address is not None and executor != "ray":
        raise ValueError(f"address = {address!r}: applies to the ray executor only")
    if retry_failed:
        resume = True
    if executor == "ray":
        _import_ray()
    points = expand(spec)
    out = Path(out_dir)
    lock = _lock_dir(out, resume, wait, notice)
    try:
        store = _prepare_dir(spec, out, resume)
    except BaseException:
        lock.release()
        raise
    try:
        store.add_points(points)
        status = store.statuses()
        rerun = ("pending", "failed") if retry_failed else ("pending",)
        todo = [p for p in points if status[p.id] in rerun]
        skipped = len(points) - len(todo)
        if limit is not None:
            todo = todo[:limit]
        labels = {p.id: p.label() for p in todo}
        counts = {"done": 0, "failed": 0}
        start = time.perf_counter()

        def on_result(result: dict) -> None:
            store.record(result)
            counts[result["status"]] += 1
            if progress is not None:
                progress(counts["done"] + counts["failed"], len(todo), labels[result["id"]])

        tasks = [point_job(spec, p) for p in todo]
        interrupted = False
        try:
            if todo:
                run_tasks(executor, tasks, jobs, address, on_result)
        except KeyboardInterrupt:
            interrupted = True
        wall = time.perf_counter() - start
        stored = store.counts()
    finally:
        store.close()
        lock.release()
    summary = SweepSummary(out_dir=str(out), total=len(points),
                           ran=counts["done"] + counts["failed"], done=counts["done"],
                           failed=counts["failed"], skipped=skipped, wall_s=wall,
                           stored_done=stored["done"], stored_failed=stored["failed"],
                           interrupted=interrupted)
    if report and not interrupted:
        write_report(out)
    return summary
