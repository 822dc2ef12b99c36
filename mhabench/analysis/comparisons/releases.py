"""A release sweep's numbers: each cell's time at each release of a list, each pair of
adjacent releases compared with the gate's statistics, and the release where each change
happened (:func:`cell_summary`); and the sweep's summary (``releases.json``, written by
``mhabench releases`` beside its results) read into tables and a Findings line.

A release's time is the median of its fast processes (within the statistic's margin of
its fastest), as a comparison's ratio is: the machine's slow mode does not count. A step
from one release to the next is :func:`~mhabench.analysis.comparisons.process_compare.compare` of
their processes and its :func:`~mhabench.analysis.comparisons.process_compare.verdict`; a release
where the cell failed is passed over, so its step runs from the last release that timed
it. The first release against the last is kept too: a drift of small steps shows there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.comparisons.process_compare import compare, fast_level, verdict

SUMMARY = "releases.json"
CHANGED = ("slower", "faster")


def level(medians: Sequence[float] | None) -> float | None:
    """A release's time (seconds): the median of its fast processes."""
    values = [m for m in medians or () if math.isfinite(m) and m > 0]
    return float(np.exp(fast_level(np.log(values)))) if values else None


def step(before: str, after: str, base: Sequence[float], new: Sequence[float],
         kernels: dict[str, str | None]) -> dict[str, Any]:
    """``after`` against ``before``: the comparison, its verdict, its modes where the cell
    has several, and the kernel each ran."""
    result = compare(base, new)
    return {"from": before, "to": after, "verdict": verdict(result), **result.as_dict(),
            "modes_text": result.describe_modes() if len(result.modes) > 1 else None,
            "kernel_from": kernels.get(before), "kernel_to": kernels.get(after)}


def cell_summary(cell: str, by: dict[str, list[float] | None], labels: Sequence[str],
                 kernels: dict[str, str | None]) -> dict[str, Any]:
    """One cell of a sweep from its process medians at each release (``by``: label ->
    medians, None where it failed, absent where the grid skips it), the releases in order
    (``labels``) and the kernel each ran."""
    timed = [label for label in labels if by.get(label) and len(by[label]) >= 2]
    steps = [step(a, b, by[a], by[b], kernels)  # type: ignore[arg-type]
             for a, b in zip(timed, timed[1:], strict=False)]
    overall = (step(timed[0], timed[-1], by[timed[0]], by[timed[-1]], kernels)  # type: ignore[arg-type]
               if len(timed) >= 2 else None)
    return {"cell": cell, "times": {label: level(by.get(label)) for label in labels},
            "failed": [label for label in labels if label in by and by[label] is None],
            "kernels": {label: kernels.get(label) for label in labels},
            "steps": steps, "overall": overall,
            "processes": {label: by[label] for label in labels if label in by}}


