"""A versions comparison's summary (``versions.json``, written by ``mhabench versions``
beside its results) read into tables: one row per cell with its verdict, ratio, interval
and the kernel each side ran, and the compile times of the two sides (readings, not
judged)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

SUMMARY = "versions.json"
VERDICTS = ("failed on new", "slower", "failed on base", "faster", "cleared", "unchanged",
            "failed on both", "not timed")


def load_summary(folder: str | Path) -> dict[str, Any] | None:
    """The summary of a versions folder, or of the one holding a results folder (None
    where there is none; ValueError naming the file where it is not readable)."""
    folder = Path(folder)
    for path in (folder / SUMMARY, folder.parent / SUMMARY):
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: not readable JSON ({err})") from err
            if not isinstance(data, dict) or "cells" not in data or "sides" not in data:
                raise ValueError(f"{path}: not a versions summary (no cells or sides)")
            return data
    return None


def side_label(summary: dict[str, Any], side: str) -> str:
    """A side as people name it: its pins and local packages; a side that pins nothing by
    the versions it had of what the other side pins ("jax 0.10.2 (the project's pins)")."""
    info = summary["sides"][side]
    if info.get("pins") or info.get("local"):
        return info.get("describe") or side
    other = summary["sides"]["new" if side == "base" else "base"].get("pins") or {}
    had = info.get("versions") or {}
    named = [f"{name} {had[name]}" for name in other if had.get(name)]
    return ", ".join(named) + " (the project's pins)" if named else "the project's pins"


def cells_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per cell, the worst verdicts first."""
    rows = []
    for cell in summary["cells"]:
        name = cell["cell"]
        final = cell.get("confirm") or cell.get("screen") or {}
        rows.append({"verdict": cell["verdict"], "cell": name,
                     "new/base": cell.get("ratio"),
                     "interval low": cell.get("low"), "interval high": cell.get("high"),
                     "processes a side": (f"{final.get('base_processes')}/"
                                          f"{final.get('new_processes')}" if final else ""),
                     "kernel base": cell.get("kernel_base"),
                     "kernel new": cell.get("kernel_new"),
                     "kernel changed": bool(cell.get("kernel_changed"))})
    frame = pd.DataFrame(rows, columns=["verdict", "cell", "new/base", "interval low",
                                        "interval high", "processes a side", "kernel base",
                                        "kernel new", "kernel changed"])
    order = {v: i for i, v in enumerate(VERDICTS)}
    key = frame["verdict"].map(lambda v: order.get(v, len(order)))
    return frame.assign(_k=key).sort_values(["_k", "cell"]).drop(columns="_k").reset_index(
        drop=True)


def compile_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """The compile-time cells' seconds on each side: one process a side, so no ratio (two
    readings carry no verdict)."""
    rows = [{"cell": row["cell"], "base (s)": row.get("base"), "new (s)": row.get("new")}
            for row in summary.get("compile_seconds", [])]
    return pd.DataFrame(rows, columns=["cell", "base (s)", "new (s)"])


def finding(summary: dict[str, Any]) -> str:
    """One line: the new side against the base, cells slower (worst), faster, unchanged,
    kernels changed."""
    frame = cells_frame(summary)
    counts = frame["verdict"].value_counts()
    slower = frame[frame["verdict"] == "slower"]
    text = (f"{side_label(summary, 'new')} against {side_label(summary, 'base')} at "
            f"{summary['commit'][:8]}: {counts.get('slower', 0)} cell(s) slower")
    if len(slower):
        worst = slower.loc[slower["new/base"].idxmax()]
        text += f", worst {worst['new/base']:.2f}x at {worst['cell']}"
    text += (f"; {counts.get('faster', 0)} faster; "
             f"{counts.get('unchanged', 0) + counts.get('cleared', 0)} unchanged")
    failed = int(frame["verdict"].str.startswith("failed").sum())
    if failed:
        text += f"; {failed} failed on one side"
    changed = int(frame["kernel changed"].sum())
    text += f"; kernel changed in {changed}"
    return text + "."
