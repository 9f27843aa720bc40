"""The generated reference pages (docs/reference/) match the code and document every field."""

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["gen_config_reference", "gen_cli_reference"])
def test_committed_page_is_what_the_code_generates(script, name):
    gen = script(name)
    assert gen.OUT.read_text(encoding="utf-8") == gen.render(), \
        f"{gen.OUT} is out of date: run python scripts/{name}.py"


def _table(text: str, heading: str) -> dict[str, list[str]]:
    """key -> cells of the first table after ``heading``."""
    part = text.split(heading, 1)[1]
    rows = {}
    for line in part.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells
        elif rows and not line.startswith("|"):
            break
    return rows


def _toml_value(cell: str):
    cell = cell.strip("`")
    return tomllib.loads(f"v = {cell}")["v"]


def test_chip_defaults_equal_the_shipped_default_toml():
    """The page's defaults come from the dataclasses; sim_configs/default.toml is written by hand.
    Every key of the file must appear in the page with the same value, and vice versa."""
    text = (ROOT / "docs" / "reference" / "config.md").read_text()
    shipped = tomllib.loads((ROOT / "sim_configs" / "default.toml").read_text())
    for section, heading in [("chip", "### `[chip]`"), ("array", "### `[array]`"),
                             ("host_link", "### `[host_link]`"), ("dma", "### `[dma]`")]:
        rows = _table(text, heading)
        assert set(shipped[section]) <= set(rows), section
        for key, value in shipped[section].items():
            assert _toml_value(rows[key][3]) == value, (section, key)
    srams = _table(text, "### `[sram]`")
    for name in ("ifmap", "filter", "ofmap"):
        table = {**shipped["sram"], **shipped["sram"].get(name, {})}
        for key, value in table.items():
            if isinstance(value, dict) or key == "capacity_kib":
                continue
            assert _toml_value(srams[key][3]) == value, (name, key)
    dram = _table(text, "### `[dram]`")
    assert _toml_value(dram["preset"][3]) == shipped["dram"]["preset"]


def test_every_field_has_a_unit_and_a_meaning():
    text = (ROOT / "docs" / "reference" / "config.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")
            and line.count("|") >= 6 and "| key |" not in line]
    field_rows = [r for r in rows if len(re.split(r"(?<!\\)\|", r)) == 7]
    assert len(field_rows) >= 90
    for row in field_rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert cells[2] and cells[4], row


def test_an_undocumented_field_is_an_error(script):
    gen = script("gen_config_reference")

    @dataclass
    class Widget:
        """A widget.

        Attributes
        ----------
        size_bytes: how big.
        """

        size_bytes: int = 1
        speed: float = 2.0

    with pytest.raises(gen.ReferenceError, match=r"Widget\.speed: no entry"):
        gen.field_rows(Widget)
    Widget.__doc__ = Widget.__doc__.rstrip() + "\n        speed: how fast.\n        "
    with pytest.raises(gen.ReferenceError, match=r"Widget\.speed: no unit"):
        gen.field_rows(Widget)


def test_cli_reference_lists_every_command_and_option(script):
    import argparse
    from npulab.cli import build_parser
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    gen = script("gen_cli_reference")
    n = 0
    for path, parser in gen._commands(build_parser(), "npulab"):
        assert f"\n## {path}\n" in text, path
        section = text.split(f"\n## {path}\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings \
                    or action.help == argparse.SUPPRESS:   # hidden: only explains an error
                continue
            assert f"`{action.option_strings[0]}`" in section, (path, action.option_strings)
            n += 1
    assert n > 100
