"""Run a lowered program on the core's Verilog in Verilator, through the cocotb testbench
(:mod:`hw.core.cocotb_core`). Optional: needs Verilator on PATH and cocotb (1.8 for Debian 12's
Verilator 5.006; cocotb 1.9 needs Verilator 5.022+, cocotb 2 needs 5.036+).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from hw.core.isa import CoreProgram

__all__ = ["available", "run", "QUEUE_DEPTH"]

#: Entries per command queue of the core built for Verilator (programs load through CSRs).
QUEUE_DEPTH = 64


def available() -> str | None:
    """None when the flow can run here, else why not (one line)."""
    if shutil.which("verilator") is None:
        return "verilator is not on PATH (Debian: apt install verilator)"
    if importlib.util.find_spec("cocotb") is None:
        return "cocotb is not installed (pip install 'cocotb>=1.8,<1.9' for Verilator 5.006)"
    return None


def build_key(verilog: str, cocotb_dir: Path, cocotb_version: str, tools: str = "") -> str:
    """The name of a cached build: the hash of the Verilog, the cocotb installation and
    ``tools`` (the Verilator and the build's flags). The build links cocotb's files by absolute
    path (its verilator.cpp, an rpath to its libraries), so a build made from another
    environment, since removed, or by another Verilator, must not be reused."""
    text = "\0".join((verilog, str(cocotb_dir), cocotb_version, tools))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runner():
    try:
        from cocotb_tools.runner import get_runner      # cocotb 2
    except ImportError:
        from cocotb.runner import get_runner            # cocotb 1.8, 1.9
    return get_runner("verilator")


def run(core: CoreProgram, memory: np.ndarray, *, workdir=None, mutation: str | None = None,
        max_cycles: int = 200_000):
    """Build the core's Verilog with Verilator (once per core geometry: the build is cached
    under npulab's cache folder) and run ``core``'s program with ``memory`` as DRAM, the
    program loaded through the CSRs; a :class:`hw.core.cosim.CoreRun` like the Amaranth run's."""
    import warnings

    from hw import userdirs
    from hw.core.cosim import CoreRun
    from hw.core.rtl.core import Core, command_writes
    from hw.core.synth import core_verilog

    why = available()
    if why:
        raise RuntimeError(f"the Verilator run needs {why}")
    folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="npulab-cocotb-"))
    folder.mkdir(parents=True, exist_ok=True)
    lanes = core.geometry.lanes
    top = f"npulab_core_{lanes}x{lanes}"
    # one Verilog per core geometry (programs are loaded through the CSRs), built once into
    # a cache folder named by its hash
    depth = max(QUEUE_DEPTH, *(len(q) for q in core.queues))
    verilog = core_verilog(core=Core(core, mutation=mutation, preload=False, depth=depth))
    import cocotb
    build_args = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-CFLAGS", "-O0"]
    verilator = shutil.which("verilator")
    version = subprocess.run([verilator, "--version"], capture_output=True, text=True).stdout
    digest = build_key(verilog, Path(cocotb.__file__).resolve().parent,
                       getattr(cocotb, "__version__", ""),
                       f"{Path(verilator).resolve()} {version.strip()} {' '.join(build_args)}")
    build = userdirs.user_cache_dir() / "cocotb" / f"{top}-{digest}"
    build.mkdir(parents=True, exist_ok=True)
    source = build / f"{top}.v"
    if not source.exists():                # rewriting it would make the build run again
        source.write_text(verilog)
    np.save(folder / "memory.npy", np.asarray(memory, np.uint8))
    (folder / "meta.json").write_text(json.dumps(
        {"queues": [len(q) for q in core.queues], "max_cycles": max_cycles,
         "words": [[command_writes(w) for w in q] for q in core.queues]}))
    root = str(Path(__file__).resolve().parents[2])
    env = {"NPULAB_COCOTB_DIR": str(folder),
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = _runner()
        os.environ.setdefault("MAKEFLAGS", f"-j{os.cpu_count() or 1}")   # the C++ build
        kwargs = dict(hdl_toplevel=top, build_dir=str(build / "build"), always=False,
                      build_args=build_args)
        try:
            runner.build(sources=[str(build / f"{top}.v")], **kwargs)
        except TypeError:                                # cocotb 1.8: verilog_sources
            runner.build(verilog_sources=[str(build / f"{top}.v")], **kwargs)
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        sys.path.insert(0, root)
        try:
            runner.test(hdl_toplevel=top, test_module="hw.core.cocotb_core",
                        build_dir=str(build / "build"), test_dir=str(folder), extra_env=env)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            sys.path.remove(root)
    result_file = folder / "result.npz"
    if not result_file.exists():
        raise RuntimeError(f"the cocotb run in {folder} wrote no result (see its log)")
    res = np.load(result_file)
    n = len(core.program)
    start, end = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    order = [i for index in core.index for i in index]
    start[order], end[order] = res["start"], res["end"]
    return CoreRun(res["memory"], start, end, int(res["cycles"]), bool(int(res["status"]) & 4))
