"""Notebook helpers shared by the result classes of ``hw``, ``compiler`` and ``npulab``.

* :func:`import_pandas`: pandas is an optional extra (``pip install 'npulab[pandas]'``); every
  ``to_pandas()`` imports it through here, at call time, so importing npulab never loads it.
* :func:`frame`: a DataFrame from column names and row lists, one dtype per column inferred
  from the Python values: all ``int`` -> ``int64`` (nullable ``Int64`` when a cell is missing),
  ``float`` or mixed numbers -> ``float64`` (missing = NaN), ``bool`` -> ``bool`` (``boolean``
  with missing cells), anything else -> pandas' string dtype. The rows are the ones the CSV
  writers write, so a frame and its CSV agree.
* :func:`html_table`: a compact, escaped HTML table of the first rows (``_repr_html_``).
"""

from __future__ import annotations

import html
import math

__all__ = ["import_pandas", "frame", "html_table", "figure", "PANDAS_MESSAGE"]

PANDAS_MESSAGE = "to_pandas() needs pandas: pip install 'npulab[pandas]'"


def import_pandas():
    """The pandas module, or ImportError with :data:`PANDAS_MESSAGE`."""
    try:
        import pandas
    except ImportError:
        raise ImportError(PANDAS_MESSAGE) from None
    return pandas


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _column_dtype(values: list) -> str:
    present = [v for v in values if not _missing(v)]
    missing = len(present) != len(values)
    if present and all(isinstance(v, bool) for v in present):
        return "boolean" if missing else "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "Int64" if missing else "int64"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float64"
    if not present:
        return "float64"
    return "str"


def frame(columns: list[str], rows: list[list]):
    """A DataFrame with one typed column per name (module docstring)."""
    pd = import_pandas()
    data = {}
    for i, name in enumerate(columns):
        values = [row[i] for row in rows]
        dtype = _column_dtype(values)
        if dtype == "float64":
            values = [math.nan if _missing(v) else float(v) for v in values]
        elif dtype == "str":
            values = [None if _missing(v) else str(v) for v in values]
        data[name] = pd.Series(values, dtype=dtype, name=name)
    return pd.DataFrame(data, columns=list(columns))


def _cell(v) -> str:
    if _missing(v):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def html_table(title: str, columns: list[str], rows: list[list], *, max_rows: int = 10,
               lines: list[str] = ()) -> str:
    """``title`` in bold, ``lines`` of text under it, then the first ``max_rows`` rows of the
    table (a note says how many more there are; ``to_pandas()`` has them all)."""
    e = html.escape
    out = [f"<div class='npulab-result'><b>{e(title)}</b>"]
    out += [f"<br><span>{e(line)}</span>" for line in lines]
    if columns:
        out.append("<table style='font-size:small'><thead><tr>"
                   + "".join(f"<th>{e(str(c))}</th>" for c in columns) + "</tr></thead><tbody>")
        for row in rows[:max_rows]:
            out.append("<tr>" + "".join(f"<td>{e(_cell(v))}</td>" for v in row) + "</tr>")
        out.append("</tbody></table>")
        if len(rows) > max_rows:
            out.append(f"<span>... {len(rows) - max_rows} more rows of {len(rows)} "
                       f"(to_pandas() has them all)</span>")
    out.append("</div>")
    return "".join(out)


def figure(width_in: float, height_in: float):
    """A matplotlib Figure on the Agg canvas (no pyplot, no GUI; a notebook shows it inline)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig
