"""The HTML report, its plots, ``npulab report DIR`` and the headless-Chromium check.

Gold values come from the saved run (``summary["run"]``: cycles, MACs, DRAM bits, compute
cycles the simulator counted), never from the code under test, and from hand-worked figures:

* the default chip is a 32 x 32 array at 1 GHz: 1024 MACs/cycle, peak 2 x 1024 x 1e9 =
  2.048 TOPS; its DRAM is DDR4-3200 on a 64-bit bus, 16 bytes per 0.63 ns clock = 25.397 GB/s,
  so the roofline ridge sits at 1.024e12 MACs/s / 25.397e9 = 40.32 MACs per DRAM byte;
* nv_full is 64 x 32 atomic C x K = 2048 MACs/cycle at 1 GHz (4.096 TOPS) on a 20 GB/s memory:
  ridge 102.4 MACs/byte.
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from compiler.frontends import zoo  # noqa: E402
from compiler.ir import Gemm, Graph  # noqa: E402
from hw.configfile import load_chip_config  # noqa: E402
from hw.energy import EnergyError  # noqa: E402
from hw.nvdla.config import load_nvdla_config  # noqa: E402
from hw.systolic.config import ConfigError  # noqa: E402
from npulab import html_report, output, plots  # noqa: E402
from npulab.cli import report as report_cmd  # noqa: E402
from npulab.cli.common import UserError, resolve_config  # noqa: E402
from npulab.metrics import COMPONENT_ORDER, compute_metrics, format_si  # noqa: E402
from npulab.nvdla_run import simulate_nvdla  # noqa: E402
from npulab.simulate import simulate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHECKER = REPO / "scripts" / "check_report_chromium.py"
CHROMIUM = "/usr/bin/chromium"


def _active(layer: dict) -> int:
    """A layer's busy span in cycles: its window, or longer when its own transfers or compute
    overlapped the previous layer's window (``actions["active_cycles"]``, native runs
    prefetch); rates (ops/s, power, utilization) are over this span (npulab.metrics)."""
    return max(layer["cycles"], (layer.get("actions") or {}).get("active_cycles") or 0)


def _summary(run, tech="16nm") -> dict:
    # What npulab run -o DIR writes, through JSON as a reader of summary.json sees it.
    data = {"schema": "npulab.summary/1", "run": run.to_dict(),
            "metrics": compute_metrics(run, tech).to_dict()}
    return json.loads(json.dumps(data))


@pytest.fixture(scope="module")
def summaries() -> dict:
    chip = load_chip_config(None)
    nv_full = load_nvdla_config(resolve_config("nv_full"))
    # 200 chained fully connected layers: more than the widest figure has room to label.
    deep = Graph("mlp200", tuple(Gemm(name=f"fc{i:03d}", m=16, n=64, k=64,
                                      inputs=(f"fc{i - 1:03d}",) if i else ())
                                 for i in range(200)))
    return {
        "native": _summary(simulate(zoo.get("resnet18"), chip)),
        "compute": _summary(simulate(zoo.get("resnet18"), chip, timing="compute")),
        "nvdla": _summary(simulate_nvdla(zoo.get("resnet50"), nv_full)),
        # GoogLeNet on NVDLA has standalone PDP layers (pools): costed, but no MACs.
        "nvdla_pools": _summary(simulate_nvdla(zoo.get("googlenet"), nv_full)),
        "deep": _summary(simulate(deep, chip, timing="compute")),
        "small": _summary(simulate(zoo.get("alexnet"), chip, timing="compute")),
    }


@pytest.fixture(scope="module")
def pages(summaries) -> dict:
    return {k: html_report.render_html(summaries[k]) for k in ("native", "compute", "nvdla")}


# ---- a strict HTML checker -----------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class StrictParser(HTMLParser):
    """Every non-void element closed in order; ``<x/>`` only inside ``<svg>`` (HTML has no
    self-closing elements); ids unique; records attributes of interest."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: dict[str, int] = {}
        self.urls: list[str] = []
        self.card: list[tuple[str, str]] = []
        self._card_class = None
        self._text: list[str] = []
        self.tds: list[str] = []
        self._in_td = False

    def _attrs(self, tag, attrs) -> None:
        for name, value in attrs:
            if name == "id":
                self.ids[value] = self.ids.get(value, 0) + 1
            if name in ("src", "href", "xlink:href", "action", "data"):
                self.urls.append(value or "")
        cls = dict(attrs).get("class")
        if tag == "div" and cls in ("k", "v"):
            self._card_class = cls
            self._text = []
        if tag == "td":
            self._in_td, self._text = True, []

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID and "svg" not in self.stack:
            self.errors.append(f"<{tag}/> outside svg")

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"</{tag}> closes a void element")
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> but open is {self.stack[-1:]} at {self.getpos()}")
            return
        self.stack.pop()
        if tag == "div" and self._card_class:
            text = "".join(self._text).strip()
            if self._card_class == "k":
                self.card.append((text, ""))
            elif self.card:
                self.card[-1] = (self.card[-1][0], text)
            self._card_class = None
        if tag == "td" and self._in_td:
            self.tds.append("".join(self._text))
            self._in_td = False

    def handle_data(self, data):
        self._text.append(data)


