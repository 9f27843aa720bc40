"""The self-contained HTML report of a run: ``report.html`` next to ``summary.json``.

:func:`render_html` turns the summary dict (``{"schema": "npulab.summary/1", "run":
RunResult.to_dict(), "metrics": Metrics.to_dict()}``) into ONE HTML file that opens offline:
no external CSS, scripts, fonts or images. It holds

* a title (model on chip, timing mode) and the run's scope text;
* a headline card: latency, inferences/s, effective and peak TOPS, energy per inference,
  average / peak / on-chip power, TOPS/W, compute utilization, the network lines the terminal
  prints (:func:`npulab.metrics.network_items`: DRAM traffic, bus and useful bandwidth, MACs
  per DRAM byte, memory-bound layers), the layers by bound, the roofline bound, the
  technology;
* the four plots of :mod:`npulab.plots` as inline SVG (text kept as text, hover titles on
  points and bars);
* the per-layer table in its own scroll container (sortable by clicking a header; a few lines
  of inline JavaScript): what the run measured, then every quantity of
  :func:`npulab.metrics.layer_columns` under its one label;
* the energy table used, every entry with its value, unit and citation, and the chip as it was
  costed (area, leakage, DRAM and link energy types), so every joule can be audited;
* the chip config of the run.

Every piece of text from the summary is escaped (:func:`html.escape`). The output is
deterministic: the same summary gives the same bytes (the SVG carries no date).
:func:`write_report` reads ``DIR/summary.json`` and writes ``DIR/report.html``.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
from pathlib import Path

from hw.systolic.config import ConfigError
from npulab.metrics import format_si, layer_columns, network_items
from npulab.summary_io import check_summary, load_summary

__all__ = ["render_html", "write_report", "headline", "svg_of", "simple_page", "PAGE_CSS"]

#: The style of the one-topic pages (``npulab llm serve -o``, ``npulab system -o``).
PAGE_CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
            "text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
            ".plot svg{max-width:100%;height:auto}pre{background:#f8f8f8;padding:8px}")


def simple_page(heading: str, body: list[str]) -> str:
    """A self-contained one-topic page: ``heading`` as its title and first heading, then the
    ``body`` parts (HTML), then npulab's version as the footer."""
    from npulab import __version__
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{_e(heading)}</title>", '<link rel="icon" href="data:,">',
             f"<style>{PAGE_CSS}</style>", "</head>", "<body>", f"<h1>{_e(heading)}</h1>",
             *body, f"<footer>npulab {_e(__version__)}</footer>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"


# ---- writing ---------------------------------------------------------------------------------

def write_report(directory: str | os.PathLike) -> Path:
    """Render ``DIR/summary.json`` into ``DIR/report.html``; returns the path written."""
    directory = Path(directory)
    summary = load_summary(directory / "summary.json")
    out = directory / "report.html"
    out.write_text(render_html(summary), encoding="utf-8")
    return out


# ---- figures as inline SVG -------------------------------------------------------------------

