"""Glue between the plan search (:mod:`compiler.parallel.search`) and a system (``hw.system``).

:func:`search` times ops with the system's device (:func:`npulab.devices.device_model`, as
``npulab system`` does) and collectives with its network in closed form (``comm="analytic"``,
fast) or simulated (``"sim"``); then re-times the ``verify`` best plans with the simulated
network, and any hand-written strategies given in ``compare`` (e.g. a published plan) the same
way as the found ones, so the two can be set side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from compiler.parallel import parse_strategy, plan_step
from compiler.parallel.llm import TransformerModel
from compiler.parallel.search import SearchResult, SearchSpace, search_plans, strategy_text
from hw.system.system import SystemConfig
from npulab.devices import device_model
from npulab.system_run import comm_time_for, host_for

__all__ = ["PlanSearch", "search", "parse_compare", "goodput_table"]


@dataclass
class PlanSearch:
    """A search's result on a system, with its simulated-network check and comparisons."""

    system: SystemConfig
    n_devices: int
    result: SearchResult
    comm_mode: str
    verified: list = field(default_factory=list)     # dicts: strategy, micro_batch, steps
    compared: list = field(default_factory=list)     # dicts: strategy, micro_batch, report

    @property
    def best(self):
        return self.result.best

    def to_dict(self) -> dict:
        out = {"system": self.system.name, "n_devices": self.n_devices,
               "comm_mode": self.comm_mode}
        out.update(self.result.to_dict())
        out["verified"] = self.verified
        out["compared"] = [{k: v for k, v in c.items() if k != "report"} for c in self.compared]
        return out


def parse_compare(text: str) -> tuple[str, int | None]:
    """``"dp=8,tp=8,pp=16,recompute=full@1"`` -> (strategy text, micro-batch 1); without
    ``@N`` the model's micro-batch."""
    if "@" in text:
        st, mb = text.rsplit("@", 1)
        try:
            mbi = int(mb)
        except ValueError:
            raise ValueError(f"--compare {text!r}: the micro-batch after '@' must be an "
                             f"integer, e.g. dp=8,tp=8,pp=16@1") from None
        if mbi < 1:
            raise ValueError(f"--compare {text!r}: the micro-batch must be >= 1")
        return st, mbi
    return text, None


def search(system: SystemConfig, model: TransformerModel, *, n_devices: int | None = None,
           global_batch: int | None = None, space: SearchSpace | None = None,
           comm_mode: str = "analytic", verify: int = 3, compare: tuple = (),
           dtype_bytes: int = 2, progress=None, input_pipeline=None) -> PlanSearch:
    """Search ``model``'s plans on the first ``n_devices`` chips of ``system`` (module
    docstring)."""
    n = system.topology.n_ranks if n_devices is None else n_devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= system.topology.n_ranks:
        raise ValueError(f"--chips {n!r}: must be an integer in 1..{system.topology.n_ranks} "
                         f"(the chips of system {system.name!r})")
    if comm_mode not in ("analytic", "sim"):
        raise ValueError(f"--comm {comm_mode!r}: must be analytic or sim")
    if isinstance(verify, bool) or not isinstance(verify, int) or verify < 0:
        raise ValueError(f"--verify {verify!r}: must be an integer >= 0")
    gb = model.global_batch if global_batch is None else global_batch
    wanted = []
    for text in compare:               # checked before the search, which may take a minute
        st_text, mb = parse_compare(text)
        st = parse_strategy(st_text)
        if st.n_ranks != n:
            raise ValueError(f"--compare {text!r}: dp*tp*pp = {st.n_ranks}; the search has "
                             f"{n} chips")
        per = st.dp * (mb or model.micro_batch)
        if st.microbatches is not None and st.microbatches * per != gb:
            raise ValueError(f"--compare {text!r}: dp x m x micro-batch = "
                             f"{st.microbatches * per}, not the searched global batch {gb}: "
                             f"drop m= (it follows from the batch) or give m = {gb / per:g}")
        wanted.append((text, st, mb))
    device = device_model(system.device, dtype_bytes)
    mem, peak = device.memory_bytes, device.peak_flops
    comm = comm_time_for(system, mode=comm_mode)
    res = search_plans(model, n, device.op_seconds, comm, global_batch=gb,
                       device_mem_bytes=mem, peak_flops=peak, dtype_bytes=dtype_bytes,
                       space=space, progress=progress, input_pipeline=input_pipeline,
                       host=host_for(system))
    out = PlanSearch(system, n, res, comm_mode)
    sim = comm if comm_mode == "sim" else comm_time_for(system, mode="sim")
    for c in res.evaluated[:verify]:
        r = plan_step(c.model, c.strategy, n, None, device.op_seconds, sim,
                      device_mem_bytes=mem, dtype_bytes=dtype_bytes, peak_flops=peak,
                      layer_plan=c.layer_plan, input_pipeline=input_pipeline,
                      host=host_for(system))
        out.verified.append({"strategy": c.text, "micro_batch": c.micro_batch,
                             "step_s": c.step_s, "sim_step_s": r.step_s,
                             "sim_tokens_per_s": r.tokens_per_s})
    for text, st, mb in wanted:
        mdl = replace(model, global_batch=gb, micro_batch=mb or model.micro_batch)
        r = plan_step(mdl, st, n, None, device.op_seconds, comm, device_mem_bytes=mem,
                      dtype_bytes=dtype_bytes, peak_flops=peak, input_pipeline=input_pipeline,
                      host=host_for(system))
        out.compared.append({"strategy": strategy_text(st), "micro_batch": mdl.micro_batch,
                             "step_s": r.step_s, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu,
                             "memory_bytes": r.memory["total"], "fits": r.fits,
                             "breakdown": r.breakdown(),
                             "best_speedup": r.step_s / res.best.step_s, "report": r})
        if not math.isfinite(r.step_s):
            raise ValueError(f"--compare {text!r}: the step time is not finite")
    return out


def goodput_table(searches: list, noise_scale: float | None) -> list[dict]:
    """One row per global batch: its best plan's throughput, statistical efficiency against the
    smallest batch (``(B_noise + M0) / (B_noise + M)``, Pollux; 1 without a noise scale) and
    goodput = throughput x efficiency (:mod:`compiler.parallel.training`)."""
    from compiler.parallel.training import statistical_efficiency
    base = min(ps.result.global_batch for ps in searches)
    rows = []
    for ps in searches:
        r = ps.best.report
        gb = ps.result.global_batch
        eff = statistical_efficiency(gb, noise_scale, base) if noise_scale else 1.0
        rows.append({"global_batch": gb, "strategy": ps.best.text,
                     "micro_batch": ps.best.micro_batch, "step_s": r.step_s,
                     "samples_per_s": r.samples_per_s, "efficiency": eff,
                     "goodput": r.samples_per_s * eff})
    return rows