def parse(page: str) -> StrictParser:
    p = StrictParser()
    p.feed(page)
    p.close()
    return p


# ---- the page ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["native", "compute", "nvdla"])
def test_page_is_well_formed_and_self_contained(pages, kind):
    page = pages[kind]
    p = parse(page)
    assert p.errors == []
    assert p.stack == []
    assert [k for k, n in p.ids.items() if n > 1] == []          # four SVGs, one id space
    assert page.startswith("<!DOCTYPE html>")
    for bad in ('src="http', "href=\"http", '<link rel="stylesheet"', "<script src", "@import",
                "url(http", "<iframe", "<img"):
        assert bad not in page
    # Every URL on the page is an in-page anchor or inline data.
    assert p.urls and all(u.startswith(("#", "data:")) for u in p.urls)
    assert page.count("<svg") == 4


@pytest.mark.parametrize("kind", ["native", "compute", "nvdla"])
def test_every_layer_is_in_the_table(pages, summaries, kind):
    p = parse(pages[kind])
    names = [x["name"] for x in summaries[kind]["run"]["layers"]]
    assert len(names) in (31, 54)                               # resnet18 ops, resnet50 hw layers
    for name in names:
        assert name in p.tds
    # resnet18's 10 vector ops (8 adds, 2 pools) run on the vector engine: no op lacks one;
    # natively the stem's max-pool, the adds and the final global pool are fused into the
    # convs before them (greyed rows "in its fused group").
    layers = summaries[kind]["run"]["layers"]
    fused = sum(1 for x in layers if x["engine"] == "fused")
    assert sum(1 for x in layers if x["cycles"] is None) == fused == (10 if kind == "native" else 0)
    assert pages[kind].count('<tr class="idle">') == fused
    assert pages[kind].count("in its fused group") == fused
    vector = sum(1 for x in layers if x["engine"] == "vector")
    assert vector == {"nvdla": 0, "native": 0, "compute": 10}[kind]


@pytest.mark.parametrize("kind", ["native", "compute", "nvdla"])
def test_headline_equals_the_run(pages, summaries, kind):
    s = summaries[kind]
    run, net = s["run"], s["metrics"]["network"]
    card = dict(parse(pages[kind]).card)
    clock = 1e9                                                 # both chips run at 1000 MHz
    cycles = run["totals"]["cycles"]
    seconds = cycles / clock
    macs = sum(x["macs"] for x in run["layers"] if x["cycles"] is not None)
    peak = {"native": 2.048e12, "compute": 2.048e12, "nvdla": 4.096e12}[kind]
    assert card["latency"] == f"{format_si(seconds, 's')} ({cycles:,} cycles at 1 GHz)"
    assert card["inferences/s"] == f"{1 / seconds:,.1f}"
    assert card["throughput"] == (f"{2 * macs / seconds / 1e12:.3f} TOPS effective of "
                                  f"{peak / 1e12:.3f} TOPS peak")
    assert card["compute utilization"] == f"{100 * macs / (peak / 2 / clock * cycles):.1f} %"
    assert card["energy per inference"] == format_si(net["energy_j"], "J")
    assert card["average power"] == format_si(net["energy_j"] / seconds, "W")
    assert card["on-chip power"] == format_si(net["on_chip_energy_j"] / seconds, "W")
    costed = [x for x in run["layers"] if x["cycles"] is not None]
    busiest = max([m["energy_j"] / (_active(x) / clock) for x, m in zip(costed, s["metrics"]["layers"])]
                  + [net["energy_j"] / seconds])
    assert card["peak power (busiest layer)"] == format_si(busiest, "W")
    assert card["efficiency"] == f"{2 * macs / seconds / 1e12 / (net['energy_j'] / seconds):.3g} TOPS/W"
    assert card["technology"] == "16nm (16 nm)"
    dram_bits = sum(x["actions"]["dram_bits"] for x in run["layers"] if x["actions"])
    useful = sum((x["dram_read_bytes"] or 0) + (x["dram_write_bytes"] or 0)
                 for x in run["layers"] if x["actions"])
    if kind == "compute":
        assert dram_bits == 0
        assert card["DRAM bandwidth"].startswith("0.00 GB/s on the bus")
        assert card["arithmetic intensity"] == "- (no DRAM bytes)"
    else:
        bw = {"native": 16 / 0.63e-9, "nvdla": 20e9}[kind]
        bus = dram_bits / 8 / seconds
        preset = {"native": ", ddr4-3200", "nvdla": ""}[kind]
        assert card["DRAM bandwidth"] == (
            f"{bus / 1e9:.2f} GB/s on the bus ({100 * bus / bw:.1f} % of {bw / 1e9:.1f} GB/s "
            f"peak{preset}), {useful / seconds / 1e9:.2f} GB/s useful")
        assert card["arithmetic intensity"] == f"{macs / (dram_bits / 8):.1f} MACs per DRAM byte"


