"""Render a :class:`mhabench.report.types.Report` as one self-contained HTML page (plots
embedded as base64 PNG, no network). Every string from the results (machine names,
params, config ids) goes through :func:`html.escape`."""

from __future__ import annotations

import base64
import html
from typing import Any

from mhabench.report.formatting import format_value, is_number
from mhabench.report.plots import plot_png
from mhabench.report.types import Report, Section, Table

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
figure.small { display: inline-block; margin: 0.5em; vertical-align: top; }
.scroll { overflow-x: auto; max-height: 40em; overflow-y: auto; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def table_html(table: Table) -> str:
    frame = table.frame
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = "".join(
            f'<td class="num">{_e(format_value(v))}</td>' if is_number(v)
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
        size = ' class="small"' if plot.small else ""
        parts.append(f'<figure{size}><img src="data:image/png;base64,{data}" '
                     f'alt="{_e(plot.title)}">'
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
