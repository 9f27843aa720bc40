"""The user guide builds as a static site with one command, fails on broken links, and every
example in docs/ runs as written (scripts/build_docs.py)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")


def test_site_builds_and_every_docs_example_runs(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_docs.py"),
                           "--site-dir", str(site)], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-8000:]
    assert "0 failed" in proc.stdout
    # every page of the navigation was rendered, the lab sheets among them
    import yaml  # mkdocs depends on PyYAML
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)["nav"]

    def pages(items):
        for item in items:
            for value in item.values():
                yield from pages(value) if isinstance(value, list) else [value]

    for page in pages(nav):
        assert (site / page).with_suffix(".html").exists(), page
    # links to repository files outside docs/ point at published copies
    assert any((site / "repo").rglob("*")), "no repository file was linked from the docs"


def _mini_site(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(body)
    (docs / "other.md").write_text("# Other\n\n## A section\n")
    config = ROOT / "mkdocs.yml"
    text = config.read_text().split("\nnav:")[0]          # our settings, a two-page nav
    text = text.replace("scripts/mkdocs_hooks.py", str(ROOT / "scripts" / "mkdocs_hooks.py"))
    (tmp_path / "mkdocs.yml").write_text(text + textwrap.dedent("""
        nav:
          - index.md
          - other.md
        """))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=tmp_path, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)


def test_a_good_mini_site_builds(tmp_path):
    proc = _mini_site(tmp_path, "# Home\n\nSee [other](other.md#a-section).\n")
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("link", ["missing.md", "other.md#no-such-section", "../nowhere/x.py"])
def test_a_broken_link_fails_the_build(tmp_path, link):
    proc = _mini_site(tmp_path, f"# Home\n\nSee [it]({link}).\n")
    assert proc.returncode != 0
    assert "Aborted" in proc.stdout and link.split("#")[0].split("/")[-1] in proc.stdout