def test_energy_table_cites_every_entry(pages, summaries):
    for kind in ("native", "nvdla"):
        page, tech = pages[kind], summaries[kind]["metrics"]["technology"]
        assert len(tech["entries"]) >= 20
        for entry in tech["entries"]:
            assert html.escape(entry["source"]) in page
            assert f"<td class=\"t\">{html.escape(entry['key'])}</td>" in page
        # The source keys the entries name are spelled out (horowitz2014 is ISSCC 2014).
        assert "Computing&#x27;s energy problem" in page
        assert html.escape(tech["file"]) in page


def test_notes_scope_and_config(pages, summaries):
    assert "compute-only: operands assumed resident in SRAM" in pages["compute"]
    assert "ops have no engine" not in pages["native"]
    assert "vector ops on the vector engine" in pages["native"]
    assert "20 GB/s at full efficiency (bandwidth model)" in pages["nvdla"]
    assert "DRAM preset names no DRAM type" in pages["nvdla"]   # NVDLA's bandwidth model
    assert "[sram.ifmap]" in pages["native"] and "rows = 32" in pages["native"]
    assert "[nvdla]" in pages["nvdla"]


def test_text_is_escaped_and_output_deterministic(summaries):
    s = copy.deepcopy(summaries["small"])
    s["run"]["model"] = "<script>alert(1)</script>"
    s["run"]["layers"][0]["name"] = s["metrics"]["layers"][0]["name"] = 'a"<b>&'
    page = html_report.render_html(s)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a&quot;&lt;b&gt;&amp;" in page and 'a"<b>' not in page
    assert parse(page).errors == []
    assert html_report.render_html(s) == page


def test_render_rejects_what_is_not_a_summary(summaries):
    with pytest.raises(ConfigError, match="schema = 'other/2'"):
        html_report.render_html({**summaries["compute"], "schema": "other/2"})
    with pytest.raises(ConfigError, match="no 'metrics' table"):
        html_report.render_html({"schema": "npulab.summary/1", "run": summaries["compute"]["run"]})
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        html_report.render_html([])


# ---- plots ------------------------------------------------------------------------------------

def _by_gid(fig, prefix):
    return {a.get_gid(): a for a in fig.findobj() if (a.get_gid() or "").startswith(prefix)}


