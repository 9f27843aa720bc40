"""Verilator itself: finding it, its build cache, and building a design into a simulator.

Builds run ``verilator <flags> <files>`` in a private directory of the cache
(:func:`cache_root`) that is renamed to ``<cache>/<hash>`` when done, so concurrent processes
never see half a build and later calls with the same inputs reuse it. Verilator's runtime
library (``verilated*.o``) is compiled once per Verilator version and C++ compiler into the
cache too (:func:`_runtime_objects`). Nothing here knows the array: its Verilog and testbench
come from :mod:`hw.systolic.rtl.verilator`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["VerilatorError", "verilator_command", "verilator_available", "cache_root"]

_INSTALL_HINT = ("install it with `apt-get install verilator` (Debian/Ubuntu; Verilator 5, "
                 "tested with 5.006) or set NPULAB_VERILATOR to the verilator executable")


class VerilatorError(RuntimeError):
    """Verilator is missing, a build failed or a simulator run failed; the message says which
    (with the tail of the log for failures) and how to fix it."""


# --------------------------------------------------------------------------------------------
# Finding Verilator, the cache
# --------------------------------------------------------------------------------------------

def verilator_command() -> str | None:
    """The verilator executable to use: ``$NPULAB_VERILATOR`` if set (a path or a name on
    PATH), else ``verilator`` on PATH; None when there is none."""
    custom = os.environ.get("NPULAB_VERILATOR")
    if custom:
        found = shutil.which(custom)
        if found:
            return found
        return custom if os.path.isfile(custom) and os.access(custom, os.X_OK) else None
    return shutil.which("verilator")


def verilator_available() -> bool:
    """True when Verilator can be run (see :func:`verilator_command`)."""
    return verilator_command() is not None


def _require_verilator() -> str:
    exe = verilator_command()
    if exe is None:
        custom = os.environ.get("NPULAB_VERILATOR")
        if custom:
            raise VerilatorError(f"NPULAB_VERILATOR = {custom!r} is not an executable: "
                                 f"{_INSTALL_HINT}")
        raise VerilatorError(f"Verilator is not installed (no `verilator` on PATH): {_INSTALL_HINT}")
    return exe


_VERSIONS: dict[str, str] = {}


def _verilator_version(exe: str) -> str:
    if exe not in _VERSIONS:
        try:
            proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise VerilatorError(f"cannot run {exe} --version: {e}: {_INSTALL_HINT}") from None
        if proc.returncode != 0:
            raise VerilatorError(f"{exe} --version failed (exit {proc.returncode}): "
                                 f"{(proc.stdout + proc.stderr).strip()[-500:]}")
        _VERSIONS[exe] = proc.stdout.strip()
    return _VERSIONS[exe]


def cache_root() -> Path:
    """Where built simulators are kept: ``verilator/`` in npulab's user cache
    (:func:`hw.userdirs.user_cache_dir`: ``$NPULAB_CACHE``, else ``$XDG_CACHE_HOME/npulab``,
    else ``~/.cache/npulab``). Each build is a ``<hash>`` directory in it; deleting any of them
    (or all) is safe."""
    from hw.userdirs import user_cache_dir
    return user_cache_dir() / "verilator"


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------

def _jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _flags(top: str, probes: bool, trace: bool) -> list[str]:
    flags = ["--cc", "--exe", "--build", "-O3", "-j", str(_jobs()), "--top-module", top,
             "--prefix", "Vtop", "-Wno-fatal", "-Wno-lint", "-Wno-style", "--Mdir", "obj",
             "-o", "sim", "-MAKEFLAGS", "OPT_FAST=-O2"]
    if probes:
        flags += ["-CFLAGS", "-DNPULAB_PROBES=1"]
    if trace:
        flags += ["--trace"]
    return flags


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0\1\0")
    return h.hexdigest()[:24]


def _build_in_cache(exe: str, key: str, files: dict[str, str], flags: list[str],
                    product: str, what: str) -> tuple[Path, bool]:
    """Run ``verilator <flags> <files>`` in a private directory of the cache and rename it to
    ``<cache>/<key>``; returns (directory, built now). Reuses the directory when ``product``
    (a path inside it) exists. A failed build leaves ``<key>.failed.log`` and raises."""
    root = cache_root()
    final = root / key
    if (final / product).is_file():
        return final, False
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{key}.tmp-", dir=root))
    except OSError as e:
        raise VerilatorError(f"cannot create the Verilator cache directory {root}: {e} "
                             f"(set NPULAB_CACHE to a writable directory)") from None
    try:
        for name, text in files.items():
            (work / name).write_text(text)
        cmd = [exe, *flags, *files]
        (work / "command.txt").write_text(" ".join(cmd) + "\n")
        try:
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        except OSError as e:
            raise VerilatorError(f"cannot run {exe}: {e}: {_INSTALL_HINT}") from None
        log = proc.stdout + proc.stderr
        (work / "build.log").write_text(log)
        if proc.returncode != 0 or not (work / product).is_file():
            failed = root / f"{key}.failed.log"
            failed.write_text(" ".join(cmd) + "\n\n" + log)
            raise VerilatorError(f"Verilator build of {what} failed (exit {proc.returncode}); "
                                 f"full log: {failed}\n{_tail(log)}")
        try:
            os.rename(work, final)
        except OSError:  # another process finished the same build first: use theirs
            if not (final / product).is_file():
                raise VerilatorError(f"cannot move the Verilator build {work} to {final}") from None
        else:
            work = None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return final, True


_RT_VERILOG = """// npulab: a trivial design whose build leaves Verilator's runtime objects behind.
module npulab_rt(input clk, output reg q /*verilator public_flat_rd*/);
  initial q = 1'b0;
  always @(posedge clk) q <= ~q;
endmodule
"""

_RT_MAIN = """#include "Vtop.h"
#include "verilated.h"
int main() {
    VerilatedContext ctx;
    Vtop top{&ctx};
    top.clk = 0; top.eval(); top.clk = 1; top.eval(); top.final();
    return top.q == 1 ? 0 : 1;
}
"""


def _runtime_objects(exe: str) -> list[Path]:
    """Verilator's runtime library (``verilated*.o``), compiled once per Verilator version and
    C++ compiler and kept in the cache: about two thirds of a small design's build time. It is
    compiled by Verilator's own makefile (a trivial design built with the same options), so its
    compiler flags are exactly those of a normal ``--build``."""
    flags = _flags("npulab_rt", probes=False, trace=False)
    compiler = os.environ.get("CXX", "") + "\0" + str(shutil.which("g++"))
    key = "runtime-" + _digest(_RT_VERILOG, _RT_MAIN, "\0".join(flags),
                               _verilator_version(exe), compiler)
    directory, _ = _build_in_cache(exe, key, {"rt.v": _RT_VERILOG, "main.cpp": _RT_MAIN},
                                   flags, "obj/sim", "Verilator's runtime library")
    objects = sorted((directory / "obj").glob("verilated*.o"))
    if not objects:
        raise VerilatorError(f"no verilated*.o in {directory / 'obj'}: delete that directory")
    return objects
