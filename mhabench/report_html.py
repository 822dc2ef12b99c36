"""Render a :class:`mhabench.report.Report` as one self-contained HTML page (plots embedded
as base64 PNG, no network) and as Markdown. Every string from the results (machine
names, params, config ids) goes through :func:`html.escape`."""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from typing import Any

import numpy as np
import pandas as pd

from mhabench.report import Plot, Report, Section, Table

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 75em; color: #222; }
nav ol { columns: 2; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; }
p.absent { color: #777; font-style: italic; }
figure { margin: 1em 0; }
.scroll { overflow-x: auto; max-height: 40em; overflow-y: auto; }
"""


def format_value(value: Any) -> str:
    """About three significant digits, thousands separators, n/a for missing values."""
    if value is None or value is pd.NA:
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if not isinstance(value, (float, np.floating)):
        return str(value)
    v = float(value)
    if math.isnan(v):
        return "n/a"
    a = abs(v)
    if math.isinf(v) or a == 0:
        return str(v).replace(".0", "")
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.{2 - int(math.floor(math.log10(a)))}f}"
    return f"{v:.3g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


# ----- plots ------------------------------------------------------------------------------
def plot_png(plot: Plot) -> bytes:
    """Draw one :class:`Plot` with matplotlib's Agg backend; returns PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=90)
    try:
        if plot.style == "stacked":
            _stacked(ax, plot)
        else:
            for label, (x, y) in plot.series.items():
                if plot.style == "scatter":
                    ax.scatter(x, y, label=label, s=18, alpha=0.8)
                else:
                    ax.plot(x, y, marker="o", label=label)
        plain = FuncFormatter(lambda v, _: f"{v:g}")  # 64, 0.5: not 2^6 or 5x10^-1
        if plot.logx:
            ax.set_xscale("log", base=2 if plot.xlabel.startswith("heads") else 10)
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(NullFormatter())
        if plot.logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(NullFormatter())
        if plot.diagonal:
            lo, hi = _limits(plot)
            ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="y = x")
        ax.set_title(textwrap.fill(plot.title, 90), fontsize=9)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)


def _stacked(ax: Any, plot: Plot) -> None:
    """Stacked bars over categorical x (e.g. h = 1, 2, 4, ...)."""
    labels = None
    bottom: list[float] = []
    for label, (x, y) in plot.series.items():
        if labels is None:
            labels = [format_value(int(v) if float(v).is_integer() else v) for v in x]
            bottom = [0.0] * len(x)
        ax.bar(range(len(y)), y, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, y, strict=True)]
    for label, y in plot.points.items():
        ax.plot(range(len(y)), y, "kD", label=label)
    ax.set_xticks(range(len(labels or [])), labels or [])


def _limits(plot: Plot) -> tuple[float, float]:
    values = [v for x, y in plot.series.values() for v in (*x, *y) if v and v > 0]
    return (min(values), max(values)) if values else (1e-3, 1.0)


# ----- HTML -------------------------------------------------------------------------------
def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def table_html(table: Table) -> str:
    frame = table.frame
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = "".join(
            f'<td class="num">{_e(format_value(v))}</td>' if _is_number(v)
            else f"<td>{_e(format_value(v))}</td>" for v in record)
        rows.append(f"<tr>{cells}</tr>")
    return (f'<div class="scroll"><table><caption>{_e(table.title)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def section_html(section: Section) -> str:
    parts = [f'<section id="{_e(section.id)}"><h2>{_e(section.title)}</h2>']
    if section.absent:
        parts.append(f'<p class="absent">{_e(section.absent)}</p>')
    parts += [f"<p>{_e(t)}</p>" for t in section.text]
    for plot in section.plots:
        data = base64.b64encode(plot_png(plot)).decode("ascii")
        parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{_e(plot.title)}">'
                     f"<figcaption>{_e(plot.title)}</figcaption></figure>")
    parts += [table_html(t) for t in section.tables]
    parts.append("</section>")
    return "\n".join(parts)


def render_html(report: Report) -> str:
    nav = "".join(f'<li><a href="#{_e(s.id)}">{_e(s.title)}</a></li>' for s in report.sections)
    nav += '<li><a href="#warnings">Loading warnings</a></li>'  # every section is in the TOC
    warnings = "".join(f"<li>{_e(w)}</li>" for w in report.warnings) or "<li>none</li>"
    body = "\n".join(section_html(s) for s in report.sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{_e(report.title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{_e(report.title)}</h1><p>Results folder: <code>{_e(report.results_root)}"
            f"</code>. Times are medians of asv's samples from each machine's newest commit."
            f"</p><nav><ol>{nav}</ol></nav>\n{body}\n"
            f'<section id="warnings"><h2>Loading warnings</h2><ul>{warnings}</ul></section>'
            "</body></html>\n")


# ----- Markdown ---------------------------------------------------------------------------
def _md_cell(value: Any) -> str:
    return format_value(value).replace("|", "\\|").replace("\n", " ")


def table_markdown(table: Table) -> str:
    frame = table.frame
    lines = [f"**{table.title}**", "",
             "| " + " | ".join(_md_cell(c) for c in frame.columns) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |"
              for r in frame.itertuples(index=False)]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    parts = [f"# {report.title}", "", f"Results folder: `{report.results_root}`", ""]
    for section in report.sections:
        parts += [f"## {section.title}", ""]
        if section.absent:
            parts += [f"_{section.absent}_", ""]
        parts += [p + "\n" for p in section.text]
        if section.plots:
            parts += [f"({len(section.plots)} plot(s) in the HTML report)", ""]
        parts += [table_markdown(t) + "\n" for t in section.tables]
    parts += ["## Loading warnings", ""] + [f"- {w}" for w in report.warnings or ["none"]]
    return "\n".join(parts) + "\n"