def test_roofline_points_and_ceilings_native(summaries):
    s = summaries["native"]
    fig = plots.roofline(s)
    pts = _by_gid(fig, "roofline-dram-")
    costed = [x for x in s["run"]["layers"] if x["cycles"] is not None]
    assert len(costed) == 31 - s["run"]["totals"]["layers_fused"] == 21
    with_dram = [i for i, x in enumerate(costed) if x["actions"]["dram_bits"] and x["macs"]]
    assert sorted(int(g.rsplit("-", 1)[1]) for g in pts) == with_dram
    for i in with_dram:
        x = costed[i]
        macs = x["macs"]
        gold = (macs / (x["actions"]["dram_bits"] / 8), macs / (_active(x) / 1e9) / 1e12)
        assert tuple(pts[f"roofline-dram-{i}"].get_offsets()[0]) == pytest.approx(gold)
        bound = s["metrics"]["layers"][i]["bound"]
        assert tuple(pts[f"roofline-dram-{i}"].get_facecolor()[0][:3]) == pytest.approx(
            _rgb(plots.BOUND_COLORS[bound]))
    # Ceilings: 1.024 TMAC/s flat; the DRAM slope is 25.397 GB/s and meets it at 40.32 MAC/B.
    compute = _by_gid(fig, "roofline-ceiling-compute")["roofline-ceiling-compute"]
    assert list(compute.get_ydata()) == pytest.approx([1.024, 1.024])
    dram = _by_gid(fig, "roofline-ceiling-dram")["roofline-ceiling-dram"]
    xs, ys = dram.get_xdata(), dram.get_ydata()
    assert ys[1] / xs[1] == pytest.approx(25.397e9 * 1e-12, rel=1e-4)
    assert xs[1] == pytest.approx(40.32, rel=1e-3) and ys[1] == pytest.approx(1.024)
    # The host link carried the input image and the logits: those layers appear under it too.
    links = _by_gid(fig, "roofline-link-")
    assert sorted(int(g.rsplit("-", 1)[1]) for g in links) == [
        i for i, x in enumerate(costed) if x["actions"]["link_bits"]]
    assert len(links) >= 2
    assert "roofline-network" in fig.npulab_tooltips
    assert all(g in fig.npulab_tooltips for g in pts)


def _rgb(hex_color):
    return tuple(int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))


def _notes(fig):
    return [t.get_text() for t in fig.findobj() if getattr(t, "get_gid", lambda: None)() == "npulab-note"]


def test_roofline_says_what_it_cannot_place(summaries):
    fig = plots.roofline(summaries["compute"])
    assert _by_gid(fig, "roofline-dram-") == {}
    notes = " ".join(_notes(fig)).replace("\n", " ")
    assert "21 of 31 layers not placed: no DRAM bytes" in notes
    assert "10 layers not placed: no MACs (e.g. maxpool)" in notes   # the vector engine's
    assert "compute-only timing" in notes
    s = summaries["nvdla_pools"]
    pools = [x["name"] for x in s["metrics"]["layers"] if x["macs"] == 0]
    assert len(pools) == 12
    fig = plots.roofline(s)
    assert len(_by_gid(fig, "roofline-dram-")) == len(s["metrics"]["layers"]) - 12
    assert "12 layers not placed: no MACs" in " ".join(_notes(fig)).replace("\n", " ")
    # NVDLA: 2.048 TMAC/s and 20 GB/s meet at 102.4 MAC/B.
    dram = _by_gid(fig, "roofline-ceiling-dram")["roofline-ceiling-dram"]
    assert dram.get_xdata()[1] == pytest.approx(102.4)


def _stacks(ax, n):
    """Sum of bar heights and the parts per x slot of a stacked bar chart."""
    sums, parts = [0.0] * n, [[] for _ in range(n)]
    for patch in ax.patches:
        i = round(patch.get_x() + patch.get_width() / 2)
        sums[i] += patch.get_height()
        parts[i].append(patch.get_height())
    return sums, parts


@pytest.mark.parametrize("kind", ["native", "nvdla"])
def test_cycle_stacks_add_up_to_each_layer(summaries, kind):
    s = summaries[kind]
    costed = [x for x in s["run"]["layers"] if x["cycles"] is not None]
    fig = plots.cycle_breakdown(s)
    ax = fig.axes[0]
    sums, parts = _stacks(ax, len(costed))
    assert sums == [x["cycles"] for x in costed]
    assert [p[0] for p in parts] == [x["compute_cycles"] for x in costed]   # compute at the bottom
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    if kind == "nvdla":
        assert legend == ["compute", "stall: dram"]
    else:  # resnet18 native stalls on DRAM, the link (fc's logits) and SRAM bank conflicts
        assert legend == ["compute", "stall: dram", "stall: link", "stall: sram", "stall: vector"]
        assert sum(x["stall_link_cycles"] for x in costed) == 567


