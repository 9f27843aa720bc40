"""Where npulab's compiled Numba kernels live, when they are rebuilt, and how long compiling took.

Every kernel module imports :func:`njit` from here instead of from Numba. It is Numba's
``njit``; the first call also registers :class:`KernelCacheLocator` with Numba's cache, which
puts every npulab kernel's compiled code in **one directory per installed version**::

    $NPULAB_CACHE/numba/<version>-py<major><minor>/<package path>/   (if NPULAB_CACHE is set)
    $XDG_CACHE_HOME/npulab/numba/...                                 (else, if that is set)
    ~/.cache/npulab/numba/...                                        (else)

Two rules make that cache right and shared:

* **Keyed by content, not by location.** A kernel's cache path is its module's path *inside the
  project* (``hw/memory``), so a script run from the source tree and the installed package find
  the same compiled kernels; two different copies of npulab with the same version and source
  share them, and different source never does (next rule).
* **Stamped with the source of every kernel file.** Numba invalidates a cached kernel when its
  own file changes, but not when a jitted callee in another file changes: the cached kernel keeps
  the old callee compiled into it (npulab hit this once: after ``hw/nvdla/lut.py`` changed,
  ``cdp.py``'s cached kernel still carried the old ``_lut_one``). The stamp here is one SHA-256
  over every ``.py`` file of ``hw/`` and ``compiler/mapper/`` (the only places with kernels), so
  editing any of them recompiles everything once. It is computed when the first kernel is
  compiled or loaded from the cache, once per process, never at import: Numba asks for a
  kernel's stamp when the module defining it is imported, so the locator hands it a
  :class:`_LazyStamp` that hashes the sources the first time Numba compares or saves it.

With Numba's own ``NUMBA_CACHE_DIR`` set, or when the directory cannot be written, Numba's
default locators are used instead (nothing npulab-specific happens).

:class:`CompileWatch` counts the seconds spent compiling (Numba's ``numba:compile`` events fire
only on a cache miss), so the command line can say once that kernels are being compiled and
keep a progress bar's ETA free of that one-off cost.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import time
from pathlib import Path
from typing import Callable

import numba
from numba.core import caching, event

from hw.userdirs import user_cache_dir

__all__ = ["njit", "cache_root", "kernel_cache_dir", "source_stamp", "KernelCacheLocator",
           "CompileWatch", "KERNEL_PACKAGES"]

#: Folders (relative to the project root) that hold jitted code; their source is the stamp.
KERNEL_PACKAGES = ("hw", "compiler/mapper")
#: Left out of the stamp: the presets, installed as ``hw/sim_configs`` (absent from a checkout's
#: ``hw/``), so the installed copy and the source tree keep sharing compiled kernels.
_NOT_KERNEL_CODE = ("hw/sim_configs/",)
_ROOT = Path(__file__).resolve().parents[1]   # the folder holding hw/ and compiler/


def cache_root() -> Path:
    """npulab's user cache folder (:func:`hw.userdirs.user_cache_dir`)."""
    return user_cache_dir()


@functools.cache
def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("npulab")
    except metadata.PackageNotFoundError:   # a source tree that was never installed
        return "source"


def kernel_cache_dir() -> Path:
    """The compiled kernels of this npulab version and Python."""
    return cache_root() / "numba" / f"{_version()}-py{sys.version_info[0]}{sys.version_info[1]}"


@functools.cache
def source_stamp(root: Path = _ROOT) -> str:
    """SHA-256 over the path and bytes of every ``.py`` file under :data:`KERNEL_PACKAGES`
    (but the installed presets' ``hw/sim_configs/``)."""
    h = hashlib.sha256()
    for package in KERNEL_PACKAGES:
        for p in sorted((root / package).rglob("*.py")):
            relative = p.relative_to(root).as_posix()
            if relative.startswith(_NOT_KERNEL_CODE):
                continue
            h.update(relative.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


class _LazyStamp:
    """:func:`source_stamp`, computed when Numba first uses it rather than when it asks for it.

    Numba stores the stamp in a kernel's cache index (pickled: as the plain digest string) and
    compares it with the stored one (``stored != stamp``) on the kernel's first load; both
    happen at the kernel's first call, not at its definition.
    """

    __slots__ = ()

    def __eq__(self, other) -> bool:
        if isinstance(other, _LazyStamp):
            return True
        return source_stamp() == other

    def __hash__(self) -> int:
        return hash(source_stamp())

    def __reduce__(self):
        return (str, (source_stamp(),))

    def __repr__(self) -> str:
        return "<npulab source stamp>"


class KernelCacheLocator(caching._CacheLocator):
    """Numba cache locator for functions defined under :data:`KERNEL_PACKAGES`."""

    def __init__(self, py_func, py_file: str, relative_dir: str):
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(kernel_cache_dir() / relative_dir)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> _LazyStamp:
        return _LazyStamp()

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        if numba.config.CACHE_DIR:          # the user manages Numba's cache: use theirs
            return None
        try:
            relative = Path(py_file).resolve().relative_to(_ROOT)
        except ValueError:
            return None
        if not any(relative.as_posix().startswith(p + "/") for p in KERNEL_PACKAGES):
            return None
        self = cls(py_func, py_file, relative.parent.as_posix())
        try:
            self.ensure_cache_path()
        except OSError:                     # read-only home: Numba's own locators decide
            return None
        return self


def _register() -> None:
    # Numba >= 0.61 calls the class CacheImpl, earlier versions _CacheImpl.
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")
    classes = impl._locator_classes
    if KernelCacheLocator not in classes:
        classes.insert(0, KernelCacheLocator)


def njit(*args, **kwargs):
    """``numba.njit``, with npulab's kernel cache registered first (see the module text)."""
    _register()
    return numba.njit(*args, **kwargs)


class CompileWatch(event.Listener):
    """Counts wall-clock seconds spent in Numba compilation (cache misses only) while installed.

    ``on_first(cache_dir)`` is called once, when the first compilation starts. Use as a context
    manager, or :meth:`install` / :meth:`uninstall`.
    """

    def __init__(self, on_first: Callable[[Path], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.on_first = on_first
        self.clock = clock
        self.seconds = 0.0
        self.kernels = 0        # top-level compilations (callees compiled inside are not counted)
        self._depth = 0
        self._start = 0.0

    def on_start(self, ev) -> None:
        if self._depth == 0:
            if self.kernels == 0 and self.on_first is not None:
                self.on_first(kernel_cache_dir())
            self._start = self.clock()
            self.kernels += 1
        self._depth += 1

    def on_end(self, ev) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.seconds += self.clock() - self._start

    def compiling_seconds(self) -> float:
        """Seconds compiled so far, including a compilation still under way."""
        running = self.clock() - self._start if self._depth else 0.0
        return self.seconds + running

    def install(self) -> "CompileWatch":
        event.register("numba:compile", self)
        return self

    def uninstall(self) -> None:
        event.unregister("numba:compile", self)

    def __enter__(self) -> "CompileWatch":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()
