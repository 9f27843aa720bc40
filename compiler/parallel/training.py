"""The rest of a training step: the input pipeline, gradient compression and goodput.

Closed forms, composed into a step by :func:`compiler.parallel.step.plan_step`.

**Input pipeline** (:class:`InputPipeline`), per data-parallel replica and step (its samples
are ``m * b``; tensor-parallel ranks of a replica share one loader, as Megatron-LM's data
loader on TP rank 0): a batch goes through three stages one after another, as a PyTorch
``DataLoader`` batch does:

* storage: ``latency + bytes / storage bandwidth``;
* CPU preprocessing (decode, augment, tokenize, collate): ``samples / (workers x samples per
  second per worker)``;
* host to device: ``device bytes / host-link bandwidth`` from pinned memory; from pageable
  memory the driver first copies into a pinned staging buffer (CUDA C Programming Guide,
  "Page-Locked Host Memory"; NVIDIA's "How to Optimize Data Transfers in CUDA C/C++"), so
  ``+ device bytes / host memcpy bandwidth``.

``load = storage + cpu + h2d``. Without prefetch (``prefetch = 0``) the step waits for its
batch: ``step = load + compute``. With prefetch (``prefetch >= 1``: the loader prepares the next
batches while the device computes, ``DataLoader(prefetch_factor=...)``) the steady-state step is
``max(load, compute)``; a deeper prefetch absorbs jitter, which is not modelled. A step is
**input-bound** when ``load > compute``.

**Gradient compression** (:class:`GradCompression`) changes the bytes the data-parallel
gradient reduction moves, and adds compute on the device:

==============  ============================================  ==========================  =======
kind            bytes per rank (``P`` gradient elements)      collective                  compute
==============  ============================================  ==========================  =======
``none``        ``P * dtype_bytes``                           all-reduce                  -
``fp16``        ``P * 2``                                     all-reduce                  cast
``int8``        ``P + 4`` per bucket (one fp32 scale)         all-reduce                  quantize +
                                                                                          dequantize
``topk``        ``k (value_bytes + 4)``, ``k = density * P``  all-gather of every rank's  select +
                (DGC, Lin et al. ICLR'18: values + int32      ``k`` pairs (sparse sums     scatter
                indices)                                      do not reduce in place)
``powersgd``    ``4 r (m + n)`` per ``m x n`` weight, other   two all-reduces (P, Q)       3 GEMMs
                elements at ``dtype_bytes`` (Vogels et al.                                 per
                NeurIPS'19, rank ``r``, fp32 factors)                                      weight
==============  ============================================  ==========================  =======

**Goodput** (Pollux, Qiao et al. OSDI'21 §3.1; McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training"): with gradient noise scale ``B_noise``, a batch of ``M`` samples makes
``(B_noise + M0) / (B_noise + M)`` as much progress per sample as a batch of ``M0``
(statistical efficiency); goodput = throughput x efficiency. A larger batch that runs faster but
converges slower shows as a lower goodput.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from compiler.parallel.strategy import _BOOL
from hw.validate import _number_in

__all__ = ["InputPipeline", "GradCompression", "KernelLaunch", "HostOffload", "COMPRESSIONS",
           "LAUNCH_MODES", "statistical_efficiency", "goodput", "parse_options"]

COMPRESSIONS = ("none", "fp16", "int8", "topk", "powersgd")
LAUNCH_MODES = ("eager", "sync", "graph")


def _num(where: str, key: str, v, lo: float, hi: float = 1e15, *, lo_open: bool = False):
    """A finite number in [lo, hi] (``(lo, hi]`` with ``lo_open``): the config checker's rule
    and message (:mod:`hw.validate`)."""
    return _number_in(v, key, where, lo, hi, lo_open=lo_open)


@dataclass(frozen=True)
class InputPipeline:
    """One data-parallel replica's loader (module docstring). Defaults: a token dataset read
    from a local NVMe drive (estimates unless cited): ``sample_bytes`` per sample on storage,
    ``device_bytes`` per sample copied to the device (``None``: ``sample_bytes``);
    ``storage_gbps`` 3.5 (a PCIe Gen3 x4 NVMe SSD's rated sequential read, e.g. Samsung 970 EVO
    Plus: 3,500 MB/s), ``storage_latency_us`` 100 per batch (estimate), ``workers`` 8 CPU
    processes at ``worker_samples_per_s`` each (estimate: what one core tokenizes/collates),
    ``host_link_gbps`` 25.2 (PCIe Gen4 x16, 31.5 GB/s at the practical 80 %,
    docs/multichip.md "Link figures"), ``memcpy_gbps`` 10 (one core's host memcpy, estimate),
    ``pinned`` True, ``prefetch`` 2 (PyTorch's default ``prefetch_factor``)."""

    sample_bytes: float = 8192.0
    device_bytes: float | None = None
    storage_gbps: float = 3.5
    storage_latency_us: float = 100.0
    workers: int = 8
    worker_samples_per_s: float = 20000.0
    host_link_gbps: float = 25.2
    memcpy_gbps: float = 10.0
    pinned: bool = True
    prefetch: int = 2

    def __post_init__(self) -> None:
        w = "input pipeline"
        for key in ("sample_bytes", "storage_latency_us"):
            object.__setattr__(self, key, _num(w, key, getattr(self, key), 0.0, 1e12))
        if self.device_bytes is not None:
            object.__setattr__(self, "device_bytes", _num(w, "device_bytes", self.device_bytes,
                                                          0.0, 1e12))
        for key in ("storage_gbps", "worker_samples_per_s", "host_link_gbps", "memcpy_gbps"):
            object.__setattr__(self, key, _num(w, key, getattr(self, key), 0.0, 1e9,
                                               lo_open=True))
        for key, lo in (("workers", 1), ("prefetch", 0)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 4096:
                raise ValueError(f"{w}: {key} = {v!r}: must be an integer in {lo}..4096")
        if not isinstance(self.pinned, bool):
            raise ValueError(f"{w}: pinned = {self.pinned!r}: must be true or false")

    def stages(self, samples: float) -> dict:
        """Seconds of each stage for ``samples`` samples: storage, cpu, h2d."""
        dev = self.sample_bytes if self.device_bytes is None else self.device_bytes
        storage = self.storage_latency_us * 1e-6 + samples * self.sample_bytes / (
            self.storage_gbps * 1e9)
        cpu = samples / (self.workers * self.worker_samples_per_s)
        h2d = samples * dev / (self.host_link_gbps * 1e9)
        if not self.pinned:
            h2d += samples * dev / (self.memcpy_gbps * 1e9)
        return {"storage": storage, "cpu": cpu, "h2d": h2d}

    def load_s(self, samples: float) -> float:
        """One batch's trip through the loader: storage + cpu + h2d."""
        st = self.stages(samples)
        return st["storage"] + st["cpu"] + st["h2d"]

    def exposed_s(self, samples: float, compute_s: float) -> float:
        """Seconds the step waits for its input: ``load`` without prefetch, else
        ``max(load - compute, 0)``."""
        load = self.load_s(samples)
        return load if self.prefetch == 0 else max(load - compute_s, 0.0)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GradCompression:
    """How data-parallel gradients are compressed (module docstring): ``kind``; ``density``
    (``topk``: fraction of elements sent, DGC's 0.1 %-1 %); ``rank`` (``powersgd``);
    ``value_bytes`` (``topk``: bytes per sent value)."""

    kind: str = "none"
    density: float = 0.01
    rank: int = 4
    value_bytes: int = 2

    def __post_init__(self) -> None:
        w = "gradient compression"
        if self.kind not in COMPRESSIONS:
            raise ValueError(f"{w}: kind = {self.kind!r}: must be one of {', '.join(COMPRESSIONS)}")
        object.__setattr__(self, "density", _num(w, "density", self.density, 0.0, 1.0,
                                                 lo_open=True))
        for key, hi in (("rank", 1 << 20), ("value_bytes", 8)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise ValueError(f"{w}: {key} = {v!r}: must be an integer in 1..{hi}")

    @property
    def collective(self) -> str:
        return "allgather" if self.kind == "topk" else "allreduce"

    def wire_bytes(self, elements: float, dtype_bytes: int, *, matrices=(), buckets: int = 1,
                   ranks: int = 1) -> float:
        """Bytes handed to the collective (nccl-tests ``nbytes``) for ``elements`` gradient
        elements, of which ``matrices`` = ``[(m, n), ...]`` are weight matrices (PowerSGD);
        ``ranks`` = the data-parallel group (top-k's all-gather buffer holds every rank's
        pairs)."""
        k = self.kind
        if k == "none":
            return float(elements) * dtype_bytes
        if k == "fp16":
            return float(elements) * 2
        if k == "int8":
            return float(elements) + 4.0 * buckets
        if k == "topk":
            return ranks * math.ceil(self.density * elements) * (self.value_bytes + 4.0)
        mat = sum(m * n for m, n in matrices)
        factors = sum(self.rank * (m + n) for m, n in matrices)
        return 4.0 * factors + (float(elements) - mat) * dtype_bytes

    def compute_elements(self, elements: float) -> float:
        """Element-wise passes over the gradient (quantize + dequantize, select + scatter)."""
        return {"none": 0.0, "fp16": 1.0, "int8": 2.0, "topk": 2.0, "powersgd": 1.0}[
            self.kind] * elements

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class KernelLaunch:
    """What launching kernels costs (module docstring): the host spends ``launch_us`` per
    kernel. ``eager`` (PyTorch's default: kernels are queued asynchronously, so the device
    runs a kernel no faster than the host launches it): each op takes ``max(op, launch)``;
    ``sync`` (a synchronization after every kernel, as isolated kernel measurements are taken):
    ``op + launch``; ``graph`` (CUDA Graphs capture each forward and backward pass): the ops'
    own times plus one launch per pass. ``launch_us`` 5 is an estimate of a kernel launch
    through PyTorch on a recent CPU; measured per-op overheads with synchronization are larger
    (LLMCompass's A100 figures, 12-45 us, sim_configs/a100_like.toml)."""

    mode: str = "eager"
    launch_us: float = 5.0

    def __post_init__(self) -> None:
        if self.mode not in LAUNCH_MODES:
            raise ValueError(f"kernel launch: mode = {self.mode!r}: must be one of "
                             f"{', '.join(LAUNCH_MODES)}")
        object.__setattr__(self, "launch_us", _num("kernel launch", "launch_us",
                                                   self.launch_us, 0.0, 1e6))

    def kernel_s(self, op_s: float) -> float:
        """Seconds one kernel of ``op_s`` device time takes in the step."""
        launch = self.launch_us * 1e-6
        if self.mode == "eager":
            return max(op_s, launch)
        if self.mode == "sync":
            return op_s + launch
        return op_s

    def per_pass_s(self) -> float:
        """Seconds added once per forward or backward pass (a graph launch)."""
        return self.launch_us * 1e-6 if self.mode == "graph" else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class HostOffload:
    """The host side of ZeRO-Offload (``Strategy(offload=True)``; Ren et al., "ZeRO-Offload",
    USENIX ATC'21): after the gradient reduction each rank copies its gradient shard (fp16, 2
    bytes per parameter) to the host over ``link_gbps``, the CPU runs Adam on it (memory-bound:
    ``adam_bytes`` per parameter at ``memory_gbps``), and the updated fp16 parameters (2 bytes)
    come back: ``2P / link + adam_bytes P / memory + 2P / link``, one after the other (the
    overlap of the gradient copy with the backward is not modelled). ``link_gbps`` 25.2: PCIe
    Gen4 x16 at the practical 80 % (docs/multichip.md "Link figures"; npulab system takes the
    system's host link); ``memory_gbps`` 100 (an estimate: about half of an 8-channel DDR4-3200
    socket's 204.8 GB/s); ``adam_bytes`` 28 (read fp16 gradient, fp32 master, momentum and
    variance, write those three and the fp16 copy, as the device optimizer counts)."""

    link_gbps: float = 25.2
    memory_gbps: float = 100.0
    adam_bytes: float = 28.0

    def __post_init__(self) -> None:
        for key in ("link_gbps", "memory_gbps", "adam_bytes"):
            object.__setattr__(self, key, _num("host offload", key, getattr(self, key), 0.0,
                                               1e9, lo_open=True))

    def step_s(self, params: float) -> float:
        """Seconds of the offloaded update of ``params`` parameters."""
        return (4.0 * params / (self.link_gbps * 1e9)
                + self.adam_bytes * params / (self.memory_gbps * 1e9))

    def to_dict(self) -> dict:
        return asdict(self)


def statistical_efficiency(batch: float, noise_scale: float, base_batch: float) -> float:
    """Progress per sample of a batch of ``batch`` relative to ``base_batch``:
    ``(B_noise + M0) / (B_noise + M)`` (Pollux §3.1, from McCandlish et al. 2018)."""
    for key, v in (("batch", batch), ("noise_scale", noise_scale), ("base_batch", base_batch)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 \
                or not math.isfinite(v):
            raise ValueError(f"statistical_efficiency: {key} = {v!r}: must be a number > 0")
    return (noise_scale + base_batch) / (noise_scale + batch)


def goodput(samples_per_s: float, batch: float, noise_scale: float, base_batch: float) -> float:
    """Throughput x statistical efficiency (samples of base-batch progress per second)."""
    return samples_per_s * statistical_efficiency(batch, noise_scale, base_batch)


def parse_options(cls, text: str, flag: str):
    """``"workers=4,pinned=false"`` -> ``cls(workers=4, pinned=False)``; one-line errors
    naming the flag, the key and what is allowed."""
    kinds = {f.name: f.type for f in fields(cls)}
    values: dict = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        if "=" not in part:
            if cls is GradCompression and "kind" not in values and part.lower() in COMPRESSIONS:
                values["kind"] = part.lower()
                continue
            if cls is KernelLaunch and "mode" not in values and part.lower() in LAUNCH_MODES:
                values["mode"] = part.lower()
                continue
            raise ValueError(f"{flag} {text!r}: {part!r}: expected key=value (keys: "
                             f"{', '.join(kinds)})")
        key, raw = (x.strip() for x in part.split("=", 1))
        key = key.lower().replace("-", "_")
        if key not in kinds:
            raise ValueError(f"{flag} {text!r}: unknown key {key!r}; allowed: {', '.join(kinds)}")
        kind = str(kinds[key])
        try:
            if "bool" in kind:
                if raw.lower() not in _BOOL:
                    raise ValueError
                values[key] = _BOOL[raw.lower()]
            elif "int" in kind and "float" not in kind:
                values[key] = int(raw)
            elif "float" in kind:
                values[key] = float(raw)
            else:
                values[key] = raw.lower()
        except ValueError:
            raise ValueError(f"{flag} {text!r}: {key} = {raw!r}: expected "
                             f"{'true or false' if 'bool' in kind else 'a number'}") from None
    try:
        return cls(**values)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
