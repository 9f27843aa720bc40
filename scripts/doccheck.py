#!/usr/bin/env python3
"""Run the examples in Markdown files exactly as written and compare their output.

This is how the docs and the lab sheets stay true: ``scripts/build_docs.py`` runs it over
``docs/``, ``scripts/new_user_check.py`` over the README quick start and every lab sheet in a
fresh virtual environment, and both run in CI.

What runs
---------
* A ```` ```console ```` block is a terminal session. A line starting with ``$ `` is a command
  (a trailing ``\\`` continues it on the next line); the lines up to the next command are its
  expected output (stdout and stderr together). An empty expected output checks only the exit
  status.
* A ```` ```sh ```` or ```` ```bash ```` block is a script, run as a whole by ``bash -e`` (so
  heredocs work and the first failing line stops it); only the exit status is checked.
* A ```` ```python ```` block is a Python program, run with ``python -`` (the block on stdin).
  Its output is not compared; it must exit 0 (asserts in the block are the check).
* Other blocks (``toml``, ``text``, no language) are shown, never run.

Commands run through ``bash`` one after another in one working directory per Markdown file,
so a later example can read what an earlier one wrote. By default that directory is a fresh
temporary directory holding symbolic links to the top-level entries of the repository
(``sim_configs/``, ``examples/``, ...), so output files land in the temporary directory, not in
the checkout. ``python`` and ``npulab`` are the ones on ``PATH``.

Comparing output
----------------
Trailing spaces and trailing blank lines are ignored. In the expected output, a line that is
exactly ``...`` matches any number of lines (also none), and ``...`` inside a line matches any
text on that line, for numbers that legitimately change between runs (wall-clock time).
Everything else must match character for character: the simulator is deterministic, so a
changed number in the docs is a bug in the docs or in the code.

Directives
----------
An HTML comment on the line(s) just before a block changes how it runs (several may be given,
separated by ``;``; ``skip: REASON`` comes last, its reason runs to the end)::

    <!-- doccheck: skip: needs a CUDA GPU -->      not run; the reason is required
    <!-- doccheck: timeout=600 -->                 seconds for the whole block (default 300)
    <!-- doccheck: status=2 -->                    every command must exit with this status
    <!-- doccheck: nooutput -->                    run a console block but do not compare output
    <!-- doccheck: env=NAME=VALUE -->              extra environment for this block

``<!-- doccheck-file: skip: reason -->`` anywhere in a file skips the whole file.

Updating the docs after a deliberate change of numbers: ``--update`` writes the actual output
of every failing console command back into its file, in place of the expected lines, unless the
expected lines use ``...`` (those are reported for a hand edit). Review the diff before
committing it: every changed number must be one the change explains.

Use: ``python scripts/doccheck.py FILE.md ... [--root DIR] [--cwd DIR] [-k TEXT]``; exit
status 0 when every block passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

RUN_LANGS = {"console", "sh", "bash", "python"}
DEFAULT_TIMEOUT = 300.0

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"<!--\s*doccheck:\s*(.*?)\s*-->")
_FILE_SKIP = re.compile(r"<!--\s*doccheck-file:\s*skip:\s*(.+?)\s*-->")


class DocCheckError(ValueError):
    """A Markdown file whose examples cannot be read (a malformed directive or block)."""


@dataclass
class Command:
    text: str                      # the command as written (continuations joined)
    expected: list[str] | None     # expected output lines; None: not compared
    first: int = -1                # console: body line index of its first expected line


@dataclass
class Block:
    path: Path
    line: int                      # 1-based line of the opening fence
    lang: str
    body: str
    commands: list[Command] = field(default_factory=list)
    skip: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    status: int = 0
    compare: bool = True
    env: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Failure:
    block: Block
    command: str
    message: str

    actual: list[str] | None = None    # the output, for --update (console commands)
    index: int = -1                    # the command's index in its block

    def __str__(self) -> str:
        return f"{self.block.where}: {self.block.lang} block: $ {self.command}\n{self.message}"


def _parse_directives(text: str, path: Path, line: int, block: Block) -> None:
    head, sep, reason = text.partition("skip")
    items = [s.strip() for s in head.split(";")]
    if sep:                        # a skip reason runs to the end of the comment
        items.append("skip" + reason)
    for item in items:
        if not item:
            continue
        if item.startswith("skip"):
            reason = item[4:].lstrip(": ").strip()
            if not reason:
                raise DocCheckError(f"{path}:{line}: doccheck skip needs a reason: "
                                    f"<!-- doccheck: skip: why -->")
            block.skip = reason
        elif item.startswith("timeout="):
            try:
                block.timeout = float(item.split("=", 1)[1])
            except ValueError:
                raise DocCheckError(f"{path}:{line}: doccheck timeout = {item[8:]!r}: must be "
                                    f"a number of seconds") from None
        elif item.startswith("status="):
            try:
                block.status = int(item.split("=", 1)[1])
            except ValueError:
                raise DocCheckError(f"{path}:{line}: doccheck status = {item[7:]!r}: must be an "
                                    f"integer exit status") from None
        elif item == "nooutput":
            block.compare = False
        elif item.startswith("env="):
            name, sep, value = item[4:].partition("=")
            if not sep or not name:
                raise DocCheckError(f"{path}:{line}: doccheck env = {item[4:]!r}: must be "
                                    f"NAME=VALUE")
            block.env[name] = value
        else:
            raise DocCheckError(f"{path}:{line}: unknown doccheck directive {item!r}; allowed: "
                                f"skip: REASON, timeout=SECONDS, status=N, nooutput, "
                                f"env=NAME=VALUE")


def _console_commands(body: str) -> list[Command]:
    commands: list[Command] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if commands:
                commands[-1].expected.append(line)
            elif line.strip():
                raise DocCheckError(f"output line {line!r} before the first '$ ' command")
            i += 1
            continue
        text = line[2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text + "\n" + lines[i]            # bash joins the continuation itself
        commands.append(Command(text, [], i + 1))
        i += 1
    return commands


def read_blocks(path: str | os.PathLike) -> tuple[list[Block], str | None]:
    """The fenced blocks of a Markdown file, and the file-level skip reason (or None)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    m = _FILE_SKIP.search(text)
    file_skip = m.group(1) if m else None
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                      and lines[i].strip().strip(fence[0]) == ""):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        block = Block(path, start + 1, lang, "\n".join(body) + "\n")
        # directives: the comment lines directly above the fence
        j = start - 1
        while j >= 0 and lines[j].strip().startswith("<!--"):
            for d in _DIRECTIVE.finditer(lines[j]):
                _parse_directives(d.group(1), path, j + 1, block)
            j -= 1
        try:
            if lang == "console":
                block.commands = _console_commands(block.body)
            elif lang in ("sh", "bash"):
                block.commands = [Command(block.body, None)] if block.body.strip() else []
            elif lang == "python":
                block.commands = [Command("python -", None)]
        except DocCheckError as e:
            raise DocCheckError(f"{path}:{start + 1}: {e}") from None
        blocks.append(block)
    return blocks, file_skip


