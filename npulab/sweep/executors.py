"""Executors: where the jobs of a sweep run. ``serial`` (in this process), ``local`` (a process
pool) and ``ray`` (Ray tasks, on a cluster or a local one).

Every executor hands each result to the parent's ``on_result`` as it arrives (the parent is
the store's only writer). A worker process that dies takes no other point with it: the points
it may have been running are re-run one by one, and the one that kills its process again is
recorded failed.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from npulab.sweep.errors import SweepError
from npulab.sweep.evaluation import run_job
from npulab.sweep.lock import close_inherited

__all__ = ["EXECUTORS", "run_tasks"]

EXECUTORS = ("local", "serial", "ray")


def run_tasks(executor: str, tasks: list[dict], jobs: int | None, address: str | None,
              on_result: Callable[[dict], None]) -> None:
    """Run ``tasks`` (:func:`~npulab.sweep.points.point_job` dicts) with ``executor`` (one of
    :data:`EXECUTORS`; ``jobs`` workers, default all cores; ``address`` of a Ray cluster)."""
    if executor == "serial":
        for task in tasks:
            on_result(run_job(task))
    elif executor == "local":
        _run_local(tasks, jobs or os.cpu_count() or 1, on_result)
    else:
        _run_ray(tasks, jobs, address, on_result)


def _crash_result(job: dict, detail: str) -> dict:
    return {"id": job["id"], "status": "failed", "metrics": None,
            "error": f"WorkerDied: the worker process running this point died ({detail}); the "
                     f"point alone kills its process again",
            "elapsed_s": 0.0, "worker": None}


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (no traceback per worker),
    and do not keep the parent's directory lock alive (a killed parent releases it)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    close_inherited()


def _pool_context():
    import multiprocessing as mp
    # fork shares the parent's loaded modules and JIT-compiled kernels (fast start-up); other
    # platforms use their default start method.
    if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context()


def _run_local(tasks: list[dict], workers: int, on_result: Callable) -> None:
    """A process pool with at most ``2 * workers`` points in flight. When a worker process
    dies, the pool breaks and every point in flight is suspect: each is re-run alone in a
    one-process pool, and the one that breaks it again is recorded failed."""
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool
    ctx = _pool_context()
    queue = deque(tasks)
    while queue:
        suspects = []
        pool = ProcessPoolExecutor(max_workers=min(workers, len(queue)), mp_context=ctx,
                                   initializer=_ignore_sigint)
        in_flight = {}
        try:
            while queue or in_flight:
                while queue and len(in_flight) < 2 * workers:
                    task = queue.popleft()
                    in_flight[pool.submit(run_job, task)] = task
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                broken = False
                for fut in finished:
                    task = in_flight.pop(fut)
                    try:
                        on_result(fut.result())
                    except BrokenProcessPool:
                        suspects.append(task)
                        broken = True
                if broken:
                    suspects.extend(in_flight.values())
                    in_flight.clear()
                    break
        except BaseException:
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:          # our workers: stop what they run (an interrupt)
                if proc.is_alive():
                    proc.terminate()
            raise
        pool.shutdown(wait=True, cancel_futures=True)
        for task in suspects:
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx,
                                     initializer=_ignore_sigint) as alone:
                try:
                    result = alone.submit(run_job, task).result()
                except BrokenProcessPool as exc:
                    result = _crash_result(task, str(exc) or "BrokenProcessPool")
            on_result(result)


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise SweepError(f"--executor ray needs the ray package ({exc}); install it with "
                         f"pip install 'npulab[ray]'") from None
    return ray


def _run_ray(tasks: list[dict], jobs: int | None, address: str | None,
             on_result: Callable) -> None:
    """Ray tasks (one per point, no retries). ``address``: ``ray.init(address=...)``;
    none: an already initialised Ray, or a new local cluster (``num_cpus=jobs``). A task whose
    worker died is recorded failed; at most ``2 x cluster CPUs`` tasks are in flight."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        kwargs = {"include_dashboard": False, "log_to_driver": False}
        if address is not None:
            kwargs["address"] = address
        elif jobs is not None:
            kwargs["num_cpus"] = jobs
        ray.init(**kwargs)
        started = True
    in_flight: dict = {}
    try:
        remote = ray.remote(max_retries=0, num_cpus=1)(run_job)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        limit = 2 * max(1, cpus if jobs is None else min(jobs, cpus))
        queue = list(reversed(tasks))
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                task = queue.pop()
                in_flight[remote.remote(task)] = task
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                task = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError,
                        ray.exceptions.NodeDiedError) as exc:
                    result = _crash_result(task, f"{type(exc).__name__}: "
                                                 f"{str(exc).splitlines()[0]}")
                on_result(result)
    finally:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
