"""Render a :class:`mhabench.report.types.Report` as Markdown (tables in full; plots are
named, they live in the HTML)."""

from __future__ import annotations

from typing import Any

from mhabench.report.formatting import format_value
from mhabench.report.types import Report, Table


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
