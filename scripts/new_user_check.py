#!/usr/bin/env python3
"""Try npulab as a new user would: a fresh copy of the repository, a fresh virtual environment,
only the README and the docs, and every command of the quick start and of each lab run exactly
as written.

Steps (each timed; the check goes on after a failure and reports them all):

1. Copy the repository's files (what ``git ls-files`` lists, tracked or not ignored; without git,
   the tree minus virtual environments and caches) into a temporary directory. Nothing of this
   checkout's environment leaks in: ``PATH`` loses every virtual environment, ``VIRTUAL_ENV``,
   ``PYTHONPATH`` and ``NUMBA_CACHE_DIR`` are unset, so imports come from the new install only.
2. README.md, section "Quick start": the first ``sh`` block (create ``.venv``, ``pip install .``,
   ``npulab run``) runs in the copy as written. The second (``pip install '.[test]' && pytest``)
   is the command CI itself runs (``.ci/run``), so it is not run again here.
3. ``examples/labs/README.md``: its setup block (``pip install '.[labs]'``), then every lab sheet
   ``examples/labs/*/README.md``, through ``scripts/doccheck.py`` with ``.venv`` activated:
   every command as written, every output compared. (The rest of the docs, getting started
   included, runs in ``scripts/build_docs.py``; it needs nothing beyond the quick start's
   install, which step 2 proves in a fresh environment.)

Use: ``python scripts/new_user_check.py [--keep] [-k TEXT]``. Exit status 0 when every step
passed. ``tests/docs/test_new_user.py`` runs it in CI.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import doccheck  # noqa: E402

_IGNORE = shutil.ignore_patterns(".git", ".venv*", "__pycache__", "*.egg-info", "build", "site",
                                 ".pytest_cache", ".hypothesis", ".fragments", "*.pyc")


def copy_repository(dest: Path) -> None:
    """The files a clone would have (plus new, not ignored ones) into ``dest``."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, check=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
        names = [n for n in listed.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = None
    if not names:
        shutil.copytree(ROOT, dest, ignore=_IGNORE, symlinks=True)
        return
    for name in names:
        src = ROOT / name
        if not src.is_file():             # deleted in the working tree
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def clean_env() -> dict[str, str]:
    """This process's environment without any virtual environment or source path in it."""
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "NUMBA_CACHE_DIR", "CONDA_PREFIX"):
        env.pop(key, None)
    keep = []
    for part in env.get("PATH", "").split(os.pathsep):
        p = Path(part)
        if part and not (p.name == "bin" and (p.parent / "pyvenv.cfg").exists()):
            keep.append(part)
    env["PATH"] = os.pathsep.join(keep)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["MPLBACKEND"] = "Agg"
    env["COLUMNS"] = "100"
    return env


def section_blocks(markdown: Path, heading: str) -> list[doccheck.Block]:
    """The fenced blocks under the Markdown heading ``heading`` (up to the next heading of the
    same or a higher level)."""
    text = markdown.read_text(encoding="utf-8")
    m = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    if not m:
        raise SystemExit(f"new_user_check: {markdown}: no section {heading!r}")
    level = len(m.group(1))
    start_line = text[:m.start()].count("\n") + 1
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, m.end())
    end_line = text[:end.start()].count("\n") + 1 if end else 10 ** 9
    blocks, _ = doccheck.read_blocks(markdown)
    return [b for b in blocks if start_line < b.line < end_line]


class Checker:
    def __init__(self, work: Path, env: dict[str, str], log=print):
        self.work, self.env, self.log = work, env, log
        self.failures: list[str] = []
        self.steps: list[tuple[str, float, bool]] = []
        self.lock = threading.Lock()

    def run_block(self, name: str, block: doccheck.Block) -> bool:
        t0 = time.monotonic()
        found = doccheck.run_block(block, self.work, self.env)
        dt = time.monotonic() - t0
        self.steps.append((name, dt, not found))
        self.log(f"{'ok  ' if not found else 'FAIL'} {dt:6.1f} s  {name}")
        self.failures += [str(f) for f in found]
        return not found

    def run_sheet(self, sheet: Path) -> None:
        """All blocks of one sheet, in order, in the copy (the sheets write distinct files, so
        several may run at once); the sheet's log is printed in one piece when it ends."""
        t0 = time.monotonic()
        lines: list[str] = []
        ran, skipped, found = doccheck.check_files([sheet], self.work, cwd=self.work,
                                                   env=self.env, log=lines.append)
        dt = time.monotonic() - t0
        name = f"{sheet.relative_to(self.work)}: {ran} blocks, {skipped} skipped"
        with self.lock:
            for line in lines:
                self.log("     " + line)
            self.steps.append((name, dt, not found))
            self.log(f"{'ok  ' if not found else 'FAIL'} {dt:6.1f} s  {name}")
            self.failures += [str(f) for f in found]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is "
                                                        "printed)")
    ap.add_argument("-k", dest="select", help="run only the lab sheets whose path contains this "
                                              "(the quick start and setup always run)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="sheets run at once (default: the number of cores)")
    ap.add_argument("--python", default="python3",
                    help="the interpreter a new user has on PATH as python3 (default python3)")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="npulab-new-user-"))
    work = tmp / "npulab"
    copy_repository(work)
    env = clean_env()
    if args.python != "python3":          # put the requested interpreter first as python3
        shim = tmp / "bin"
        shim.mkdir()
        (shim / "python3").symlink_to(shutil.which(args.python) or args.python)
        env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    print(f"new_user_check: fresh copy in {work}")
    check = Checker(work, env)

    quick = [b for b in section_blocks(work / "README.md", "Quick start") if b.lang == "sh"]
    if len(quick) < 2:
        print("new_user_check: README.md: the Quick start section needs its two sh blocks "
              "(install and run; install and test)", file=sys.stderr)
        return 2
    quick[0].timeout = max(quick[0].timeout, 1200)
    ok = check.run_block(f"README.md:{quick[0].line} quick start: "
                         f"{quick[0].body.strip()}", quick[0])
    print(f"skip        README.md:{quick[1].line} {quick[1].body.strip()}  (the test command: "
          f"CI runs it as .ci/run)")
    venv = work / ".venv"
    if ok:
        env["VIRTUAL_ENV"] = str(venv)           # what `. .venv/bin/activate` does
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
        labs = work / "examples" / "labs" / "README.md"
        setup = [b for b in section_blocks(labs, "Setup") if b.lang in ("sh", "console")]
        for b in setup:
            b.timeout = max(b.timeout, 1200)
            ok = check.run_block(f"{labs.relative_to(work)}:{b.line} setup: {b.body.strip()}",
                                 b) and ok
    if ok:
        sheets = sorted((work / "examples" / "labs").glob("*/README.md"))
        sheets = [s for s in sheets if not args.select or args.select in str(s.relative_to(work))]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(check.run_sheet, sheets))

    for f in check.failures:
        print(f"\nFAILED {f}", file=sys.stderr)
    total = time.monotonic() - t_start
    print(f"new_user_check: {sum(ok for _, _, ok in check.steps)} of {len(check.steps)} steps "
          f"passed in {total:.0f} s")
    if args.keep:
        print(f"new_user_check: kept {work}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if not check.failures and check.steps else 1


if __name__ == "__main__":
    sys.exit(main())
