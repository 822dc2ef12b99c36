"""Render a :class:`mhabench.report.types.Report` as Markdown: the findings first, then each
section's text and its summary tables in full; a per-cell table shows the same worst rows
as the HTML page, with a line linking the CSV file that holds them all (plots are named,
they live in the HTML)."""

from __future__ import annotations

from typing import Any

from mhabench.report.render.excerpt import csv_href, csv_name, excerpt
from mhabench.report.render.formatting import format_value
from mhabench.report.types import Report, Section, Table


def _md_cell(value: Any) -> str:
    return format_value(value).replace("|", "\\|").replace("\n", " ")


def table_markdown(section: Section, table: Table, tables_dir: str) -> str:
    shown = excerpt(table)
    frame = shown.frame
    title = f"**{table.title}**" + (
        f" ({len(frame)} of {len(table.frame)} rows"
        + (f", {shown.order}" if shown.order else "") + ")" if shown.hidden else "")
    lines = [title, "",
             "| " + " | ".join(_md_cell(c) for c in frame.columns) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |"
              for r in frame.itertuples(index=False)]
    if shown.hidden:
        lines += ["", f"{shown.hidden} more rows in [{csv_name(section, table)}]"
                      f"({csv_href(section, table, tables_dir)})"]
    return "\n".join(lines)


def findings_markdown(section: Section) -> str:
    columns = list(dict.fromkeys(k for f in section.findings for k in f.answers))
    lines = ["| | " + " | ".join(_md_cell(c) for c in columns) + " |",
             "|---|" + "|".join("---" for _ in columns) + "|"]
    lines += [f"| [{_md_cell(f.question)}](#{f.target}) | "
              + " | ".join(_md_cell(f.answers.get(c, "not measured")) for c in columns) + " |"
              for f in section.findings]
    return "\n".join(lines)


def render_markdown(report: Report, tables_dir: str) -> str:
    """``tables_dir``: the CSV folder's path relative to the Markdown file (its name)."""
    parts = [f"# {report.title}", "", f"Results folder: `{report.results_root}`", ""]
    for section in report.sections:
        parts += [f'<a id="{section.id}"></a>', "", f"## {section.title}", ""]
        if section.absent:
            parts += [f"_{section.absent}_", ""]
        if section.findings:
            parts += [findings_markdown(section), ""]
        parts += [table_markdown(section, t, tables_dir) + "\n" for t in section.tables
                  if not t.detail]
        parts += [p + "\n" for p in section.text]
        if section.plots:
            parts += [f"({len(section.plots)} plot(s) in the HTML report)", ""]
        parts += [table_markdown(section, t, tables_dir) + "\n" for t in section.tables
                  if t.detail]
    parts += ["## Loading warnings", ""] + [f"- {w}" for w in report.warnings or ["none"]]
    return "\n".join(parts) + "\n"
