"""scripts/new_user_check.py: a fresh copy, a fresh venv, the README quick start and every lab
sheet run exactly as written, with their outputs compared."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_environment_is_cleaned_of_virtual_environments(script, monkeypatch, tmp_path):
    check = script("new_user_check")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setenv("PATH", os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"]))
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    env = check.clean_env()
    assert env["PATH"].split(os.pathsep) == ["/usr/bin", "/bin"]
    assert "VIRTUAL_ENV" not in env and "PYTHONPATH" not in env


def test_quick_start_section_has_the_two_commands(script):
    check = script("new_user_check")
    blocks = [b for b in check.section_blocks(ROOT / "README.md", "Quick start") if b.lang == "sh"]
    assert "pip install . && npulab run" in blocks[0].body
    assert "pip install '.[test]' && pytest" in blocks[1].body


def test_copy_has_what_a_clone_has(script, tmp_path):
    check = script("new_user_check")
    check.copy_repository(tmp_path / "copy")
    assert (tmp_path / "copy" / "pyproject.toml").exists()
    assert (tmp_path / "copy" / "examples" / "labs" / "README.md").exists()
    assert not (tmp_path / "copy" / ".venv").exists()
    assert not list((tmp_path / "copy").rglob("__pycache__"))


def test_new_user_check_passes(background):
    """The whole check, started in the background by tests/conftest.py: about 4 minutes of one
    core (the installs and the Numba compiles of a fresh venv included)."""
    status, output = background("test_new_user.py::test_new_user_check_passes")
    assert status == 0, output[-10000:]
    assert "FAIL" not in output
    done = output.rsplit("new_user_check: ", 1)[1]
    passed, total = done.split(" steps passed")[0].split(" of ")
    assert passed == total and int(total) >= 8      # quick start, labs setup, 6 lab sheets
