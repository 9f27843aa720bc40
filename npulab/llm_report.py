"""The HTML report of a served trace (``npulab llm serve -o DIR`` writes ``report.html``).

One self-contained page from a :class:`~npulab.llm_serve.ServeResult`'s dictionary
(``ServeResult.to_dict()``, what ``--format json`` prints): the latency percentiles and
throughput the terminal prints (the same numbers, from the same summary), the distributions of
time to first token and time per output token (empirical CDFs), the tokens each iteration ran
over time (decode and prefill), the KV-cache occupancy over time, and the scheduler's settings.
Figures are inline SVG (:func:`npulab.html_report.svg_of`).
"""

from __future__ import annotations

import numpy as np

from npulab.html_report import _e

__all__ = ["render_serve_html", "render_curve_html", "latency_cdfs", "iterations_over_time",
           "latency_curve"]

def _figure(width: float = 9.0, height: float = 3.4):
    from npulab.plots import _figure as fig
    return fig(width, height)


def latency_cdfs(doc: dict):
    """Empirical CDFs of TTFT and TPOT (ms) over the requests."""
    fig = _figure()
    axes = fig.subplots(1, 2)
    for ax, key, label in zip(axes, ("ttft_s", "tpot_s"),
                              ("time to first token (ms)", "time per output token (ms)")):
        values = np.sort([r[key] * 1e3 for r in doc["requests"] if r[key] is not None])
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post")
            for p in (50, 99):
                v = doc["summary"][key][f"p{p}"] * 1e3
                ax.axvline(v, color="#999", lw=0.8, ls="--")
                ax.annotate(f"p{p} {v:,.1f}", (v, 0.05 + 0.45 * (p == 99)), fontsize=8,
                            rotation=90, ha="right")
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.02)
    return fig


