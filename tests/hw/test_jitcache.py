"""npulab's Numba kernel cache (hw/_jitcache.py, issue 21 item 15): one cache folder per
installed version under the user cache dir, keyed by a kernel's path inside the project, so the
installed package and a source tree with the same code share compiled kernels; stamped with the
source of every kernel file, so a changed callee in another file recompiles everything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hw import _jitcache
from hw._jitcache import KERNEL_PACKAGES, cache_root, kernel_cache_dir, source_stamp

REPO = Path(__file__).resolve().parents[2]

# Compiles (or loads) one small cached kernel of hw.numerics and prints where its cache is and
# how many kernels Numba had to compile.
_PROBE = textwrap.dedent("""
    import json, sys
    from hw._jitcache import CompileWatch
    with CompileWatch() as watch:
        import hw.numerics as n
        assert n.int_min(8) == -128
    print(json.dumps({"compiled": watch.kernels, "file": n.__file__}))
""")


def _probe(tree: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env["NPULAB_CACHE"] = str(cache)
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=tree, env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _copy_tree(dest: Path) -> Path:
    for package in ("hw", "compiler"):
        shutil.copytree(REPO / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_cache_root_follows_npulab_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("NPULAB_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.delenv("NPULAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "npulab"
    assert kernel_cache_dir().parent == tmp_path / "xdg" / "npulab" / "numba"


def test_the_stamp_is_the_content_of_every_kernel_file(tmp_path):
    copy = _copy_tree(tmp_path / "copy")
    assert source_stamp.__wrapped__(copy) == source_stamp.__wrapped__(REPO)
    callee = copy / "hw" / "memory" / "link.py"          # no kernel in it, but hw/ code
    callee.write_text(callee.read_text() + "\n# changed\n")
    assert source_stamp.__wrapped__(copy) != source_stamp.__wrapped__(REPO)
    outside = copy / "compiler" / "frontends" / "zoo.py"  # no kernel code: not in the stamp
    callee.write_text(callee.read_text().removesuffix("\n# changed\n"))
    outside.write_text(outside.read_text() + "\n# changed\n")
    assert source_stamp.__wrapped__(copy) == source_stamp.__wrapped__(REPO)
    presets = copy / "hw" / "sim_configs"                # an installed copy's package data
    presets.mkdir()
    (presets / "__init__.py").write_text('"""Hardware configs shipped with npulab."""\n')
    assert source_stamp.__wrapped__(copy) == source_stamp.__wrapped__(REPO)
    assert KERNEL_PACKAGES == ("hw", "compiler/mapper")


def test_source_tree_and_another_copy_share_one_cache_and_a_changed_callee_recompiles(tmp_path):
    cache = tmp_path / "cache"
    first = _probe(REPO, cache)                           # this checkout, cold cache
    assert first["compiled"] >= 1
    assert Path(first["file"]).parent == REPO / "hw"
    again = _probe(REPO, cache)
    assert again["compiled"] == 0                         # loaded from the cache
    copy = _copy_tree(tmp_path / "elsewhere")             # e.g. the installed site-packages copy
    moved = _probe(copy, cache)
    assert Path(moved["file"]).parent == copy / "hw" and moved["compiled"] == 0
    folders = {p.parent.relative_to(cache) for p in cache.rglob("*.nbi")}
    assert len({f.parts[:2] for f in folders}) == 1       # one numba/<version>-pyXY folder
    assert all(f.parts[2:] == ("hw",) for f in folders)
    callee = copy / "hw" / "memory" / "link.py"           # another file than the kernel's
    callee.write_text(callee.read_text() + "\n# changed\n")
    assert _probe(copy, cache)["compiled"] >= 1


_LAZY_PROBE = textwrap.dedent("""
    import json, sys
    import hw
    light = "numba" not in sys.modules
    from hw import _jitcache
    import compiler.mapper.cost, hw.executor, hw.numerics, hw.nvdla.cdp, hw.system.engine
    at_import = _jitcache.source_stamp.cache_info().misses
    assert hw.numerics.int_min(8) == -128 and hw.numerics.int_max(8) == 127
    print(json.dumps({"light": light, "at_import": at_import,
                      "after_use": _jitcache.source_stamp.cache_info().misses}))
""")


def test_importing_kernels_hashes_nothing_and_the_first_kernel_use_hashes_once(tmp_path):
    """No import-time work: the source stamp is computed when a kernel is first needed."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env["NPULAB_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", _LAZY_PROBE], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"light": True, "at_import": 0, "after_use": 1}


def test_the_lazy_stamp_pickles_and_compares_as_the_digest():
    import pickle
    stamp = _jitcache._LazyStamp()
    assert pickle.loads(pickle.dumps(stamp)) == source_stamp()
    assert type(pickle.loads(pickle.dumps(stamp))) is str
    assert source_stamp() == stamp and not (source_stamp() != stamp)
    assert "0" * 64 != stamp


def test_a_user_managed_numba_cache_dir_is_left_to_numba(monkeypatch, tmp_path):
    import numba
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))

    def kernel():
        return 1
    path = str(_jitcache._ROOT / "hw" / "x.py")
    assert _jitcache.KernelCacheLocator.from_function(kernel, path) is None


def test_functions_outside_the_kernel_packages_are_not_ours(monkeypatch, tmp_path):
    import numba
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    monkeypatch.setenv("NPULAB_CACHE", str(tmp_path))

    def kernel():
        return 1
    locate = _jitcache.KernelCacheLocator.from_function
    root = _jitcache._ROOT        # where this hw/ lives: the checkout, or site-packages
    assert locate(kernel, str(root / "tests" / "hw" / "test_x.py")) is None
    assert locate(kernel, str(root / "npulab" / "x.py")) is None
    found = locate(kernel, str(root / "compiler" / "mapper" / "cost.py"))
    assert found is not None
    assert Path(found.get_cache_path()) == kernel_cache_dir() / "compiler" / "mapper"
