"""scripts/doccheck.py: how Markdown examples are read, run and compared."""

from pathlib import Path

import pytest


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "page.md"
    p.write_text(text)
    return p


def test_ellipsis_lines_match_any_run_of_lines(doccheck):
    m = doccheck.output_matches
    assert m(["a", "...", "d"], ["a", "b", "c", "d"])
    assert m(["a", "...", "d"], ["a", "d"])              # zero lines
    assert not m(["a", "...", "d"], ["a", "b", "c"])      # the line after ... must come
    assert m(["...", "total 5"], ["x", "y", "total 5"])
    assert not m(["a", "b"], ["a", "b", "c"])            # no silent extra output
    assert m(["a  ", "", ""], ["a", ""])                  # trailing spaces and blank lines


def test_inline_ellipsis_matches_text_within_a_line(doccheck):
    m = doccheck.output_matches
    assert m(["done in ... s"], ["done in 0.85 s"])
    assert not m(["done in ... s"], ["done in 0.85 ms"])
    assert not m(["cycles 1,234"], ["cycles 1,235"])      # numbers are exact
    assert m(["a.b(c)*"], ["a.b(c)*"])                    # regex characters are literal
    assert not m(["a.b"], ["axb"])


def test_blocks_commands_and_directives(doccheck, tmp_path):
    page = write(tmp_path, """
text
```console
$ echo one \\
  two
one two
$ true
```
<!-- doccheck: status=3; timeout=5 -->
```sh
exit 3
```
<!-- doccheck: skip: needs a GPU; really -->
```python
import cuda
```
```toml
a = 1
```
""")
    blocks, file_skip = doccheck.read_blocks(page)
    assert file_skip is None
    assert [b.lang for b in blocks] == ["console", "sh", "python", "toml"]
    con = blocks[0]
    assert [c.text for c in con.commands] == ["echo one \\\n  two", "true"]
    assert con.commands[0].expected == ["one two"] and con.commands[1].expected == []
    assert blocks[1].status == 3 and blocks[1].timeout == 5
    assert blocks[2].skip == "needs a GPU; really"


@pytest.mark.parametrize("directive, message", [
    ("skip", "needs a reason"), ("timeout=soon", "number of seconds"),
    ("colour=red", "unknown doccheck directive"), ("env=NOVALUE", "NAME=VALUE")])
def test_bad_directives_name_the_file_line_and_allowed(doccheck, tmp_path, directive, message):
    page = write(tmp_path, f"<!-- doccheck: {directive} -->\n```sh\ntrue\n```\n")
    with pytest.raises(doccheck.DocCheckError, match=message) as e:
        doccheck.read_blocks(page)
    assert f"{page}:1" in str(e.value)


def test_run_reports_wrong_output_wrong_status_and_shares_the_directory(doccheck, tmp_path):
    page = write(tmp_path, """
```sh
printf 'x = 1\\n' > made.txt
```
```console
$ cat made.txt
x = 1
$ echo 2
3
```
```python
import sys; sys.exit(4)
```
<!-- doccheck: status=4 -->
```python
import sys; sys.exit(4)
```
""")
    work = tmp_path / "work"
    work.mkdir()
    ran, skipped, failures = doccheck.check_files([page], tmp_path, cwd=work, log=lambda s: None)
    assert (ran, skipped) == (4, 0)
    assert [f.block.line for f in failures] == [5, 11]      # echo 2 (output), python (status)
    assert "output differs" in failures[0].message and "+2" in failures[0].message
    assert "exit status 4, expected 0" in failures[1].message
    assert (work / "made.txt").read_text() == "x = 1\n"


def test_timeout_stops_a_block(doccheck, tmp_path):
    page = write(tmp_path, "<!-- doccheck: timeout=0.5 -->\n```sh\nsleep 5\n```\n")
    ran, _, failures = doccheck.check_files([page], tmp_path, cwd=tmp_path, log=lambda s: None)
    assert ran == 1 and "timed out" in failures[0].message


def test_file_skip(doccheck, tmp_path):
    page = write(tmp_path, "<!-- doccheck-file: skip: a draft -->\n```sh\nexit 1\n```\n")
    ran, skipped, failures = doccheck.check_files([page], tmp_path, cwd=tmp_path,
                                                  log=lambda s: None)
    assert (ran, skipped, failures) == (0, 1, [])
