"""What a report is made of: data only, no computation and no rendering.

A :class:`Section` holds tables as DataFrames, plots as :class:`Plot` specs and findings
as plain text, so every number in the HTML is also in the Markdown and CSV exports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# How a per-cell table ranks its rows, worst first: the largest values, the smallest, the
# largest magnitudes (a signed residual) or the farthest from 1 either way (a ratio).
RANK_ORDERS = ("high", "low", "far from 0", "far from 1")


@dataclass
class Table:
    """A table with units in its column names; ``name`` names its CSV file, which holds
    every row. A ``detail`` table has a row per cell (or pair of cells), so it grows with
    the grid: the pages show its worst rows, ranked by column ``rank`` in ``rank_order``
    (:data:`RANK_ORDERS`; its first rows where ``rank`` is None), and link the CSV for the
    rest (:mod:`mhabench.report.render.excerpt`). The others are a section's summary, shown
    whole."""

    name: str
    title: str
    frame: pd.DataFrame
    detail: bool = False
    rank: str | None = None
    rank_order: str = "high"

    def __post_init__(self) -> None:
        if self.rank_order not in RANK_ORDERS:
            raise ValueError(f"rank_order {self.rank_order!r} of table {self.name!r} is not "
                             f"allowed; use one of {', '.join(map(repr, RANK_ORDERS))}")
        if self.rank is not None and not self.detail:
            raise ValueError(f"rank {self.rank!r} of table {self.name!r} is not allowed: a "
                             "summary table is shown whole; rank only a detail table")
        if self.rank is not None and len(self.frame.columns) and (
                self.rank not in self.frame.columns):
            raise ValueError(f"rank {self.rank!r} of table {self.name!r} is not one of its "
                             f"columns: {', '.join(map(str, self.frame.columns))}")


@dataclass
class Plot:
    """A labelled plot: one (x, y) series per legend entry.

    ``style`` is "line" (markers joined), "scatter" or "stacked" (stacked bars, one
    series per stacked component, x categorical; ``points`` marks measured totals on
    them). ``diagonal`` draws y = x. ``dots`` are extra (x, y) points drawn small and
    faint (e.g. every sample behind a median line), ``xticks`` labels x = 0, 1, ...
    (e.g. commit hashes), ``marks`` draws a dashed vertical line at each x, and ``small``
    makes a thumbnail-sized figure. ``styles`` gives each series its (colour, marker),
    filled from the report's palette (:mod:`mhabench.report.render.palette`) before rendering.

    ``facets`` makes the plot small multiples: each facet (a plot with its own title, axes
    and series; ``small`` ones in more columns) is a panel of one figure, under one legend
    in the plot's ``styles``; the plot's own ``series`` then stays empty. One figure for a
    family of views (a residual against each field) spares a legend and axes per view.
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
    dots: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    xticks: list[str] | None = None
    marks: list[float] = field(default_factory=list)
    small: bool = False
    styles: dict[str, tuple[str, str]] = field(default_factory=dict)
    facets: list[Plot] = field(default_factory=list)


@dataclass
class Finding:
    """One answer of the findings section: the question, the section holding its evidence
    (an id) and one line per machine (machine name -> text; absent: no data there)."""

    question: str
    target: str
    answers: dict[str, str]


@dataclass
class Section:
    id: str
    title: str
    text: list[str] = field(default_factory=list)  # findings, one paragraph each
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    absent: str | None = None  # one line saying which data is missing, instead of content
    findings: list[Finding] = field(default_factory=list)  # the findings section's rows
    # what a builder computed that the findings read (not rendered): e.g. the verdicts
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    title: str
    results_root: str
    sections: list[Section]
    warnings: list[str]
