"""Render a :class:`mhabench.report.types.Report` as one HTML page that opens offline:
plots embedded as base64 PNG, no network; its only links out are to the CSV files beside
it. Every string from the results (machine names, params, config ids) goes through
:func:`html.escape`.

The page answers first: the title, the findings (one line per question and machine, each
linking to its evidence), then the contents and the sections. A section opens with its
plots and summary tables (whole; one longer than :data:`MAX_OPEN_ROWS` collapsed); its
per-cell tables are collapsed ``<details>`` blocks showing their worst rows, with a line
linking the CSV that holds them all (:mod:`mhabench.report.render.excerpt`)."""

from __future__ import annotations

import base64
import html
import json
from typing import Any

from mhabench.report.render.excerpt import csv_href, csv_name, excerpt
from mhabench.report.render.formatting import format_value, is_number
from mhabench.report.render.palette import series_labels
from mhabench.report.render.plots import plot_png
from mhabench.report.types import Plot, Report, Section, Table

# A summary table longer than this is collapsed (whole) like a per-cell one.
MAX_OPEN_ROWS = 20
STYLE = """
body { font-family: sans-serif; margin: 1em auto; max-width: 86em; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.4em; margin: 0.3em 0; }
h2 { font-size: 1.2em; margin-top: 1.6em; }
p.lead { margin: 0.2em 0 0.6em; color: #555; font-size: 0.85em; }
nav ol { columns: 3; font-size: 0.85em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; }
#findings h2 { margin-top: 0.4em; }
table.findings { font-size: 0.85em; width: 100%; table-layout: fixed; }
table.findings th { text-align: left; }
table.findings thead th:first-child { width: 13em; }
table.findings td { vertical-align: top; }
p.absent { color: #777; font-style: italic; }
figure { margin: 1em 0; }
figure.small { display: inline-block; margin: 0.5em; vertical-align: top; }
details { margin: 0.3em 0 1em; }
summary { cursor: pointer; color: #235; }
.scroll { overflow-x: auto; max-height: 40em; overflow-y: auto; }
p.more { margin: 0 0 0.5em; font-size: 0.85em; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def table_html(table: Table) -> str:
    frame = excerpt(table).frame
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = "".join(
            f"<td class=n>{_e(format_value(v))}</td>" if is_number(v)
            else f"<td>{_e(format_value(v))}</td>" for v in record)
        rows.append(f"<tr>{cells}</tr>")
    return (f'<div class="scroll"><table><caption>{_e(table.title)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def collapsed(table: Table) -> bool:
    """Shown in a ``<details>`` block: a per-cell table, or a long summary."""
    return table.detail or len(table.frame) > MAX_OPEN_ROWS


def details_html(section: Section, table: Table, tables_dir: str) -> str:
    """A collapsed table; a long per-cell one shows its worst rows and a line linking the
    CSV that holds the rest."""
    shown = excerpt(table)
    name = csv_name(section, table)
    if not shown.hidden:
        return (f"<details><summary>{_e(table.title)} ({len(table.frame)} rows; also "
                f"<code>{_e(name)}</code>)</summary>{table_html(table)}</details>")
    rows = f"{len(shown.frame)} of {len(table.frame)} rows" + (
        f", {shown.order}" if shown.order else "")
    return (f"<details><summary>{_e(table.title)} ({_e(rows)})</summary>{table_html(table)}"
            f'<p class="more">{shown.hidden} more rows in <a href="'
            f'{_e(csv_href(section, table, tables_dir))}">{_e(name)}</a></p></details>')


def plot_html(plot: Plot) -> str:
    data = base64.b64encode(plot_png(plot)).decode("ascii")
    size = ' class="small"' if plot.small else ""
    # each line's colour and marker, for readers and tests that check them apart
    styles = json.dumps([[label, *plot.styles.get(label, ("", ""))]
                         for label in series_labels(plot)])
    return (f'<figure{size} data-styles="{_e(styles)}" data-style="{_e(plot.style)}">'
            f'<img src="data:image/png;base64,{data}" alt="{_e(plot.title)}">'
            f"<figcaption>{_e(plot.title)}</figcaption></figure>")


def findings_html(section: Section) -> str:
    columns = list(dict.fromkeys(k for f in section.findings for k in f.answers))
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    rows = []
    for f in section.findings:
        cells = "".join(f"<td>{_e(f.answers.get(c, 'not measured'))}</td>" for c in columns)
        rows.append(f'<tr><th><a href="#{_e(f.target)}">{_e(f.question)}</a></th>{cells}</tr>')
    return (f'<table class="findings"><thead><tr><th></th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def section_html(section: Section, tables_dir: str) -> str:
    """``tables_dir``: the CSV folder's path relative to the page (its name)."""
    parts = [f'<section id="{_e(section.id)}"><h2>{_e(section.title)}</h2>']
    if section.absent:
        parts.append(f'<p class="absent">{_e(section.absent)}</p>')
    if section.findings:
        parts.append(findings_html(section))
    parts += [plot_html(p) for p in section.plots]
    parts += [table_html(t) for t in section.tables if not collapsed(t)]
    parts += [f"<p>{_e(t)}</p>" for t in section.text]
    parts += [details_html(section, t, tables_dir) for t in section.tables if collapsed(t)]
    parts.append("</section>")
    return "\n".join(parts)


def render_html(report: Report, tables_dir: str) -> str:
    """The page: title, the findings section (the report's first), contents, the rest.
    ``tables_dir``: the CSV folder's path relative to the page (its name)."""
    first, rest = report.sections[:1], report.sections[1:]
    nav = "".join(f'<li><a href="#{_e(s.id)}">{_e(s.title)}</a></li>' for s in report.sections)
    nav += '<li><a href="#warnings">Loading warnings</a></li>'  # every section is in the TOC
    warnings = "".join(f"<li>{_e(w)}</li>" for w in report.warnings) or "<li>none</li>"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{_e(report.title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{_e(report.title)}</h1><p class=lead>Results folder: <code>"
            f"{_e(report.results_root)}</code>. Times are medians of asv's samples from each "
            f"machine's newest commit.</p>\n"
            + "\n".join(section_html(s, tables_dir) for s in first)
            + f"<nav><h2>Contents</h2><ol>{nav}</ol></nav>\n"
            + "\n".join(section_html(s, tables_dir) for s in rest)
            + f'\n<section id="warnings"><h2>Loading warnings</h2><ul>{warnings}</ul>'
            "</section></body></html>\n")