def changes(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step of every cell whose verdict is a change, in the cells' order."""
    return [{"cell": cell["cell"], **s} for cell in summary["cells"] for s in cell["steps"]
            if s["verdict"] in CHANGED]


def load_summary(folder: str | Path) -> dict[str, Any] | None:
    """The summary of a sweep's folder, or of the one holding a results folder (None where
    there is none; ValueError naming the file where it is not readable)."""
    folder = Path(folder)
    for path in (folder / SUMMARY, folder.parent / SUMMARY):
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: not readable JSON ({err})") from err
            if not isinstance(data, dict) or "cells" not in data or "releases" not in data:
                raise ValueError(f"{path}: not a release sweep's summary (no cells or "
                                 "releases)")
            return data
    return None


def labels(summary: dict[str, Any]) -> list[str]:
    return [release["label"] for release in summary["releases"]]


def short_cell(cell: str) -> str:
    """"MhaGqaMqa(jax, fused, 2, 512, ...)" for asv's "bench_gqa.MhaGqaMqa.time_step('jax',
    'fused', 2, 512, ...)": the class, and the method where it is not ``time_step``."""
    name, _, params = cell.partition("(")
    parts = name.split(".")
    head = parts[-2] if len(parts) >= 2 and parts[-1] == "time_step" else ".".join(parts[-2:])
    return f"{head}({params.replace(chr(39), '')}" if params else head


def times_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per cell: its time at each release (ms), last/first and its changes."""
    names = labels(summary)
    rows = []
    for cell in summary["cells"]:
        overall = cell.get("overall") or {}
        rows.append({"cell": cell["cell"],
                     **{f"{label} (ms)": None if cell["times"].get(label) is None
                        else cell["times"][label] * 1e3 for label in names},
                     "last/first": overall.get("ratio"),
                     "changes": sum(s["verdict"] in CHANGED for s in cell["steps"]),
                     "failed at": ", ".join(cell.get("failed") or [])})
    return pd.DataFrame(rows, columns=["cell", *(f"{label} (ms)" for label in names),
                                       "last/first", "changes", "failed at"])


def changes_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per change between adjacent releases (slower or faster)."""
    rows = [{"cell": c["cell"], "at": c["to"], "from": c["from"], "verdict": c["verdict"],
             "ratio": c["ratio"], "interval low": c["low"], "interval high": c["high"],
             "processes": f"{c['base_processes']}/{c['new_processes']}",
             "kernel from": c.get("kernel_from"), "kernel to": c.get("kernel_to"),
             "modes": c.get("modes_text") or ""} for c in changes(summary)]
    return pd.DataFrame(rows, columns=["cell", "at", "from", "verdict", "ratio",
                                       "interval low", "interval high", "processes",
                                       "kernel from", "kernel to", "modes"])


def kernels_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """The cells whose kernel differs between releases: the kernel each release ran."""
    names = labels(summary)
    rows = [{"cell": cell["cell"], **{label: cell["kernels"].get(label) for label in names}}
            for cell in summary["cells"]
            if len({k for k in cell["kernels"].values() if k is not None}) > 1]
    return pd.DataFrame(rows, columns=["cell", *names])


def compile_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """The compile-time cells' seconds at each release: one process a release, no
    verdict."""
    names = labels(summary)
    rows = [{"cell": row["cell"], **{f"{label} (s)": row["seconds"].get(label)
                                     for label in names}}
            for row in summary.get("compile_seconds", [])]
    return pd.DataFrame(rows, columns=["cell", *(f"{label} (s)" for label in names)])


def packages_frame(summary: dict[str, Any]) -> pd.DataFrame:
    """What each release had installed, read back from its environment."""
    names = sorted({n for r in summary["releases"] for n in (r.get("versions") or {})})
    return pd.DataFrame([{"package": n, **{r["label"]: (r.get("versions") or {}).get(n)
                                           for r in summary["releases"]}} for n in names],
                        columns=["package", *labels(summary)])


def what(summary: dict[str, Any]) -> str:
    """"jax 0.9.2 to 0.10.2 (4 releases)": the package the releases differ in, and their
    span."""
    names = labels(summary)
    package = summary.get("package") or "releases"
    return f"{package} {names[0]} to {names[-1]} ({len(names)} releases)"


def finding(summary: dict[str, Any], shown: int = 3) -> str:
    """One line: the largest changes and where they happened, then the counts."""
    found = changes(summary)
    cells = summary["cells"]
    text = f"{what(summary)} at {summary['commit'][:8]}: "
    if found:
        top = sorted(found, key=lambda c: -abs(math.log(c["ratio"])))[:shown]
        text += ", ".join(f"{short_cell(c['cell'])} {c['ratio']:.2f}x at {c['to']}"
                          for c in top)
        text += (f"{' ...' if len(found) > shown else ''}; {len(found)} change(s) in "
                 f"{len({c['cell'] for c in found})} cell(s) "
                 f"({sum(c['verdict'] == 'slower' for c in found)} slower)")
    else:
        text += "no change between adjacent releases"
    unchanged = sum(not any(s["verdict"] in CHANGED for s in c["steps"]) for c in cells)
    text += f"; {unchanged} of {len(cells)} cell(s) unchanged at every step"
    kernels = len(kernels_frame(summary))
    return text + (f"; kernel changed in {kernels}" if kernels else "") + "."


def cell_order(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells, those that moved most from first to last release first."""
    def moved(cell: dict[str, Any]) -> float:
        ratio = (cell.get("overall") or {}).get("ratio")
        return -abs(math.log(ratio)) if ratio else 0.0

    return sorted(summary["cells"], key=lambda c: (moved(c), c["cell"]))
