"""The Numba cache guard (hw/_jitcache.py) on a throwaway package tree: cached kernels survive
while the source is unchanged and are deleted once any source file changes."""

from __future__ import annotations

from pathlib import Path

from hw._jitcache import MARKER, guard, source_hash


def _tree(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    return pkg


def _kernels(pkg: Path) -> list[Path]:
    (pkg / "sub" / "__pycache__" / "b.k-1.py311.nbi").write_bytes(b"index")
    (pkg / "sub" / "__pycache__" / "b.k-1.py311.1.nbc").write_bytes(b"code")
    return sorted((pkg / "sub" / "__pycache__").glob("*.nb?"))


def test_unchanged_source_keeps_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _tree(tmp_path)
    assert guard(pkg) is True                      # first run: no marker yet
    files = _kernels(pkg)
    assert guard(pkg) is False and all(f.exists() for f in files)
    assert (pkg / "__pycache__" / MARKER).read_text().strip() == source_hash(pkg)


def test_a_changed_callee_file_clears_every_cached_kernel(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    pkg = _tree(tmp_path)
    guard(pkg)
    files = _kernels(pkg)
    (pkg / "a.py").write_text("x = 3\n")           # another file than the cached kernel's
    assert guard(pkg) is True
    assert not any(f.exists() for f in files)
    assert (pkg / "sub" / "b.py").exists()         # sources are never touched
    assert guard(pkg) is False


def test_user_managed_cache_dir_is_left_alone(tmp_path, monkeypatch):
    pkg = _tree(tmp_path)
    files = _kernels(pkg)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert guard(pkg) is False and all(f.exists() for f in files)
