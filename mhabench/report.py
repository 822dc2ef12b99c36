"""The report: asv results -> sections of tables, plots and findings -> HTML, Markdown, CSV.

A :class:`Section` holds data only (tables as DataFrames, plots as :class:`Plot` specs,
findings as plain text); :mod:`mhabench.report_sections` computes them and
:mod:`mhabench.report_html` renders them, so every number in the HTML is also in the
Markdown and CSV exports. :func:`write_report` never overwrites a file: it refuses
before writing anything if one of its outputs exists, or if the output would land
inside the results folder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

# asv compare / continuous flag a change when new/old passes this factor (asv's default).
DEFAULT_THRESHOLD = 1.1
# (id, title) of every section, in page order; ids are the HTML anchors and CSV prefixes.
SECTIONS = (
    ("machine", "Machine and calibration"),
    ("exercise-6-4", "Exercise 6.4: time against the head count h"),
    ("measured-vs-model", "Measured time against the FLOP model"),
    ("per-head-decomposition", "Per-head overhead: what grows with h"),
    ("time-model", "Calibrated time model and its leave-out accuracy"),
    ("scaling", "Scaling in n and d"),
    ("self-vs-cross", "Self- against cross-attention"),
    ("mha-gqa-mqa", "MHA against GQA and MQA"),
    ("decoding", "Decoding with and without caches"),
    ("forward-backward", "Forward against forward + backward"),
    ("torch-vs-jax", "PyTorch against JAX"),
    ("regressions", "Regressions across commits"),
    ("machines", "Machines side by side"),
    ("profile", "Profile breakdown by region"),
)
SECTION_IDS = tuple(sid for sid, _ in SECTIONS)


@dataclass
class Table:
    """A table with units in its column names; ``name`` names its CSV file."""

    name: str
    title: str
    frame: pd.DataFrame


@dataclass
class Plot:
    """A labelled plot: one (x, y) series per legend entry.

    ``style`` is "line" (markers joined), "scatter" or "stacked" (stacked bars, one
    series per stacked component, x categorical; ``points`` marks measured totals on
    them). ``diagonal`` draws y = x.
    """

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, tuple[list[float], list[float]]]
    logx: bool = False
    logy: bool = False
    style: str = "line"
    diagonal: bool = False
    points: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Section:
    id: str
    title: str
    text: list[str] = field(default_factory=list)  # findings, one paragraph each
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    absent: str | None = None  # one line saying which data is missing, instead of content


@dataclass
class Report:
    title: str
    results_root: str
    sections: list[Section]
    warnings: list[str]


def progress(message: str) -> None:
    print(f"mhabench report: {message}", file=sys.stderr, flush=True)


def build_report(results: Any, traces: pd.DataFrame | None = None,
                 threshold: float = DEFAULT_THRESHOLD,
                 log: Callable[[str], None] = progress) -> Report:
    """Every section of the report from loaded :class:`mhabench.results.Results`."""
    from mhabench import report_sections
    from mhabench.timemodel import fit_models

    log(f"{len(results.frame)} result rows from {results.root}; fitting time models")
    context = report_sections.Context.from_results(results, fit_models(results.frame),
                                                   traces, threshold)
    sections = []
    for sid, title in SECTIONS:
        log(f"section {sid}")
        section = report_sections.BUILDERS[sid](context)
        section.id, section.title = sid, title
        sections.append(section)
    machines = ", ".join(results.machine_names) or "no machine"
    return Report(f"mhabench report: {machines}", str(results.root), sections,
                  list(results.warnings))


def output_paths(out: str | Path) -> dict[str, Path]:
    """The files a report named ``out`` (``.../NAME.html``) writes: the page, its Markdown
    twin and a folder with one CSV per table."""
    out = Path(out)
    if out.suffix.lower() != ".html":
        raise ValueError(f"--out {str(out)!r} is not allowed; give a file name ending in .html "
                         "(the Markdown and CSV exports go beside it)")
    return {"html": out, "markdown": out.with_suffix(".md"),
            "tables": out.with_name(out.stem + "_tables")}


def check_outputs(out: str | Path, results_root: str | Path) -> dict[str, Path]:
    """Refuse (FileExistsError / ValueError) before any work if an output exists or would
    land inside the results folder."""
    paths = output_paths(out)
    root = Path(results_root).resolve()
    for path in paths.values():
        resolved = path.resolve()
        if resolved == root or root in resolved.parents:
            raise ValueError(f"report output {str(path)!r} is inside the results folder "
                             f"{str(results_root)!r}, which is never written to; "
                             "choose another --out")
        if path.exists():
            raise FileExistsError(f"{str(path)!r} already exists and reports are never "
                                  "overwritten; choose a new --out name")
    return paths


def write_report(report: Report, out: str | Path) -> dict[str, Path]:
    """Write the HTML page, the Markdown export and the CSV tables; returns their paths."""
    from mhabench import report_html

    paths = check_outputs(out, report.results_root)
    paths["html"].parent.mkdir(parents=True, exist_ok=True)
    html = report_html.render_html(report)  # render everything before writing anything
    markdown = report_html.render_markdown(report)
    paths["tables"].mkdir()
    for section in report.sections:
        for table in section.tables:
            target = paths["tables"] / f"{section.id}--{table.name}.csv"
            with target.open("x", encoding="utf-8", newline="") as fh:
                table.frame.to_csv(fh, index=False)
    for key, text in (("markdown", markdown), ("html", html)):
        with paths[key].open("x", encoding="utf-8") as fh:
            fh.write(text)
    return paths