def test_energy_breakdown(summaries):
    s = summaries["native"]
    fig = plots.energy_breakdown(s)
    top, bottom = fig.axes[:2]
    labels = [t.get_text() for t in top.get_yticklabels()]
    assert labels == ["mac", "rf", "sram.ifmap", "sram.filter", "sram.ofmap", "vector", "dram",
                      "link", "static"]
    assert COMPONENT_ORDER == ("mac", "rf", "sram", "vector", "noc", "dram", "link", "static")
    net = s["metrics"]["network"]["energy_breakdown_j"]
    assert [p.get_width() for p in top.patches] == pytest.approx([net[k] * 1e6 for k in labels])
    layers = s["metrics"]["layers"]
    sums, _ = _stacks(bottom, len(layers))
    assert sums == pytest.approx([x["energy_j"] * 1e6 for x in layers], rel=1e-9)
    # the vector engine's energy (resnet18's adds and pools) has its legend entry
    assert "vector" in [t.get_text() for t in bottom.get_legend().get_texts()]
    assert net["vector"] > 0


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


@pytest.mark.parametrize("kind", ["native", "nvdla"])
def test_bar_legends_cover_no_bar_and_no_bar_is_cut(summaries, kind):
    """Issue 21 item 23: every stacked bar fits under the axes' top, and the legend's box
    overlaps no bar (it sits outside the axes)."""
    s = summaries[kind]
    for fig, ax in ((plots.energy_breakdown(s), None), (plots.cycle_breakdown(s), None)):
        ax = fig.axes[-1]
        renderer = _drawn(fig)
        n = len(s["metrics"]["layers"])
        sums, _ = _stacks(ax, n)
        assert ax.get_ylim()[1] >= max(sums)
        legend = ax.get_legend().get_window_extent(renderer)
        for patch in ax.patches:
            if patch.get_height() > 0:
                assert not legend.overlaps(patch.get_window_extent(renderer)), patch.get_gid()


@pytest.mark.parametrize("kind", ["native", "nvdla"])
def test_roofline_labels_leave_the_star_and_each_other_clear(summaries, kind):
    """Issue 21 item 23: no layer name sits on the whole network's star (or the legend, or
    another name)."""
    fig = plots.roofline(summaries[kind])
    ax = fig.axes[0]
    renderer = _drawn(fig)
    labels = [t for t in ax.texts if (t.get_gid() or "").startswith("roofline-label-")]
    assert len(labels) == 4
    star = _by_gid(fig, "roofline-network")["roofline-network"]
    cx, cy = ax.transData.transform(star.get_offsets()[0])
    half = 0.5 * (star.get_sizes()[0] ** 0.5) * fig.dpi / 72
    boxes = [t.get_window_extent(renderer) for t in labels]
    legend = ax.get_legend().get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert not (box.x0 < cx + half and box.x1 > cx - half and box.y0 < cy + half
                    and box.y1 > cy - half), labels[i].get_text()
        assert not box.overlaps(legend)
        assert not any(box.overlaps(other) for other in boxes[i + 1:])


def test_layers_table_scrolls_sideways(pages):
    """Issue 21 item 23: the wide layers table sits in its own scroll container, at most 80 %
    of the window high, so its sideways scroll bar is on screen (not below the last of
    50+ rows) and the sticky header stays in view."""
    page = pages["native"]
    assert re.search(r'<div class="table-scroll"[^>]*><table class="sortable"', page)
    css = re.search(r"\.table-scroll\{([^}]*)\}", page).group(1)
    assert "overflow-x:auto" in css and "max-width:100%" in css
    assert "overflow-y:auto" in css and "max-height:80vh" in css


def test_utilization_lines(summaries):
    for kind, levels in (("native", ["compute", "dram", "sram.ifmap", "sram.filter",
                                     "sram.ofmap", "link"]),
                         ("nvdla", ["compute", "dram", "sram.cbuf"])):   # no link limit on NVDLA
        s = summaries[kind]
        fig = plots.utilization(s)
        lines = {a.get_gid(): a for a in fig.axes[0].get_lines() if a.get_gid()}
        assert list(lines) == [f"utilization-{x}" for x in levels]
        costed = [x for x in s["run"]["layers"] if x["cycles"] is not None]
        pes = 1024 if kind == "native" else 2048
        gold = [x["macs"] / (pes * _active(x)) for x in costed]
        assert list(lines["utilization-compute"].get_ydata()) == pytest.approx(gold)
        for line in lines.values():
            assert all(0 <= v <= 1 for v in line.get_ydata())
        dram_bw = 16 / 0.63e-9 if kind == "native" else 20e9
        gold = [x["actions"]["dram_bits"] / 8 / (_active(x) / 1e9) / dram_bw for x in costed]
        assert list(lines["utilization-dram"].get_ydata()) == pytest.approx(gold)