_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(xlink:href="#|href="#|url\(#)([^")]+)')


def svg_of(fig, prefix: str) -> str:
    """The figure as an ``<svg>`` element to inline in HTML: text as text, no date, every id
    prefixed with ``prefix-`` (several SVGs share one document) and a ``<title>`` (hover
    text) in every element named in ``fig.npulab_tooltips``."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"npulab-{prefix}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "npulab"})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    for gid, tip in getattr(fig, "npulab_tooltips", {}).items():
        tag = f'<g id="{gid}">'
        text = text.replace(tag, f"{tag}<title>{html.escape(tip)}</title>", 1)

    def _name(value: str) -> str:
        return value if value.startswith(prefix + "-") else f"{prefix}-{value}"

    text = _ID.sub(lambda m: f'id="{_name(m.group(1))}"', text)
    text = _REF.sub(lambda m: m.group(1) + _name(m.group(2)), text)
    return text.strip()


# ---- formatting -------------------------------------------------------------------------------

def _e(value) -> str:
    return html.escape(str(value))


def _num(value, fmt: str = ",") -> str:
    if value is None:
        return "-"
    return format(value, fmt)


def headline(summary: dict) -> list[tuple[str, str]]:
    """The headline card as ``(label, text)`` pairs, formatted from ``metrics.network``; the
    DRAM and intensity lines are :func:`npulab.metrics.network_items`, word for word the
    terminal's."""
    m = summary["metrics"]
    net, tech = m["network"], m["technology"]
    bounds = ", ".join(f"{k} {v}" for k, v in sorted(net.get("bound_counts", {}).items()))
    batch = net.get("inferences", 1)
    return [
        ("latency", f"{format_si(net['seconds'], 's')} ({net['cycles']:,} cycles at "
                    f"{format_si(net['clock_hz'], 'Hz')})"),
        ("inferences/s", f"{net['inferences_per_s']:,.1f}" + (f" (batch {batch})" if batch != 1 else "")),
        ("throughput", f"{net['ops_per_s'] / 1e12:.3f} TOPS effective of "
                       f"{net['peak_ops_per_s'] / 1e12:.3f} TOPS peak"),
        ("energy per inference", format_si(net["energy_per_inference_j"], "J")),
        ("average power", format_si(net["average_power_w"], "W")),
        ("peak power (busiest layer)", format_si(net["peak_power_w"], "W")),
        ("on-chip power", format_si(net["on_chip_power_w"], "W")),
        ("efficiency", f"{net['tops_per_w']:.3g} TOPS/W"),
        ("compute utilization", f"{100 * net['compute_utilization']:.1f} %"),
        *network_items(m),
        *_multicore_items(summary),
        ("layers by bound", f"{bounds or '-'} (the busiest resource in the simulation)"),
        ("roofline bound", f"{net['roofline'].get('bound') or '-'} (network)"),
        ("technology", f"{tech.get('name', '?')} ({tech.get('node_nm', 0):g} nm)"),
    ]


def _multicore_items(summary: dict) -> list[tuple[str, str]]:
    """A multi-core chip's cores, L2 and network lines, as the terminal report prints them."""
    run = summary.get("run") or {}
    if "cores" not in (run.get("totals") or {}):
        return []
    from hw.configfile import chip_spec_from_dict
    from npulab.report import multicore_items
    return multicore_items(run["totals"], chip_spec_from_dict(run["config"], "summary.run.config"))


def _value_text(value) -> str:
    """An energy-table value: a number, or ``x: y`` pairs of a table over bit widths/sizes."""
    if isinstance(value, list):
        if value and all(isinstance(v, list) and len(v) == 2 for v in value):
            return "; ".join(f"{a:g}: {b:g}" for a, b in value)
        return ", ".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _config_text(config: dict) -> str:
    """The run's config as TOML-style text: ``[section]`` tables of ``key = value``."""
    lines: list[str] = []

    def walk(prefix: str, table: dict) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        if scalars or not prefix:
            if prefix:
                lines.append(f"[{prefix}]")
            lines.extend(f"{k} = {json.dumps(v)}" for k, v in scalars.items())
            lines.append("")
        for k, v in table.items():
            if isinstance(v, dict):
                walk(f"{prefix}.{k}" if prefix else k, v)

    walk("", config)
    return "\n".join(lines).strip() + "\n"


# ---- page parts -------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;
background:#fff;margin:0 auto;padding:16px 24px;max-width:1500px}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccd}
.scope{color:#445;margin:4px 0 12px}.note{color:#7a4b00}
.card{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:8px;
border:1px solid #ccd;border-radius:6px;padding:12px;background:#f6f8fb}
.card div{padding:4px 6px}.card .k{font-size:12px;color:#556;text-transform:uppercase}
.card .v{font-size:16px;font-weight:600}
.plot{overflow-x:auto;margin:8px 0;border:1px solid #eef;border-radius:4px}
.plot svg{display:block;height:auto}
.table-scroll{overflow-x:auto;overflow-y:auto;max-width:100%;max-height:80vh;
border:1px solid #eef;border-radius:4px;margin:8px 0}
.table-scroll table{margin:0}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{border:1px solid #dde;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#eef2f8;position:sticky;top:0}
table.sortable th{cursor:pointer}td.t,th.t{text-align:left}
td.src{white-space:normal;text-align:left;max-width:720px}
tr.idle td{color:#889}
pre{background:#f6f8fb;border:1px solid #ccd;padding:8px;font-size:12px;overflow-x:auto}
nav a{margin-right:12px}footer{color:#889;font-size:12px;margin:24px 0}
"""

_SORT_JS = """
(function () {
  function key(row, col) {
    var cell = row.cells[col];
    if (!cell) { return ""; }
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent : v;
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var asc = th.getAttribute("aria-sort") !== "ascending";
        rows.sort(function (a, b) {
          var x = key(a, col), y = key(b, col);
          if (x === "" || y === "") { return (x === "") - (y === ""); }
          var nx = Number(x), ny = Number(y);
          var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
          return asc ? c : -c;
        });
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""


def _td(text, raw=None, cls: str | None = None) -> str:
    attrs = f' class="{cls}"' if cls else ""
    if raw is not None:
        attrs += f' data-v="{_e(raw)}"'
    return f"<td{attrs}>{_e(text)}</td>"


def _layer_rows(summary: dict) -> tuple[list[str], list[str]]:
    """Header cells and body rows of the per-layer table: every layer of the run in run order;
    layers the metrics did not cost (no engine ran them) are listed greyed out."""
    run, m = summary["run"], summary["metrics"]
    costed = iter(m["layers"])
    pairs = []
    for layer in run["layers"]:
        ran = layer.get("cycles") is not None and layer.get("actions") is not None
        pairs.append((layer, next(costed, None) if ran else None))
    metric_layers = [x for _, x in pairs if x]
    stall_cols = [c for c in ("dram", "link", "sram", "vector")
                  if any(x["stall_cycles"].get(c) for x in metric_layers)]
    # what the run measured, then the metrics' quantities under their one label
    measured = ([("cycles", lambda r, x: x["cycles"]),
                 ("compute cycles", lambda r, x: x["compute_cycles"])]
                + [(f"stall {c.upper() if c in ('dram', 'sram') else c}",
                    lambda r, x, c=c: x["stall_cycles"].get(c, 0)) for c in stall_cols]
                + [("MACs", lambda r, x: x["macs"]),
                   ("DRAM rd B", lambda r, x: r.get("dram_read_bytes")),
                   ("DRAM wr B", lambda r, x: r.get("dram_write_bytes"))])
    quantities = [q for q in layer_columns(metric_layers)
                  if not q.key.startswith("energy_") or q.key == "energy_uj"]
    cols = ["#", "layer", "op", "engine"] + [h for h, _ in measured] + [q.label for q in quantities]
    fused = any(layer.get("fused") for layer, _ in pairs)
    if fused:       # the group each fused op ran in, as in the terminal table and the CSV
        cols.append("fused")
    text_cols = {"layer", "op", "engine", "bound", "roofline bound", "fused"}
    head = [f'<th class="t">{_e(c)}</th>' if c in text_cols else f"<th>{_e(c)}</th>" for c in cols]
    rows = []
    for index, (layer, x) in enumerate(pairs):
        cells = [_td(index, index), _td(layer["name"], cls="t"), _td(layer["op"], cls="t"),
                 _td(layer.get("engine", "-"), cls="t")]
        tail = [_td(layer.get("fused") or "-", cls="t")] if fused else []
        if x is None:
            why = "in its fused group" if layer.get("engine") == "fused" else "not simulated"
            cells += [_td(why if i == 0 else "-", "")
                      for i in range(len(cols) - 4 - len(tail))]
            rows.append('<tr class="idle">' + "".join(cells + tail) + "</tr>")
            continue
        for _, get in measured:
            v = get(layer, x)
            cells.append(_td(_num(v), v if v is not None else ""))
        for q in quantities:
            v = q.value(x)
            cells.append(_td(q.text(x), v if v is not None else "",
                             cls="t" if q.fmt == "s" else None))
        rows.append("<tr>" + "".join(cells + tail) + "</tr>")
    return head, rows


def _energy_table(m: dict) -> list[str]:
    tech = m["technology"]
    out = [f"<p>Technology <b>{_e(tech.get('name', '?'))}</b>: {_e(tech.get('description', ''))}."
           f" Table file: <code>{_e(tech.get('file', '-'))}</code>. Edit a copy and re-cost a "
           f"saved run with <code>npulab report DIR --tech FILE</code>.</p>",
           "<table><thead><tr><th class='t'>table</th><th class='t'>key</th><th>value</th>"
           "<th class='t'>unit</th><th class='t'>source</th></tr></thead><tbody>"]
    for entry in tech.get("entries", []):
        out.append("<tr>" + _td(entry.get("table", ""), cls="t") + _td(entry.get("key", ""), cls="t")
                   + _td(_value_text(entry.get("value")))
                   + _td(entry.get("unit", ""), cls="t") + _td(entry.get("source", ""), cls="src")
                   + "</tr>")
    out.append("</tbody></table>")
    fit = tech.get("sram_fit_pj_per_64b")
    if fit:
        out.append(f"<p>SRAM read energy per 64 bits, fitted as a + b &radic;KiB: a = "
                   f"{fit['a']:.4g} pJ, b = {fit['b_per_sqrt_kib']:.4g} pJ/&radic;KiB "
                   f"(a scratchpad is costed at the size of one bank).</p>")
    sources = _sources(tech)
    if sources:
        out.append("<p>Sources named in the table:</p><ul>")
        out += [f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in sources.items()]
        out.append("</ul>")
    chip = m["chip"]
    out.append("<p>The chip as costed:</p><table><thead><tr><th class='t'>item</th><th>value</th>"
               "</tr></thead><tbody>")
    items = [(f"area {k}", f"{v:.4g} mm²") for k, v in chip.get("area_mm2", {}).items()]
    items += [("area total", f"{chip.get('area_total_mm2', 0):.4g} mm²"),
              ("static (leakage) power", format_si(chip.get("static_power_w"), "W"))]
    dram = chip.get("dram") or {}
    assumed = " (assumed: the DRAM preset names no type)" if dram.get("kind_assumed") else ""
    items += [("DRAM energy type", f"{dram.get('kind', '-')}{assumed}, preset {dram.get('preset', '-')}"),
              ("DRAM peak bandwidth", format_si(dram.get("peak_bytes_per_s"), "B/s")
               if dram.get("peak_bytes_per_s") else "unlimited"),
              ("host link energy type", (chip.get("link") or {}).get("kind", "-")),
              ("host link peak bandwidth", format_si(chip["link"]["peak_bytes_per_s"], "B/s")
               if (chip.get("link") or {}).get("peak_bytes_per_s") else "unlimited / none"),
              ("peak compute", f"{chip['peak_macs_per_cycle']:,} MAC/cycle, "
                               f"{chip['peak_ops_per_s'] / 1e12:.3g} TOPS"),
              ("precision", f"{chip.get('precision')} (accumulator {chip.get('acc_bits')} bits)")]
    for name, s in chip.get("srams", {}).items():
        items.append((f"scratchpad {name}", f"{s['capacity_bytes']:,} B, bank {s['bank_bytes']:,.0f} B, "
                                            f"{s['peak_bytes_per_cycle']} B/cycle peak"))
    out += ["<tr>" + _td(k, cls="t") + _td(v) + "</tr>" for k, v in items]
    out.append("</tbody></table>")
    return out


def _sources(tech: dict) -> dict:
    """The citation of every source key the table uses: ``tech["sources"]`` when the summary
    carries it, else the ``[sources]`` table of the technology file if it can be read."""
    if isinstance(tech.get("sources"), dict):
        return tech["sources"]
    path = tech.get("file")
    if not path or not os.path.isfile(path):
        return {}
    from hw.validate import read_toml
    try:
        table = read_toml(path).get("sources", {})
    except ConfigError:
        return {}
    return {str(k): str(v) for k, v in table.items()}


def _notes(run: dict, m: dict) -> list[str]:
    totals, net = run.get("totals", {}), m["network"]
    notes = []
    if isinstance(totals.get("memory"), str):
        notes.append(f"memory model: {totals['memory']}")
    if net.get("layers_not_costed"):
        notes.append(f"{net['layers_not_costed']} ops have no engine in this chip model and are "
                     f"not simulated (listed greyed out in the table)")
    skipped = totals.get("ops_skipped") or []
    if skipped:
        notes.append(f"{len(skipped)} ops skipped (unsupported): " + "; ".join(map(str, skipped)))
    if (m["chip"].get("dram") or {}).get("kind_assumed"):
        notes.append("the DRAM preset names no DRAM type; its energy is costed as "
                     f"{m['chip']['dram']['kind']}")
    return notes


def render_html(summary: dict) -> str:
    """The whole report as one self-contained HTML document (see the module docstring)."""
    check_summary(summary)
    from npulab import __version__
    from npulab.plots import PLOTS

    run, m = summary["run"], summary["metrics"]
    title = f"{run['model']} on {run['chip']}"
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>npulab report: {_e(title)}</title>", '<link rel="icon" href="data:,">',
             f"<style>{_CSS}</style>", "</head>", "<body>",
             f"<h1>npulab report: {_e(title)}</h1>",
             f"<p class='scope'>timing <b>{_e(run['timing'])}</b>: {_e(run.get('scope', ''))}</p>"]
    parts += [f"<p class='scope note'>{_e(n)}</p>" for n in _notes(run, m)]
    parts.append("<nav>" + "".join(f'<a href="#{k}">{_e(h)}</a>' for k, h, _ in PLOTS)
                 + '<a href="#layers">Layers</a><a href="#energy-table">Energy table</a>'
                 '<a href="#config">Config</a></nav>')
    parts.append('<h2 id="headline">Headline</h2><div class="card">')
    parts += [f'<div><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>'
              for k, v in headline(summary)]
    parts.append("</div>")
    for key, heading, fn in PLOTS:
        fig = fn(summary)
        parts.append(f'<h2 id="{key}">{_e(heading)}</h2><div class="plot">{svg_of(fig, key)}</div>')
        fig.clear()
    head, rows = _layer_rows(summary)
    parts += ['<h2 id="layers">Layers</h2>',
              "<p>Click a header to sort; scroll sideways for every column. <i>cycles</i> is the "
              "layer's window (windows add up to the run), <i>busy span</i> the time its own work "
              "took (longer when it overlapped the previous window); rates, utilizations and "
              "power are over the busy span. DRAM <i>bus</i> bytes include over-fetch, "
              "<i>useful</i> bandwidth counts the bytes read and written. Energy includes each "
              "layer's share of DRAM, link and leakage.</p>",
              '<div class="table-scroll" role="region" aria-label="layers" tabindex="0">'
              '<table class="sortable"><thead><tr>' + "".join(head)
              + "</tr></thead><tbody>", *rows, "</tbody></table></div>"]
    parts.append('<h2 id="energy-table">Energy table</h2>')
    parts += _energy_table(m)
    parts += ['<h2 id="config">Config</h2>', f"<pre>{_e(_config_text(run['config']))}</pre>",
              f"<footer>npulab {_e(__version__)}; schema {_e(summary['schema'])}</footer>",
              f"<script>{_SORT_JS}</script>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"
