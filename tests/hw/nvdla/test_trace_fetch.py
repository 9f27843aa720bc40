"""``npulab nvdla fetch-traces`` (hw/nvdla/trace_fetch.py): NVIDIA's traces are copied from a
source (here always local: a folder, a file:// URL, an archive; the tests have no network),
checked against the pinned git blob ids, installed into the user cache, and found there by
``npulab nvdla trace``; when they are nowhere, the error says how to get them (issue 21,
item 21)."""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from hw.nvdla import trace_fetch
from hw.nvdla.trace_fetch import FetchError, fetch_traces, git_blob_id
from npulab.cli import nvdla as nvdla_cmd
from npulab.cli import main


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty user cache; no $NPULAB_NVDLA_TRACES; no shared folder beside the checkout."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NPULAB_NVDLA_TRACES", raising=False)
    monkeypatch.setattr(trace_fetch, "_source_tree_shared", lambda: tmp_path / "no-shared")
    return tmp_path / "xdg" / "npulab" / "nvdla-traces"


def test_git_blob_id_is_gits():
    # `printf 'hello\n' | git hash-object --stdin`
    assert git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_pinned_manifest_matches_the_shared_copy(nv_small_traces):
    """Every file of the shared copy is the pinned commit's file (the 9 it lacks are listed)."""
    m = trace_fetch.manifest()
    assert m["repository"] == "nvdla/hw" and m["commit"].startswith("1a65f1f5")
    tests = {rel.split("/")[0] for rel in m["files"]}
    assert tests == {p.name for p in nv_small_traces.iterdir() if p.is_dir()}
    have = [rel for rel in m["files"] if (nv_small_traces / rel).is_file()]
    assert len(m["files"]) - len(have) == 9
    for rel in have:
        assert git_blob_id((nv_small_traces / rel).read_bytes()) == m["files"][rel]["git_blob"]


def test_fetch_from_a_local_copy_then_trace_finds_it_in_the_cache(cache, nv_small_traces,
                                                                    capsys):
    assert main(["nvdla", "trace"]) == 2              # nothing anywhere: how to get them
    err = capsys.readouterr().err.strip()
    assert err.startswith("npulab: error: no PATH given and NVIDIA's nv_small traces are not "
                          "there (the user cache: ") and "\n" not in err
    assert "download NVIDIA's traces with 'npulab nvdla fetch-traces', or pass a trace " \
           "folder" in err
    # the shared copy lacks 9 files: refused unless --allow-missing
    assert main(["nvdla", "fetch-traces", "--from", str(nv_small_traces.parent), "-q"]) == 2
    err = capsys.readouterr().err
    assert "9 of the 167 pinned files are missing" in err and "nothing was installed" in err
    assert not cache.exists() or not any(cache.rglob("*.cfg"))
    assert main(["nvdla", "fetch-traces", "--from", str(nv_small_traces.parent),
                 "--allow-missing"]) == 0
    out = capsys.readouterr().out
    assert "158 files (11.8 MB) of 69 tests, nvdla/hw at 1a65f1f5, verified" in out
    installed = trace_fetch.cache_dir() / "nv_small"
    assert installed.parent.parent == cache
    assert len([p for p in installed.iterdir() if p.is_dir()]) == 69
    assert nvdla_cmd._default_traces(None) == installed
    one = installed / "cdp_1x1x1_lrn3_int8_0"
    assert main(["nvdla", "trace", str(one)]) == 0
    assert capsys.readouterr().out.splitlines() == ["PASS cdp_1x1x1_lrn3_int8_0",
                                                    "1 passed, 0 failed"]


# ---- synthetic traces: every kind of source, tampering -----------------------------------------

_FILES = {"t_a/t_a.cfg": b"check_nothing(s);\n", "t_a/t_a_in.dat": b"{offset:0x0, size:1, "
          b"payload:0x01}\n", "t_b/t_b.cfg": b"// b\ncheck_nothing(s);\n"}


@pytest.fixture
def synthetic(cache, monkeypatch):
    m = {"repository": "nvdla/hw", "commit": "c0ffee" * 6 + "c0ff", "config": "nv_small",
         "folder": "verif/tests/trace_tests/nv_small",
         "files": {rel: {"git_blob": git_blob_id(data), "size": len(data)}
                   for rel, data in _FILES.items()}}
    monkeypatch.setattr(trace_fetch, "manifest", lambda name="nv_small": m)
    return m


def _tree(root: Path, files=_FILES) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _installed(cache: Path, m: dict) -> dict:
    folder = cache / m["commit"] / "nv_small"
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and p.name != "SOURCE.json"}


