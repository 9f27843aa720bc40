"""NVIDIA's NVDLA conformance traces: download them, verify them, find them.

The trace tests ``npulab nvdla trace`` plays are NVIDIA's (nvdla/hw, folder
``verif/tests/trace_tests/nv_small``); npulab does not ship them. ``trace_data/nv_small.json``
(package data) pins them: the repository, the commit, and every file of the 69 tests npulab
plays with its git blob id (SHA-1 of ``"blob <size>\\0" + content``, which GitHub and any
checkout agree on) and size.

:func:`fetch_traces` copies them into the user cache, ``$XDG_CACHE_HOME/npulab/nvdla-traces/
<commit>/nv_small`` (default ``~/.cache/...``), from

* NVIDIA's repository at the pinned commit (default: ``raw.githubusercontent.com`` file by
  file), or any base URL (``https://``, ``http://``, ``file://``) laid out the same way;
* an archive (``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``; a path or a URL), e.g. GitHub's
  ``https://codeload.github.com/nvdla/hw/tar.gz/<commit>``: files are matched by their
  ``<test>/<file>`` tail, preferring paths under ``nv_small/``;
* a local directory: an nvdla/hw checkout, a folder holding ``nv_small/``, or the ``nv_small``
  folder itself.

Every file is checked against its blob id before anything is installed; the download goes to a
temporary folder in the cache and replaces the installed copy only when complete. A source that
lacks some files is an error, unless ``allow_missing`` (the traces needing them then fail in
``npulab nvdla trace`` naming the file).

:func:`trace_search` lists where ``npulab nvdla trace`` looks when given no PATH: ``--traces
DIR``, else ``$NPULAB_NVDLA_TRACES``, else the user cache, else ``shared/nvdla/traces`` beside the
source tree; each names a folder that holds ``nv_small/``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

__all__ = ["FetchError", "FetchResult", "manifest", "cache_root", "cache_dir", "default_source",
           "git_blob_id", "fetch_traces", "trace_search", "MAX_FILE_BYTES"]

#: A file larger than this is refused (the largest of the pinned traces is ~4 MB).
MAX_FILE_BYTES = 64 << 20
_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")
_TIMEOUT_S = 60


class FetchError(ValueError):
    """A source that cannot give the pinned traces; the message names the source and file."""


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch_traces` installed: ``folder`` (``.../<commit>/nv_small``), the files
    and bytes written, and the files the source did not have (``allow_missing``)."""

    folder: Path
    files: int
    bytes: int
    missing: tuple = field(default=())


def manifest(name: str = "nv_small") -> dict:
    """The pinned file list (``trace_data/<name>.json``)."""
    text = (resources.files("hw.nvdla") / "trace_data" / f"{name}.json").read_text("utf-8")
    return json.loads(text)


def cache_root() -> Path:
    """``nvdla-traces/`` in npulab's user cache (:func:`hw.userdirs.user_cache_dir`:
    ``$NPULAB_CACHE``, else ``$XDG_CACHE_HOME/npulab``, else ``~/.cache/npulab``)."""
    from hw.userdirs import user_cache_dir
    return user_cache_dir() / "nvdla-traces"


def cache_dir(commit: str | None = None) -> Path:
    """The cache folder of one commit (it holds ``nv_small/``); default the pinned one."""
    return cache_root() / (commit or manifest()["commit"])


def default_source(m: dict | None = None) -> str:
    """NVIDIA's repository at the pinned commit, file by file."""
    m = m or manifest()
    return f"https://raw.githubusercontent.com/{m['repository']}/{m['commit']}/{m['folder']}/"


