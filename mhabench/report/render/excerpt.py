"""Which rows of a table the HTML and Markdown pages show, and where the rest are.

A summary table is shown whole. A per-cell table (``Table.detail``) grows with the grid,
so the pages show at most :data:`MAX_SHOWN_ROWS` of its rows, the worst first by its
``rank`` column (its first rows where it has none), and point to its CSV file, which
holds every row. The findings and the CSV exports read the table's whole frame; only
the pages are cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import pandas as pd

from mhabench.report.types import Section, Table

# Rows of a per-cell table the pages show: enough to see the worst cells and their
# pattern; a long table's bytes are most of a report's size.
MAX_SHOWN_ROWS = 15


@dataclass
class Excerpt:
    """The rows a page shows of one table, how many it leaves to the CSV and, where the
    rows were ranked, how ("largest |residual (%)| first")."""

    frame: pd.DataFrame
    hidden: int
    order: str = ""


def _key(values: pd.Series, order: str) -> pd.Series:
    """Larger is worse: the sort key of each rank order (:data:`~.types.RANK_ORDERS`)."""
    x = pd.to_numeric(values, errors="coerce").astype(float)
    if order == "high":
        return x
    if order == "low":
        return -x
    if order == "far from 0":
        return x.abs()
    with np.errstate(divide="ignore", invalid="ignore"):  # a ratio: far from 1 either way
        return pd.Series(np.abs(np.log(x.where(x > 0))), index=x.index)


def order_text(table: Table) -> str:
    """How the shown rows were ranked, for a caption; "" for a table in its own order."""
    if table.rank is None:
        return ""
    return {"high": f"highest {table.rank} first", "low": f"lowest {table.rank} first",
            "far from 0": f"largest |{table.rank}| first",
            "far from 1": f"{table.rank} farthest from 1 first"}[table.rank_order]


def excerpt(table: Table, limit: int = MAX_SHOWN_ROWS) -> Excerpt:
    """A summary table whole; a per-cell one's worst ``limit`` rows (rows without a value
    in the rank column last, ties in the table's order)."""
    frame = table.frame
    if not table.detail or len(frame) <= limit:
        return Excerpt(frame, 0)
    if table.rank is None:
        return Excerpt(frame.head(limit), len(frame) - limit)
    key = _key(frame[table.rank], table.rank_order).reset_index(drop=True)
    worst = key.sort_values(ascending=False, na_position="last", kind="stable").index
    ranked = key.notna().any()  # a column of n/a ranks nothing: the first rows
    return Excerpt(frame.iloc[worst[:limit]], len(frame) - limit,
                   order_text(table) if ranked else "")


def csv_name(section: Section, table: Table) -> str:
    """The CSV file a table is written to, in the report's ``NAME_tables/`` folder."""
    return f"{section.id}--{table.name}.csv"


def csv_href(section: Section, table: Table, tables_dir: str) -> str:
    """The table's CSV relative to the page (``tables_dir``: the CSV folder's name beside
    it; "" for the file name alone), quoted for a link."""
    name = csv_name(section, table)
    return quote(f"{tables_dir}/{name}" if tables_dir else name)