def _tgz(entries: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_every_kind_of_source(synthetic, cache, tmp_path):
    src = _tree(tmp_path / "src" / "nv_small")
    for source in (src, src.parent, f"file://{src}/", f"file://{src}"):
        assert fetch_traces(source).files == 3
        assert _installed(cache, synthetic) == _FILES
    # a GitHub-style archive of the whole repository: the nv_small copy wins over a decoy
    top = f"hw-{synthetic['commit']}/verif/tests/trace_tests"
    entries = {f"{top}/nv_small_256/{rel}": b"decoy" for rel in _FILES}
    entries.update({f"{top}/nv_small/{rel}": data for rel, data in _FILES.items()})
    (tmp_path / "hw.tar.gz").write_bytes(_tgz(entries))
    assert fetch_traces(tmp_path / "hw.tar.gz").files == 3
    assert _installed(cache, synthetic) == _FILES
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for rel, data in _FILES.items():
            z.writestr(f"nv_small/{rel}", data)
    (tmp_path / "t.zip").write_bytes(buf.getvalue())
    result = fetch_traces(f"file://{tmp_path / 't.zip'}", tmp_path / "elsewhere")
    assert result.folder == tmp_path / "elsewhere" / "nv_small"
    assert (result.folder / "t_b" / "t_b.cfg").read_bytes() == _FILES["t_b/t_b.cfg"]


@pytest.mark.parametrize("damage, needle", [
    ({"t_a/t_a_in.dat": b"{offset:0x0, size:1, payload:0x02}\n"},
     "t_a/t_a_in.dat: 35 bytes with git blob id"),
    ({"t_b/t_b.cfg": None}, "1 of the 3 pinned files are missing (first: t_b/t_b.cfg)"),
])
def test_a_wrong_or_missing_file_installs_nothing(synthetic, cache, tmp_path, capsys, damage,
                                                  needle):
    good = _tree(tmp_path / "good")
    fetch_traces(good)
    files = {**_FILES, **damage}
    bad = _tree(tmp_path / "bad", {k: v for k, v in files.items() if v is not None})
    with pytest.raises(FetchError, match=re.escape(needle)):
        fetch_traces(bad)
    assert _installed(cache, synthetic) == _FILES          # the installed copy is untouched
    assert main(["nvdla", "fetch-traces", "--from", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"npulab: error: {bad}: ") and needle in err and "\n" not in err


@pytest.mark.parametrize("source, needle", [
    ("NOPE", "no such file, folder or URL"),
    ("file:///nonexistent-npulab/", "none of the 3 pinned files"),
    ("FILE", "a file that is not an archive"),
    ("EMPTY", "holds none of the 2 pinned nv_small trace folders"),
    ("BADTGZ", "not a readable .tar.gz/.tar/.zip archive"),
])
def test_bad_sources_are_one_line(synthetic, tmp_path, capsys, source, needle):
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "BADTGZ.tgz").write_bytes(b"not gzip")
    if source in ("NOPE", "FILE", "EMPTY"):
        source = str(tmp_path / source)
    elif source == "BADTGZ":
        source = str(tmp_path / "BADTGZ.tgz")
    assert main(["nvdla", "fetch-traces", "--from", source, "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npulab: error: ") and needle in err and "\n" not in err


def test_trace_looks_in_traces_env_cache_then_shared(cache, tmp_path, monkeypatch, capsys):
    mine = _tree(tmp_path / "mine" / "nv_small", {"x/x.cfg": b"check_nothing(s);\n"}).parent
    assert nvdla_cmd._default_traces(str(mine)) == mine / "nv_small"
    assert main(["nvdla", "trace", "--traces", str(tmp_path / "none")]) == 2
    assert "(--traces: " in capsys.readouterr().err
    monkeypatch.setenv("NPULAB_NVDLA_TRACES", str(mine))
    assert nvdla_cmd._default_traces(None) == mine / "nv_small"
    monkeypatch.delenv("NPULAB_NVDLA_TRACES")
    shared = _tree(tmp_path / "shared" / "nv_small", {"y/y.cfg": b"check_nothing(s);\n"}).parent
    monkeypatch.setattr(trace_fetch, "_source_tree_shared", lambda: shared)
    assert nvdla_cmd._default_traces(None) == shared / "nv_small"
    cached = trace_fetch.cache_dir() / "nv_small"
    cached.mkdir(parents=True)
    assert nvdla_cmd._default_traces(None) == cached      # the cache before the shared folder
    assert main(["nvdla", "trace", "x", "--traces", str(mine)]) == 2
    assert "--traces DIR applies when no PATH is given" in capsys.readouterr().err
