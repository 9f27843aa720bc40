"""MkDocs hooks for npulab's site (``mkdocs.yml`` loads this file).

* The lab sheets live next to their scripts in ``examples/labs/`` (students work there); the
  site shows them under ``labs/``: ``examples/labs/README.md`` becomes ``labs/index.md`` and each
  lab directory's ``README.md``, scripts and specs are copied beside it, so a sheet's links to its
  scripts work. The instructor answers (``examples/labs/instructor/``) are not published.
* A link from a page to a repository file outside ``docs/`` (``../benchmarks/bench_mapper.py``,
  ``../../sim_configs/default.toml``) is rewritten to a copy of that file published under
  ``repo/``, so the site is complete offline. A link to a missing file, to a directory without
  a page, or to a Markdown file outside ``docs/`` and the labs (which would become a page
  outside the navigation, with links of its own) is left as written, and MkDocs' strict link
  validation fails the build on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "examples" / "labs"
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LAB_FILES = (".md", ".py", ".toml", ".csv", ".txt", ".json")

# site path (src_uri) -> repository file, for every page and file this hook adds, and the
# inverse for the lab files (set by on_files, read by on_page_markdown)
_SOURCES: dict[str, Path] = {}
_LAB_PATHS: dict[Path, str] = {}


def _lab_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    index = LABS / "README.md"
    if index.exists():
        out["labs/index.md"] = index
    for lab in sorted(p for p in LABS.iterdir() if p.is_dir()) if LABS.exists() else ():
        if lab.name in ("instructor", "__pycache__"):
            continue
        for f in sorted(lab.rglob("*")):
            if f.is_file() and f.suffix in _LAB_FILES and "__pycache__" not in f.parts:
                out[f"labs/{f.relative_to(LABS).as_posix()}"] = f
    return out


def _links(markdown: str):
    """(line index, match) of every inline link outside fenced code."""
    in_fence = False
    for i, line in enumerate(markdown.splitlines()):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for m in _LINK.finditer(line):
            yield i, m


def _external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target)) or target.startswith(("#", "/"))


def _site_path(repo_file: Path, docs_dir: Path, lab_paths: dict[Path, str]) -> str | None:
    """Where a repository file appears on the site (None: not published)."""
    repo_file = repo_file.resolve()
    if repo_file in lab_paths:
        return lab_paths[repo_file]
    try:
        return repo_file.relative_to(docs_dir).as_posix()
    except ValueError:
        pass
    if repo_file.is_file() and repo_file.suffix != ".md":
        return "repo/" + repo_file.relative_to(ROOT).as_posix()
    if repo_file.is_dir() and (repo_file / "README.md").resolve() in lab_paths:
        return lab_paths[(repo_file / "README.md").resolve()]
    return None


def _resolve(target: str, source: Path) -> Path | None:
    path = target.split("#", 1)[0]
    if not path:
        return None
    resolved = (source.parent / path).resolve()
    try:
        resolved.relative_to(ROOT)
    except ValueError:
        return None
    return resolved


def on_files(files: Files, config) -> Files:
    docs_dir = Path(config["docs_dir"]).resolve()
    _SOURCES.clear()
    labs = _lab_files() if docs_dir == (ROOT / "docs").resolve() else {}   # npulab's own site
    for uri, path in labs.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
        _SOURCES[uri] = path
    _LAB_PATHS.clear()
    _LAB_PATHS.update({p.resolve(): uri for uri, p in _SOURCES.items()})
    lab_paths = _LAB_PATHS
    pages = [(Path(f.abs_src_path), f.src_uri) for f in files if f.src_uri.endswith(".md")
             and f.abs_src_path]
    present = {f.src_uri for f in files}
    for source, _ in pages:
        for _, m in _links(source.read_text(encoding="utf-8")):
            target = m.group(2)
            if _external(target):
                continue
            resolved = _resolve(target, source)
            if resolved is None or not resolved.is_file():
                continue
            site = _site_path(resolved, docs_dir, lab_paths)
            if site and site.startswith("repo/") and site not in present:
                files.append(File.generated(config, site, abs_src_path=str(resolved)))
                present.add(site)
                _SOURCES[site] = resolved
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    source = Path(page.file.abs_src_path).resolve()
    lab_paths = _LAB_PATHS
    page_dir = posixpath.dirname(page.file.src_uri)
    lines = markdown.splitlines(keepends=True)
    edits: dict[int, list] = {}
    for i, m in _links(markdown):
        target = m.group(2)
        if _external(target):
            continue
        resolved = _resolve(target, source)
        if resolved is None:
            continue
        site = _site_path(resolved, docs_dir, lab_paths)
        if site is None:
            continue                 # left as written: strict validation reports it
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        new = posixpath.relpath(site, page_dir or ".") + anchor
        if new != target:
            edits.setdefault(i, []).append((m.start(2), m.end(2), new))
    for i, spans in edits.items():
        line = lines[i]
        for start, end, new in sorted(spans, reverse=True):
            line = line[:start] + new + line[end:]
        lines[i] = line
    return "".join(lines)

