"""What a report is made of: data only, no computation and no rendering.

A :class:`Section` holds tables as DataFrames, plots as :class:`Plot` specs and findings
as plain text, so every number in the HTML is also in the Markdown and CSV exports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


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
    them). ``diagonal`` draws y = x. ``dots`` are extra (x, y) points drawn small and
    faint (e.g. every sample behind a median line), ``xticks`` labels x = 0, 1, ...
    (e.g. commit hashes), ``marks`` draws a dashed vertical line at each x, and ``small``
    makes a thumbnail-sized figure.
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
