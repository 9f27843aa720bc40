"""Evaluating one design point: a chip point through the simulator and the metrics, a system
point through :func:`npulab.system_run.plan`.

Workers run :func:`run_job`, which never raises: a point that fails is a result (``failed``,
``Type: message``), not a crash of the sweep.
"""

from __future__ import annotations

import os
import socket
import time

from npulab.sweep.spec import _fill_chips

__all__ = ["evaluate", "run_job"]


def evaluate(job: dict) -> dict:
    """Run one job (:func:`~npulab.sweep.points.point_job`) and return its metrics (a flat
    dict of scalars); raises whatever the models raise for a bad point."""
    if job["kind"] == "chip":
        return _evaluate_chip(job)
    return _evaluate_system(job)


def _evaluate_chip(job: dict) -> dict:
    from compiler.frontends import zoo
    from compiler.options import CompileOptions
    from hw.configfile import load_chip_config
    from npulab.metrics import compute_metrics
    from npulab.pipeline import RunOptions, run as run_workload
    chip = load_chip_config(job["config"], job["overrides"])
    try:
        # the sweep's energy table also costs the mapper's choices ([run] map = "best-energy")
        options = CompileOptions(**{"tech": job["tech"], **job["run"]})
    except TypeError as exc:
        raise ValueError(f"[run]: {exc}") from None
    params = {k: v for k, v in job["workload"].items() if k != "model"}
    graph = zoo.get(job["workload"]["model"], **params)
    run = run_workload(graph, chip, RunOptions(timing=job["timing"], compile=options))
    m = compute_metrics(run, job["tech"], dram_kind=job["dram_type"],
                        link_kind=job["link_type"])
    n, t = m.network, run.totals
    native = job["timing"] == "native"
    dram = (t["dram_read_bytes"] + t["dram_write_bytes"]) if native else None
    return {
        "cycles": int(n["cycles"]), "latency_s": n["seconds"],
        "inferences_per_s": n["inferences_per_s"], "energy_j": n["energy_j"],
        "energy_per_inference_j": n["energy_per_inference_j"], "power_w": n["average_power_w"],
        "peak_power_w": n["peak_power_w"], "tops_per_w": n["tops_per_w"],
        "effective_tops": n["ops_per_s"] / 1e12, "peak_tops": n["peak_ops_per_s"] / 1e12,
        "utilization": n["compute_utilization"], "area_mm2": m.chip["area_total_mm2"],
        "edp_js": n["energy_j"] * n["seconds"], "dram_bytes": dram,
        "stall_dram_cycles": t.get("stall_dram_cycles") if native else None,
        "memory_bound_layers": t.get("memory_bound_layers") if native else None,
    }


def _evaluate_system(job: dict) -> dict:
    from hw.system.system import load_system
    from npulab.system_run import plan, resolve_model
    chips = job["chips"]
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise ValueError(f"chips = {chips!r}: must be an integer >= 1")
    system = load_system(_fill_chips(job["system"], chips, "system"),
                         link_gbps=job["link_gbps"], link_latency_ns=job["link_latency_ns"],
                         device=job["device"])
    w = job["workload"]
    model = resolve_model(w["model"], **{k: v for k, v in w.items() if k != "model"})
    if job["comm"] not in ("sim", "analytic"):
        raise ValueError(f"comm = {job['comm']!r}: must be sim or analytic")
    p = plan(system, model, _fill_chips(job["strategy"], chips, "strategy"),
             comm_mode=job["comm"], algorithm=job["algorithm"],
             microbatches=job["microbatches"])
    r = p.report
    return {
        "step_s": r.step_s, "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s,
        "scaling_efficiency": p.scaling_efficiency, "speedup": p.baseline.step_s / r.step_s,
        "compute_s": r.compute_s, "exposed_comm_s": r.exposed_comm_s, "bubble_s": r.bubble_s,
        "optimizer_s": r.optimizer_s, "memory_gb": r.memory["total"] / 1e9,
        "fits": None if r.fits is None else int(r.fits), "mfu": r.mfu, "ranks": r.n_ranks,
        "microbatches": r.microbatches,
    }


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_job(job: dict) -> dict:
    """Run one job, never raising: ``{"id", "status": "done"|"failed", "metrics", "error",
    "elapsed_s", "worker"}`` (this is what executors ship back to the parent)."""
    start = time.perf_counter()
    try:
        metrics, error, status = evaluate(job), None, "done"
    except Exception as exc:     # a failing point is a result, not a crash of the sweep
        metrics, status = None, "failed"
        error = f"{type(exc).__name__}: {exc}"
    return {"id": job["id"], "status": status, "metrics": metrics, "error": error,
            "elapsed_s": time.perf_counter() - start, "worker": _worker_name()}
