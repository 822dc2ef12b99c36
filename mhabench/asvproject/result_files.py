"""Reading asv's results files: a file's rows by benchmark, a row's cells as asv names them,
the cells an ``asv run -b`` selects, and whether a value was measured. The merge, the
shards, the gate and the versions comparison all read results through these."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

BENCHMARKS = "benchmarks.json"  # asv's listing of the suite, beside the machine folders


def result_rows(data: dict) -> dict[str, dict]:
    """An asv results file's rows: benchmark -> {column: value} (trailing columns asv
    dropped read as missing)."""
    columns = data["result_columns"]
    return {name: dict(zip(columns, values, strict=False))
            for name, values in data.get("results", {}).items()}


def cell_names(name: str, row: dict) -> list[str]:
    """A row's cells as asv names them (``name(repr, ...)``), in its values' order."""
    params = row.get("params") or []
    if not params:
        return [name]
    return [f"{name}({', '.join(c)})" for c in itertools.product(*params)]


def selected_cells(listing: dict, name: str, regexes: Sequence[str]) -> list[str]:
    """The cells of benchmark ``name`` in asv's ``benchmarks.json`` (``listing``) that
    ``asv run -b REGEX ...`` runs, selected as asv selects them: a regex found anywhere in
    the cell's name (``name(params)``); every cell where no regex is given."""
    entry = listing.get(name)
    if not isinstance(entry, dict):
        return []
    return [cell for cell in cell_names(name, entry)
            if not regexes or any(re.search(regex, cell) for regex in regexes)]


def measured(value: object) -> bool:
    """A number: neither failed (None) nor n/a (NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))