def git_blob_id(data: bytes) -> str:
    """Git's object id of a file with content ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_url(text: str) -> bool:
    return text.split(":", 1)[0].lower() in ("http", "https", "file") and "://" in text


def _is_archive(name: str) -> bool:
    return name.lower().endswith(_ARCHIVES)


def _read_url(url: str, limit: int) -> bytes | None:
    """The body of ``url`` (None: not found); at most ``limit`` bytes."""
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as resp:
            data = resp.read(limit + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (FileNotFoundError, NotADirectoryError)):
            return None
        raise FetchError(f"{url}: cannot download ({reason}); check the network, or pass "
                         f"--from with a local copy") from None
    except (OSError, ValueError) as exc:
        raise FetchError(f"{url}: cannot download ({exc})") from None
    if len(data) > limit:
        raise FetchError(f"{url}: larger than {limit:,} bytes")
    return data


def _archive_members(data: bytes, where: str) -> dict[str, bytes]:
    """Every regular file of a tar or zip archive, ``{path: content}``."""
    import tarfile
    import zipfile
    out: dict[str, bytes] = {}
    try:
        if zipfile.is_zipfile(io.BytesIO(data)):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                for info in z.infolist():
                    if not info.is_dir() and info.file_size <= MAX_FILE_BYTES:
                        out[info.filename] = z.read(info)
            return out
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            for member in t:
                if member.isfile() and member.size <= MAX_FILE_BYTES:
                    out[member.name] = t.extractfile(member).read()
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        reason = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise FetchError(f"{where}: not a readable .tar.gz/.tar/.zip archive ({reason})") \
            from None
    return out


def _from_archive(members: dict[str, bytes], wanted) -> dict[str, bytes]:
    """``{rel: content}`` for each wanted ``<test>/<file>`` found by its path tail (a path
    under ``nv_small/`` wins over others, e.g. ``nv_small_256/``)."""
    by_tail: dict[str, list[str]] = {}
    for name in members:
        parts = name.strip("/").split("/")
        if len(parts) >= 2:
            by_tail.setdefault("/".join(parts[-2:]), []).append(name)
    out = {}
    for rel in wanted:
        names = by_tail.get(rel, [])
        if names:
            best = next((n for n in names if f"nv_small/{rel}" in n), names[0])
            out[rel] = members[best]
    return out


def _local_root(path: Path, m: dict) -> Path:
    """The folder of a local source that holds the ``<test>/`` folders."""
    tests = {rel.split("/")[0] for rel in m["files"]}
    for root in (path / m["folder"], path / m["config"], path):
        if root.is_dir() and any((root / t).is_dir() for t in tests):
            return root
    raise FetchError(f"--from {path}: holds none of the {len(tests)} pinned {m['config']} trace "
                     f"folders (give an nvdla/hw checkout, a folder holding {m['config']}/, "
                     f"the {m['config']} folder itself, or an archive)")


def _gather(source: str, m: dict, progress) -> dict[str, bytes]:
    """The files of ``m`` that ``source`` has, unverified."""
    files = m["files"]
    if _is_url(source):
        if _is_archive(source.split("?")[0]) or "codeload.github.com" in source:
            data = _read_url(source, 1 << 31)
            if data is None:
                raise FetchError(f"--from {source}: not found")
            return _from_archive(_archive_members(data, source), files)
        base = source if source.endswith("/") else source + "/"
        out = {}
        for i, rel in enumerate(sorted(files), 1):
            data = _read_url(base + rel, MAX_FILE_BYTES)
            if data is not None:
                out[rel] = data
            if progress is not None:
                progress(i, len(files), rel)
        return out
    path = Path(source).expanduser()
    if path.is_file():
        if not _is_archive(path.name):
            raise FetchError(f"--from {source}: a file that is not an archive (.tar.gz, .tgz, "
                             f".tar, .zip)")
        return _from_archive(_archive_members(path.read_bytes(), source), files)
    if not path.exists():
        raise FetchError(f"--from {source}: no such file, folder or URL (URLs start with "
                         f"https://, http:// or file://)")
    root = _local_root(path, m)
    out = {}
    for rel in files:
        p = root / rel
        if p.is_file() and p.stat().st_size <= MAX_FILE_BYTES:
            out[rel] = p.read_bytes()
    return out


def fetch_traces(source: str | Path | None = None, dest: str | Path | None = None, *,
                 allow_missing: bool = False,
                 progress: Callable[[int, int, str], None] | None = None,
                 name: str = "nv_small") -> FetchResult:
    """Install the pinned traces into ``dest`` (default :func:`cache_dir`) as ``dest/<name>/``
    from ``source`` (default :func:`default_source`; see the module docstring). Every file must
    match its pinned blob id; raises :class:`FetchError` otherwise, or when files are missing
    (unless ``allow_missing``), leaving an installed copy untouched."""
    m = manifest(name)
    source = default_source(m) if source is None else str(source)
    dest = Path(dest) if dest is not None else cache_dir(m["commit"])
    got = _gather(source, m, progress)
    for rel, data in sorted(got.items()):
        want = m["files"][rel]
        blob = git_blob_id(data)
        if blob != want["git_blob"] or (want["size"] is not None and len(data) != want["size"]):
            raise FetchError(f"{source}: {rel}: {len(data):,} bytes with git blob id {blob}, "
                             f"but {m['repository']} at {m['commit'][:8]} has "
                             f"{want['size'] if want['size'] is not None else '?'} bytes with "
                             f"{want['git_blob']}: not NVIDIA's file; nothing was installed")
    missing = tuple(sorted(set(m["files"]) - set(got)))
    if not got:
        raise FetchError(f"{source}: none of the {len(m['files'])} pinned files of "
                         f"{m['repository']} {m['folder']} at {m['commit'][:8]} found there")
    if missing and not allow_missing:
        raise FetchError(f"{source}: {len(missing)} of the {len(m['files'])} pinned files are "
                         f"missing (first: {missing[0]}); nothing was installed (pass "
                         f"--allow-missing to install the {len(got)} found; traces needing the "
                         f"others then fail naming them)")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest))
    except OSError as exc:
        raise FetchError(f"{dest}: cannot write the traces there ({exc.strerror})") from None
    try:
        for rel, data in got.items():
            p = tmp / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        (tmp / name / "SOURCE.json").write_text(json.dumps(
            {"repository": m["repository"], "commit": m["commit"], "folder": m["folder"],
             "source": source, "files": len(got), "missing": list(missing)}, indent=1) + "\n",
            encoding="utf-8")
        final = dest / name
        if final.exists():
            old = dest / f".old-{os.getpid()}"
            os.replace(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp / name, final)
    except OSError as exc:
        raise FetchError(f"{dest}: cannot write the traces there ({exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return FetchResult(folder=dest / name, files=len(got), bytes=sum(map(len, got.values())),
                       missing=missing)


def trace_search(explicit: str | Path | None = None) -> list[tuple[str, Path]]:
    """Where ``npulab nvdla trace`` looks for the folder holding ``nv_small/``, in order:
    ``[(what, folder)]``. An explicit folder (``--traces``) or ``$NPULAB_NVDLA_TRACES`` is the
    only candidate when given (never silently skipped)."""
    if explicit is not None:
        return [("--traces", Path(explicit))]
    env = os.environ.get("NPULAB_NVDLA_TRACES")
    if env:
        return [("$NPULAB_NVDLA_TRACES", Path(env))]
    return [("the user cache", cache_dir()),
            ("the source tree's shared folder", _source_tree_shared())]


def _source_tree_shared() -> Path:
    """``shared/nvdla/traces`` beside the checkout this module runs from (a team's data)."""
    return Path(__file__).resolve().parents[3] / "shared" / "nvdla" / "traces"