def _line_matches(expected: str, actual: str) -> bool:
    if "..." not in expected:
        return expected == actual
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Do ``actual`` lines match ``expected`` (``...`` lines match any run of lines)?"""
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip() for a in actual]
    while exp and not exp[-1]:
        exp.pop()
    while act and not act[-1]:
        act.pop()
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(exp):
            result = j == len(act)
        elif exp[i] == "...":
            result = any(match(i + 1, k) for k in range(j, len(act) + 1))
        else:
            result = j < len(act) and _line_matches(exp[i], act[j]) and match(i + 1, j + 1)
        memo[key] = result
        return result

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * (len(exp) + len(act)) + 100))
    return match(0, 0)


def _diff(expected: list[str], actual: list[str]) -> str:
    import difflib
    return "\n".join(difflib.unified_diff([e.rstrip() for e in expected],
                                          [a.rstrip() for a in actual],
                                          "expected (in the docs)", "actual", lineterm="", n=2))


def make_workdir(root: Path) -> Path:
    """A temporary directory with links to the repository's top-level entries."""
    work = Path(tempfile.mkdtemp(prefix="doccheck-"))
    for entry in root.iterdir():
        if entry.name.startswith(".") or entry.name in ("build", "site") \
                or entry.name.endswith(".egg-info"):
            continue
        (work / entry.name).symlink_to(entry.resolve())
    return work


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> list[Failure]:
    failures: list[Failure] = []
    deadline = time.monotonic() + block.timeout
    run_env = dict(env, **block.env)
    for index, cmd in enumerate(block.commands):
        left = deadline - time.monotonic()
        if left <= 0:
            failures.append(Failure(block, cmd.text, f"block timeout of {block.timeout:g} s "
                                                     f"reached before this command"))
            break
        stdin = block.body if block.lang == "python" else None
        strict = "set -eo pipefail\n" if block.lang in ("sh", "bash") else "set -o pipefail\n"
        proc = subprocess.Popen(["bash", "-c", strict + cmd.text], cwd=cwd, env=run_env,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)     # its own group: a timeout kills all
        try:
            out, _ = proc.communicate(stdin, timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            failures.append(Failure(block, cmd.text, f"timed out after {block.timeout:g} s "
                                                     f"(raise it with <!-- doccheck: timeout=N "
                                                     f"-->); output so far:\n{out[-3000:]}"))
            break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out_lines = out.splitlines()
        if proc.returncode != block.status:
            failures.append(Failure(block, cmd.text, f"exit status {proc.returncode}, expected "
                                                     f"{block.status}; output:\n"
                                                     + "\n".join(out_lines[-60:])))
            break
        if (block.compare and cmd.expected is not None and any(e.strip() for e in cmd.expected)
                and not output_matches(cmd.expected, out_lines)):
            failures.append(Failure(block, cmd.text, "output differs from the docs:\n"
                                    + _diff(cmd.expected, out_lines), out_lines, index))
    return failures


def _check_file(path, parsed, root: Path, cwd: Path | None, env: dict[str, str],
                select: str | None):
    """Run one file's blocks (``parsed``: its :func:`read_blocks`); returns (ran, skipped,
    failures, log lines)."""
    lines: list[str] = []
    blocks, file_skip = parsed
    runnable = [b for b in blocks if b.lang in RUN_LANGS and b.commands]
    if select:
        runnable = [b for b in runnable if select in b.body or select in b.where]
    if file_skip:
        return 0, len(runnable), [], [f"{path}: skipped ({file_skip})"]
    work = cwd if cwd is not None else make_workdir(root)
    ran = skipped = 0
    failures: list[Failure] = []
    for block in runnable:
        if block.skip:
            skipped += 1
            lines.append(f"{block.where}: skip ({block.skip})")
            continue
        t0 = time.monotonic()
        found = run_block(block, work, env)
        ran += 1
        state = "FAIL" if found else "ok"
        first = block.commands[0].text.splitlines()[0]
        lines.append(f"{block.where}: {state} {time.monotonic() - t0:5.1f} s  {block.lang}: "
                     f"{shlex.quote(first) if ' ' not in first else first}")
        failures.extend(found)
    if cwd is None:
        shutil.rmtree(work, ignore_errors=True)
    return ran, skipped, failures, lines


def _key(line: str) -> str:
    """A line's label: its text up to the first double space (a table row's name)."""
    return line.split("  ")[0].strip()


def _merge_elided(expected: list[str], actual: list[str]) -> list[str] | None:
    """The actual output written in the shape of ``expected``, which elides lines with ``...``:
    each expected line becomes the actual line with the same label (the text before its first
    double space), in order; a ``...`` line stays and stands for the actual lines it skips;
    actual lines between two kept lines that the docs did not elide are kept. None when the
    result would not match the actual output."""
    out: list[str] = []
    j = 0
    elided = False
    for e in expected:
        if e.strip() == "...":
            out.append("...")
            elided = True
            continue
        want = _key(e)
        k = next((k for k in range(j, len(actual)) if _key(actual[k]) == want), None)
        if k is None:
            continue                              # the line is gone from the output
        if not elided:
            out.extend(actual[j:k])               # new lines where nothing was elided
        out.append(actual[k] if "..." not in e or not _line_matches(e, actual[k]) else e)
        j, elided = k + 1, False
    if not elided:
        out.extend(actual[j:])
    return out if output_matches(out, actual) else None


def update_files(failures: list[Failure], log=print) -> int:
    """Write each failing console command's actual output into its file (module docstring);
    returns how many commands were updated."""
    by_path: dict[Path, list[Failure]] = {}
    for f in failures:
        if f.actual is not None and f.block.lang == "console" and f.index >= 0:
            by_path.setdefault(f.block.path, []).append(f)
    done = 0
    for path, found in by_path.items():
        lines = path.read_text(encoding="utf-8").split("\n")
        # bottom up, so earlier line numbers stay valid
        for f in sorted(found, key=lambda f: (f.block.line, f.index), reverse=True):
            cmd = f.block.commands[f.index]
            actual = list(f.actual)
            while actual and not actual[-1].strip():
                actual.pop()
            if any("..." in e for e in cmd.expected):
                actual = _merge_elided(cmd.expected, actual)
                if actual is None:
                    log(f"{f.block.where}: $ {cmd.text.splitlines()[0]}: uses '...' in a way "
                        f"the update cannot follow: edit by hand")
                    continue
            fence = lines[f.block.line - 1]
            indent = fence[:len(fence) - len(fence.lstrip())]
            start = f.block.line + cmd.first          # 0-based file index of the first line
            blank = len(cmd.expected) - len("\n".join(cmd.expected).rstrip().split("\n"))
            new = [(indent + a).rstrip() for a in actual] + [""] * max(0, blank)
            lines[start:start + len(cmd.expected)] = new
            done += 1
        path.write_text("\n".join(lines), encoding="utf-8")
    return done


def check_files(paths, root: Path, cwd: Path | None = None, env: dict[str, str] | None = None,
                select: str | None = None, log=print, jobs: int = 1
                ) -> tuple[int, int, list[Failure]]:
    """Run every runnable block of ``paths``; returns (blocks run, blocks skipped, failures).

    ``jobs`` > 1 runs that many files at once (the blocks of one file always run in order); each
    file's log lines are printed together when it finishes. Every file gets its own temporary
    working directory unless ``cwd`` is given."""
    env = dict(os.environ if env is None else env)
    env.setdefault("COLUMNS", "100")
    env["MPLBACKEND"] = "Agg"
    parsed = [read_blocks(path) for path in paths]   # a malformed file fails before any runs
    ran = skipped = 0
    failures: list[Failure] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_check_file, p, b, root, cwd, env, select)
                   for p, b in zip(paths, parsed)]
        for future in futures:
            r, s, f, lines = future.result()
            for line in lines:
                log(line)
            ran, skipped = ran + r, skipped + s
            failures.extend(f)
    return ran, skipped, failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="Markdown files")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]),
                    help="repository root whose top-level entries the working directory links "
                         "(default: this checkout)")
    ap.add_argument("--cwd", help="run in this directory instead of a fresh temporary one")
    ap.add_argument("-k", dest="select", help="only blocks whose text or FILE:LINE contains this")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="files run at once (default 1)")
    ap.add_argument("--update", action="store_true",
                    help="write the actual output of failing console commands into the files "
                         "(not those whose expected output uses '...')")
    args = ap.parse_args(argv)
    try:
        ran, skipped, failures = check_files(
            [Path(f) for f in args.files], Path(args.root),
            cwd=Path(args.cwd) if args.cwd else None, select=args.select, jobs=args.jobs)
    except (DocCheckError, OSError) as e:
        print(f"doccheck: error: {e}", file=sys.stderr)
        return 2
    for f in failures:
        print(f"\nFAILED {f}", file=sys.stderr)
    print(f"doccheck: {ran} blocks run, {skipped} skipped, {len(failures)} failed")
    if args.update and failures:
        print(f"doccheck: updated {update_files(failures)} command outputs; review the diff")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