def iterations_over_time(doc: dict):
    """Per iteration (a point at its start): its decode and prefill tokens; and the KV blocks in
    use against the cache's."""
    fig = _figure(9.0, 4.6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for engine in dict.fromkeys(i["engine"] for i in doc["iterations"]):
        its = [i for i in doc["iterations"] if i["engine"] == engine]
        t = [i["start_s"] for i in its]
        for key, what in (("decodes", "decode"), ("prefill_tokens", "prefill")):
            values = [i[key] for i in its]
            if any(values):
                top.scatter(t, values, s=3, label=f"{engine}: {what} tokens")
        bottom.step(t, [i["kv_blocks"] for i in its], where="post", lw=0.8, label=engine)
    kv = doc["summary"]["kv_blocks"]
    bottom.axhline(kv, color="#c00", lw=0.8, ls="--", label=f"cache: {kv:,} blocks")
    top.set_ylabel("tokens per iteration")
    top.legend(fontsize=7, loc="upper right")
    bottom.set_ylabel("KV blocks in use")
    bottom.set_xlabel("time (s)")
    bottom.legend(fontsize=7, loc="upper right")
    return fig


def _summary_rows(s: dict) -> list[str]:
    def ms(v):
        return "-" if v is None else f"{v * 1e3:,.2f}"
    rows = ["<table><tr><th>metric</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th>"
            "<th>mean ms</th></tr>"]
    for key, label in (("ttft_s", "time to first token"), ("tpot_s", "time per output token"),
                       ("itl_s", "inter-token latency"), ("e2e_s", "end-to-end latency")):
        d = s[key]
        rows.append(f"<tr><td>{label}</td>" + "".join(
            f"<td>{ms(d[k])}</td>" for k in ("p50", "p90", "p99", "mean")) + "</tr>")
    rows.append("</table>")
    return rows


def render_serve_html(doc: dict) -> str:
    """The report of ``ServeResult.to_dict()`` (module docstring)."""
    from npulab.html_report import simple_page, svg_of
    s = doc["summary"]
    title = f"{doc['model']} on {doc['system']}, tp {doc['tp']}, {doc['policy']} scheduler"
    slo = ", ".join(f"{k.removeprefix('slo_').removesuffix('_s').upper()} {doc[k] * 1e3:g} ms"
                    for k in ("slo_ttft_s", "slo_tpot_s") if doc.get(k) is not None)
    parts = [f"<p>{s['requests']:,} requests, {s['output_tokens']:,} output tokens over "
             f"{s['makespan_s']:,.3f} s: <b>{s['tokens_per_s']:,.1f} output tokens/s</b>, "
             f"{s['requests_per_s']:,.3f} requests/s; goodput {s['goodput_requests_per_s']:,.3f}"
             f" requests/s ({100 * s['slo_attained']:.1f} % within the SLOs"
             f"{': ' + _e(slo) if slo else ': none set'}); KV cache peak "
             f"{s['kv_peak_blocks']:,} of {s['kv_blocks']:,} blocks, mean occupancy "
             f"{100 * s['kv_mean_occupancy']:.1f} %; {s['preemptions']} preemptions; "
             f"{s['iterations']:,} iterations.</p>"]
    parts += ["<h2>Latency</h2>", *_summary_rows(s)]
    for key, heading, fn in (("cdf", "Latency distributions", latency_cdfs),
                             ("iterations", "Iterations and KV cache over time",
                              iterations_over_time)):
        fig = fn(doc)
        parts.append(f'<h2 id="{key}">{_e(heading)}</h2><div class="plot">{svg_of(fig, key)}'
                     f"</div>")
        fig.clear()
    sched = "\n".join(f"{k} = {v}" for k, v in doc["scheduler"].items())
    sim = doc.get("simulation", {})
    parts += ["<h2>Scheduler</h2>", f"<pre>{_e(sched)}</pre>",
              f"<p>{sim.get('kernels_simulated', 0)} distinct kernels simulated in "
              f"{sim.get('seconds', 0.0):.1f} s. Every request and iteration: requests.csv, "
              f"iterations.csv; the timeline: trace.json (Perfetto).</p>"]
    return simple_page(f"npulab llm serve: {title}", parts)


def latency_curve(doc: dict):
    """A load sweep (``npulab llm serve --rates``): p50 and p99 TTFT and TPOT against the
    throughput each rate reached, labelled with the rate."""
    fig = _figure()
    axes = fig.subplots(1, 2)
    rows = doc["curve"]
    x = [r["tokens_per_s"] for r in rows]
    for ax, key, label in zip(axes, ("ttft_s", "tpot_s"),
                              ("time to first token (ms)", "time per output token (ms)")):
        for p, style in (("p50", "o-"), ("p99", "s--")):
            ax.plot(x, [r[f"{key}_{p}"] * 1e3 if r[f"{key}_{p}"] is not None else np.nan
                        for r in rows], style, label=p, ms=4)
        for r, xv in zip(rows, x):
            ax.annotate(f"{r['rate']:g}/s", (xv, r[f"{key}_p50"] * 1e3 if r[f"{key}_p50"]
                                             is not None else 0), fontsize=7,
                        textcoords="offset points", xytext=(3, -9))
        ax.set_xlabel("throughput (output tokens/s)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    return fig


def render_curve_html(doc: dict) -> str:
    """The page of a load sweep: the curve and its table (the terminal's numbers)."""
    from npulab.html_report import simple_page, svg_of
    title = (f"{doc['model']} on {doc['system']}, tp {doc['tp']}, {doc['policy']} scheduler, "
             f"{doc['requests']} Poisson requests per rate")
    fig = latency_curve(doc)
    head = ["rate/s", "tokens/s", "goodput req/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms",
            "TPOT p99 ms", "E2E p99 ms"]
    keys = ["rate", "tokens_per_s", "goodput_requests_per_s", "ttft_s_p50", "ttft_s_p99",
            "tpot_s_p50", "tpot_s_p99", "e2e_s_p99"]

    def cell(k, v):
        if v is None:
            return "-"
        if k == "rate":
            return f"{v:g}"
        if k.endswith(("_p50", "_p99")):
            return f"{v * 1e3:,.2f}"
        return f"{v:,.3f}" if k.startswith("goodput") else f"{v:,.1f}"
    rows = "".join("<tr>" + "".join(f"<td>{cell(k, r[k])}</td>" for k in keys) + "</tr>"
                   for r in doc["curve"])
    parts = [f'<div class="plot">{svg_of(fig, "curve")}</div>',
             "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>" + rows
             + "</table>",
             "<p>Each rate's requests, iterations, timeline and report: rate_&lt;rate&gt;/.</p>"]
    fig.clear()
    return simple_page(f"npulab llm serve: {title}", parts)
