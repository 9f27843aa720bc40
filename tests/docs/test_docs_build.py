"""The user guide builds as a static site with one command, fails on broken links, and every
example in docs/ runs as written (scripts/build_docs.py)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")


def test_site_builds_and_every_docs_example_runs(background):
    """scripts/build_docs.py, started in the background by tests/conftest.py (about 6 min of
    one core): generated pages current, mkdocs --strict, every example of README and docs/."""
    status, output = background("test_docs_build.py::test_site_builds_and_every_docs_example_runs")
    assert status == 0, output[-8000:]
    assert ", 0 failed" in output
    site = Path(output.split("build_docs: site built in ", 1)[1].splitlines()[0])
    # every page of the navigation was rendered, the lab sheets among them
    import yaml  # mkdocs depends on PyYAML
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)["nav"]

    def pages(items):
        for item in items:
            for value in item.values():
                yield from pages(value) if isinstance(value, list) else [value]

    for page in pages(nav):                      # MkDocs renders a README.md as index.html
        html = (site / page).with_suffix(".html")
        if html.name == "README.html":
            html = html.with_name("index.html")
        assert html.exists(), page
    # a link to a repository file outside docs/ points at a published copy of it
    copy = site / "repo" / "sim_configs" / "default.toml"
    assert copy.read_bytes() == (ROOT / "sim_configs" / "default.toml").read_bytes()
    page = (site / "getting_started.html").read_text()
    assert 'href="repo/sim_configs/default.toml"' in page


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


def test_a_link_to_markdown_outside_docs_fails_the_build(tmp_path):
    """It would become a page outside the navigation whose own links nobody checks."""
    proc = _mini_site(tmp_path, f"# Home\n\nSee [the benchmarks]({ROOT}/benchmarks/README.md).\n"
                      .replace(str(ROOT), "../" * len(tmp_path.parts) + str(ROOT).lstrip("/")))
    assert proc.returncode != 0 and "Aborted" in proc.stdout
