"""Every view of one run shows the same number for the same quantity (issue 21, items 3-5).

One native run of MobileNetV2 (224 x 224: its depthwise layers over-fetch on the DRAM bus)
through ``npulab run -o DIR``; then its terminal table (``report.txt`` = stdout), ``layers.csv``,
the JSON (``summary.json``), ``report.html`` and the notebook DataFrames are parsed, and every
shared quantity is compared after each view's rounding. Gold values for the bandwidths are the
definition, bytes / time, worked from the run's own record (bytes on the bus from
``actions.dram_bits``, bytes read and written, the busy span, the clock).
"""

from __future__ import annotations

import csv
import json
import re
from html.parser import HTMLParser

import pytest

from npulab.cli import main
from npulab.metrics import LAYER_QUANTITIES, network_items
from npulab.output import OUTPUT_FILES, SUMMARY_FILES, result_from_dict

ARGV = ["--model", "mobilenetv2"]
#: The per-layer quantities the terminal table shows (by key), and their rounding.
TERMINAL = ("busy_span_cycles", "compute_util_pct", "dram_bus_gbps", "dram_useful_gbps",
            "macs_per_dram_byte", "bound")
QUANTITY = {q.key: q for q in LAYER_QUANTITIES}


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    out = tmp_path_factory.mktemp("views")
    assert main(["run", *ARGV, "-q", "-o", str(out)]) == 0
    return out


def _terminal(text: str) -> tuple[dict, dict]:
    """The per-layer grid as {layer: {header: cell}} and the totals as {label: text}."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])]
    header = lines[rule - 1]

    def cells(line):
        # every cell is padded to its column's width (the rule's dashes)
        return [line[a:b].strip() for a, b in spans]

    heads = cells(header)
    rows = {}
    i = rule + 1
    while lines[i].strip():
        row = dict(zip(heads, cells(lines[i])))
        rows[row["layer"]] = row
        i += 1
    totals = {}
    for line in lines[i:]:
        if line[:22].strip():
            totals[line[:22].strip()] = line[22:]
    return rows, totals


class _Page(HTMLParser):
    """The layers table ({layer: {header: cell text}}) and headline card ({label: text})."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.card, self.rows, self.heads = {}, [], []
        self._table = self._cls = None
        self._text, self._row = [], None
        self.scroll_parent = None
        self._stack = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._stack.append((tag, a))
        if tag == "table" and "sortable" in (a.get("class") or ""):
            self._table = True
            self.scroll_parent = self._stack[-2][1] if len(self._stack) > 1 else None
        if tag == "div" and a.get("class") in ("k", "v"):
            self._cls, self._text = a["class"], []
        if self._table and tag == "tr":
            self._row = []
        if self._table and tag in ("td", "th"):
            self._text = []

    def handle_endtag(self, tag):
        self._stack.pop()
        if tag == "div" and self._cls:
            text = "".join(self._text).strip()
            if self._cls == "k":
                self._key = text
            else:
                self.card[self._key] = text
            self._cls = None
        if self._table and tag in ("td", "th"):
            self._row.append("".join(self._text).strip())
        if self._table and tag == "tr":
            if self.heads:
                self.rows.append(self._row)
            else:
                self.heads = self._row
        if tag == "table":
            self._table = False

    def handle_data(self, data):
        self._text.append(data)


def _html(text: str):
    page = _Page()
    page.feed(text)
    rows = {r[1]: dict(zip(page.heads, r)) for r in page.rows}
    return page, rows


def test_every_view_shows_the_same_numbers(views, capsys):
    summary = json.loads((views / "summary.json").read_text())
    metrics = {m["name"]: m for m in summary["metrics"]["layers"]}
    table, totals = _terminal((views / "report.txt").read_text())
    csv_rows = {r["name"]: r for r in csv.DictReader((views / "layers.csv").read_text().splitlines())}
    page, html_rows = _html((views / "report.html").read_text())
    # 53 on the array, 11 vector ops of which 11 fused into a conv's layer (no row of their own)
    assert len(metrics) == 64 - summary["run"]["totals"]["layers_fused"] == 53
    for name, m in metrics.items():
        for key in TERMINAL:
            q = QUANTITY[key]
            want = q.text(m)
            assert table[name][q.label] == want, (name, q.label)
            assert html_rows[name][q.label] == want, (name, q.label)
            cell = csv_rows[name][q.key]
            assert (cell if q.fmt == "s" else format(type(q.value(m))(float(cell)), q.fmt)) == want
        for q in LAYER_QUANTITIES:           # the HTML shows every quantity, CSV holds it
            assert html_rows[name][q.label] == q.text(m), (name, q.label)
            assert q.key in csv_rows[name]
    # The network lines: the terminal's and the HTML headline's are one text.
    for label, text in network_items(summary["metrics"]):
        assert totals[label] == text and page.card[label] == text, label
    assert page.card["compute utilization"] == totals["utilization"].split(" of ")[0]
    # No view keeps a second, different name for a quantity it shows.
    header = next(csv.reader((views / "layers.csv").read_text().splitlines()))
    for stale in ("utilization_pct", "dram_bandwidth_gbps", "arithmetic_intensity",
                  "ops_per_dram_byte", "compute_utilization"):
        assert stale not in header
    assert "ops per DRAM byte" not in (views / "report.html").read_text()
    assert "MACs per DRAM byte" in page.card["arithmetic intensity"]


