"""Keep Numba's on-disk cache consistent with the source of ``hw``.

Numba (``cache=True``) invalidates a cached kernel when *its own* source file changes, but not
when a jitted function it calls, defined in another file, changes: the cached kernel keeps the
old callee compiled into it. Worse, when such a stale kernel is loaded first, its copy of the
callee can shadow the new one for every other kernel of the process. npulab hit this once: after
``hw/nvdla/lut.py`` changed, ``cdp.py``'s cached kernel still carried the old ``_lut_one`` and
the SDP path, run after it, computed with the old rule.

:func:`guard` (called when ``hw`` is imported) hashes every ``.py`` file of the package and, when
the hash differs from the one stored with the cache, deletes the package's cached kernels
(``__pycache__/*.nbi``, ``*.nbc``) so they are rebuilt from the current source. Editing any
source file or installing another npulab version therefore recompiles once. With
``NUMBA_CACHE_DIR`` set, the cache lives elsewhere and is the user's to manage; nothing is done.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MARKER = "npulab-numba-source.sha256"


def source_hash(package: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(package.rglob("*.py")):
        h.update(p.relative_to(package).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def guard(package: Path | None = None) -> bool:
    """Delete the package's cached Numba kernels if its source changed since they were built.
    Returns True when caches were cleared. Never raises for file-system problems (a read-only
    install simply keeps what it has)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return False
    package = Path(package or Path(__file__).parent)
    try:
        digest = source_hash(package)
        marker = package / "__pycache__" / MARKER
        if marker.is_file() and marker.read_text().strip() == digest:
            return False
        for cache in package.rglob("__pycache__"):
            for f in (*cache.glob("*.nbi"), *cache.glob("*.nbc")):
                f.unlink(missing_ok=True)
        marker.parent.mkdir(exist_ok=True)
        marker.write_text(digest + "\n")
        return True
    except OSError:
        return False