def _tick_boxes(fig, ax):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in ax.get_xticklabels()
            if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("kind", ["nvdla", "deep"])
def test_many_layers_stay_legible(summaries, kind):
    s = summaries[kind]
    n = len(s["metrics"]["layers"])
    for fn in (plots.cycle_breakdown, plots.utilization, plots.energy_breakdown):
        fig = fn(s)
        ax = fig.axes[-1] if fn is plots.energy_breakdown else fig.axes[0]
        boxes = sorted(_tick_boxes(fig, ax), key=lambda b: b.x0)
        assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), "tick labels overlap"
        width = fig.get_size_inches()[0]
        if kind == "deep":
            assert n == 200 and width == plots.MAX_WIDTH_IN
            step = plots.label_step(n, width)
            assert step == 2 and len(boxes) == 100                # every 2nd of 200 labelled
        else:
            assert len(boxes) == n == 54                          # all labelled, figure widened
            assert width == pytest.approx(2.5 + 0.16 * 54)


def test_plots_reject_a_non_summary():
    with pytest.raises(ValueError, match="summary: expected the dict of summary.json"):
        plots.roofline({"run": {}})


def test_import_npulab_does_not_load_matplotlib():
    code = ("import sys, npulab, npulab.plots, npulab.html_report, npulab.cli.report; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ---- npulab report DIR ---------------------------------------------------------------------

def _report(*argv):
    parser = argparse.ArgumentParser(prog="npulab")
    report_cmd.add_parser(parser.add_subparsers(dest="command"))
    return report_cmd.main(parser.parse_args(["report", *argv]))


def test_report_regenerates_and_recosts(tmp_path, summaries, capsys):
    s = summaries["small"]
    (tmp_path / "summary.json").write_text(json.dumps(s))
    assert _report(str(tmp_path)) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "npulab report: alexnet on npulab-default" in page and "16nm (16 nm)" in page
    assert f"wrote summary.json, layers.csv, report.txt, report.html to {tmp_path}" in \
        capsys.readouterr().err

    assert _report(str(tmp_path), "--tech", "7nm") == 0
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["run"] == s["run"]                             # nothing re-simulated
    assert saved["metrics"]["technology"]["name"] == "7nm"
    gold = compute_metrics(s["run"], "7nm").network["energy_j"]
    assert saved["metrics"]["network"]["energy_j"] == pytest.approx(gold, rel=1e-12)
    assert gold < s["metrics"]["network"]["energy_j"]           # 7 nm spends less than 16 nm
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "7nm (7 nm)" in page and format_si(gold, "J") in page
    assert "re-costed with 7nm" in capsys.readouterr().err


def test_report_keeps_the_dram_type_it_was_costed_with(summaries):
    run = summaries["native"]["run"]
    s = {"schema": "npulab.summary/1", "run": run,
         "metrics": compute_metrics(run, "16nm", dram_kind="hbm2").to_dict()}
    again = output.recost(s, "16nm")
    assert again["metrics"]["chip"]["dram"]["kind"] == "hbm2"
    assert again["metrics"]["network"]["energy_j"] == pytest.approx(s["metrics"]["network"]["energy_j"])


def test_report_errors_name_the_file(tmp_path, summaries):
    missing = tmp_path / "nope"
    with pytest.raises(UserError, match=f"{re.escape(str(missing))}: no such directory"):
        _report(str(missing))
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        _report(str(a_file))
    with pytest.raises(FileNotFoundError) as exc:
        _report(str(tmp_path))
    assert exc.value.filename == str(tmp_path / "summary.json")
    (tmp_path / "summary.json").write_text("{ not json")
    with pytest.raises(ConfigError, match=r"summary.json: not valid JSON: .* at line 1 column 3"):
        _report(str(tmp_path))
    (tmp_path / "summary.json").write_text(json.dumps({**summaries["compute"], "schema": "x/1"}))
    with pytest.raises(ConfigError, match=r"summary.json: schema = 'x/1': expected 'npulab.summary/1'"):
        _report(str(tmp_path))
    (tmp_path / "summary.json").write_text(json.dumps(summaries["compute"]))
    with pytest.raises(EnergyError, match="technology = '3nm'"):
        _report(str(tmp_path), "--tech", "3nm")
    assert not (tmp_path / "report.html").exists()


def test_cli_report(tmp_path, summaries, capsys):
    from npulab.cli import main
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "npulab: error: " in capsys.readouterr().err
    (tmp_path / "summary.json").write_text(json.dumps(summaries["compute"]))
    assert main(["report", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").is_file()


# ---- headless Chromium ------------------------------------------------------------------------

@pytest.fixture()
def chromium():
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing and CI is set: install the chromium package")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    return CHROMIUM


def _check(*argv):
    return subprocess.run([sys.executable, str(CHECKER), *map(str, argv)], capture_output=True,
                          text=True, timeout=120)


def test_chromium_sees_no_console_errors(chromium, tmp_path, pages):
    (tmp_path / "report.html").write_text(pages["native"], encoding="utf-8")
    shot = tmp_path / "shot.png"
    r = _check(tmp_path, "--screenshot", shot)
    assert r.returncode == 0, r.stderr
    assert "no console errors" in r.stdout
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1000)


@pytest.mark.parametrize("body, expected", [
    ('<script>console.error("x")</script>', "console.error: x"),
    ('<script>throw new Error("boom")</script>', "uncaught exception at line 1: Error: boom"),
    ('<script>var a = ;</script>', "uncaught exception at line 1: SyntaxError"),
    ('<img src="http://192.0.2.1/a.png">', "external request: http://192.0.2.1/a.png"),
])
def test_chromium_check_fails_on_errors(chromium, tmp_path, body, expected):
    page = tmp_path / "bad.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>t</title></head><body>{body}</body></html>")
    r = _check(page, "--screenshot", tmp_path / "bad.png")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert expected in r.stderr


def test_chromium_check_finds_a_table_that_does_not_scroll(chromium, tmp_path, pages):
    """Issue 21 item 23: a wide table outside a scroll container is a layout problem; the
    report's layers table (in its scroll container) is not, even in a narrow window."""
    row = "".join(f"<td>{'x' * 30} {i}</td>" for i in range(60))
    page = tmp_path / "wide.html"
    page.write_text("<!DOCTYPE html><html><head><title>t</title><style>td{white-space:nowrap}"
                    f"</style></head><body><div><table><tr>{row}</tr></table></div></body></html>")
    r = _check(page, "--screenshot", tmp_path / "wide.png")
    assert r.returncode == 1 and "layout: the page scrolls sideways" in r.stderr
    assert "with no sideways scroll" in r.stderr
    good = tmp_path / "report.html"
    good.write_text(pages["native"], encoding="utf-8")
    r = _check(good, "--screenshot", tmp_path / "good.png")
    assert r.returncode == 0, r.stderr


def test_chromium_check_needs_a_file(chromium, tmp_path):
    r = _check(tmp_path)                                         # no report.html in it
    assert r.returncode == 2
    assert f"{tmp_path / 'report.html'}: no such file" in r.stderr


def test_chromium_sorts_the_layer_table(chromium, tmp_path, pages, summaries):
    """The inline sort script runs: clicking "cycles" twice puts the shortest, then the longest
    layer first; ops that were not simulated stay at the bottom; no console error."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_report_chromium", CHECKER)
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)
    page = tmp_path / "report.html"
    page.write_text(pages["native"], encoding="utf-8")
    browser = checker.Browser(chromium, 30.0)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": page.as_uri()}, session=session)
        assert browser.wait_event("Page.loadEventFired", 30.0)
        js = ("(function () { var t = document.querySelector('table.sortable');"
              " var th = t.tHead.rows[0].cells[4], out = [th.textContent];"
              " function first() { return t.tBodies[0].rows[0].cells[1].textContent; }"
              " th.click(); out.push(first()); th.click(); out.push(first());"
              " var rows = t.tBodies[0].rows; out.push(rows[rows.length - 1].className);"
              " return out.join('|'); })()")
        value = browser.send("Runtime.evaluate", {"expression": js, "returnByValue": True},
                             session=session)["result"]["value"]
        browser.drain(0.2)
        problems = checker.problems_of(browser.events)
    finally:
        browser.close()
    costed = [x for x in summaries["native"]["run"]["layers"] if x["cycles"] is not None]
    shortest = min(costed, key=lambda x: x["cycles"])["name"]
    longest = max(costed, key=lambda x: x["cycles"])["name"]
    # every op ran; the ops fused into another's layer have no cycles of their own and sort last
    assert value == f"cycles|{shortest}|{longest}|idle"
    assert problems == []