def test_notebook_views_agree(views):
    pytest.importorskip("pandas")
    summary = json.loads((views / "summary.json").read_text())
    from npulab.simulate import RunResult
    result = RunResult.from_dict(summary["run"])        # the notebook face of a saved run
    assert result.to_dict() == result_from_dict(summary["run"]).to_dict()
    from npulab.output import metrics_from_dict
    metrics = metrics_from_dict(summary["metrics"])
    frame = result.to_pandas(metrics).set_index("name")
    per_layer = metrics.to_pandas().set_index("name")
    for m in summary["metrics"]["layers"]:
        for key in TERMINAL:
            q = QUANTITY[key]
            for value in (frame.loc[m["name"], q.key], per_layer.loc[m["name"], q.key]):
                assert format(value, q.fmt) == q.text(m)
    text = repr(result)
    for label, line in network_items(metrics)[1:3]:
        assert f"{label} {line}" in text


def test_bus_and_useful_bandwidth_by_hand(views):
    """Item 4: bytes / time, per layer (over its busy span) and for the network (over the
    run); a layer that mostly waits on DRAM shows a busy bus even when few bytes are useful."""
    summary = json.loads((views / "summary.json").read_text())
    run, m = summary["run"], summary["metrics"]
    clock = run["config"]["chip"]["clock_mhz"] * 1e6
    layers = [x for x in run["layers"] if x["cycles"] is not None]
    by_name = {x["name"]: x for x in m["layers"]}
    waiting = 0
    for x in layers:
        span = max(x["cycles"], x["actions"]["active_cycles"]) / clock
        bus = x["actions"]["dram_bits"] / 8
        useful = x["dram_read_bytes"] + x["dram_write_bytes"]
        dram = by_name[x["name"]]["memory"]["dram"]
        assert dram["bytes"] == bus and dram["useful_bytes"] == useful
        assert dram["bytes_per_s"] == pytest.approx(bus / span, rel=1e-12)
        assert dram["useful_bytes_per_s"] == pytest.approx(useful / span, rel=1e-12)
        assert useful <= bus
        if x["macs"]:
            # arithmetic intensity: MACs per byte on the DRAM bus
            assert by_name[x["name"]]["macs_per_dram_byte"] == pytest.approx(x["macs"] / bus)
        if x["stall_dram_cycles"] > 0.5 * x["cycles"]:
            waiting += 1
            # DRAM-stalled most of its time: the bus is busy (> 25 % of peak) whatever the
            # useful rate says
            assert dram["utilization"] > 0.25, x["name"]
    assert waiting >= 5
    net = m["network"]["memory"]["dram"]
    seconds = run["totals"]["cycles"] / clock
    bus = run["totals"]["dram_bus_bytes"]
    useful = run["totals"]["dram_read_bytes"] + run["totals"]["dram_write_bytes"]
    assert net["bytes"] == bus and net["useful_bytes"] == useful and bus > 3 * useful
    assert net["bytes_per_s"] == pytest.approx(bus / seconds, rel=1e-12)
    assert net["useful_bytes_per_s"] == pytest.approx(useful / seconds, rel=1e-12)
    text = (views / "report.txt").read_text()
    assert (f"DRAM bandwidth        {bus / seconds / 1e9:.2f} GB/s on the bus" in text
            and f"{useful / seconds / 1e9:.2f} GB/s useful" in text)


def test_recost_rewrites_every_file(views, tmp_path, capsys):
    """Item 5: ``report DIR --tech 7nm`` leaves DIR as ``run --tech 7nm -o`` writes it."""
    import shutil
    recosted = tmp_path / "recosted"
    shutil.copytree(views, recosted)
    assert main(["report", str(recosted), "--tech", "7nm"]) == 0
    fresh = tmp_path / "fresh"
    assert main(["run", *ARGV, "-q", "--tech", "7nm", "-o", str(fresh)]) == 0
    capsys.readouterr()
    for name in OUTPUT_FILES:
        assert (recosted / name).read_bytes() == (fresh / name).read_bytes(), name
    assert "16nm" in (views / "report.txt").read_text()
    assert "7nm table" in (recosted / "report.txt").read_text()
    # and a plain `report DIR` changes nothing
    before = {n: (recosted / n).read_bytes() for n in SUMMARY_FILES}
    assert main(["report", str(recosted)]) == 0
    assert before == {n: (recosted / n).read_bytes() for n in SUMMARY_FILES}
