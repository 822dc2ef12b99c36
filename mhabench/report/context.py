"""What every section builder reads (:class:`Context`), and the helpers several builders
share: naming a config's shape, finding head sweeps, plotting them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.regressions import Order
from mhabench.analysis.results import Results, calibration_table
from mhabench.analysis.timemodel import GROUP_KEY, Key, TimeModel
from mhabench.report.types import Plot

# Everything that names a head sweep except h (MHA: kv_heads follows h).
SWEEP_KEY = ("machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "m",
             "d", "cross", "masked", "dropout")
CONFIG_KEY = (*SWEEP_KEY, "heads", "kv_heads")
MAX_PLOTS = 6


@dataclass
class Context:
    results: Results
    timings: pd.DataFrame  # newest commit per machine, one row per timed config
    calibration: pd.DataFrame  # machine, framework, device, peak_gflops, bandwidth_gbs
    models: dict[Key, TimeModel]
    traces: pd.DataFrame | None
    threshold: float
    underdetermined: dict[Key, int] | None = None  # groups too small to fit: their cells
    order: Order | None = None  # commit order for the regression sections
    validation: dict[str, Any] | None = None  # what mhabench validate --save wrote
    # the machine's load while cells timed: (commit, env, asv cell) -> CellLoad
    loads: dict[tuple[str, str, str], Any] | None = None
    # re-measured steps (mhabench confirm): (machine, asv cell, before, after) -> verdict
    confirmations: dict[tuple[str, str, str, str], Any] | None = None

    @classmethod
    def from_results(cls, results: Results, cells: pd.DataFrame,
                     models: dict[Key, TimeModel], traces: pd.DataFrame | None,
                     threshold: float, **extra: Any) -> Context:
        """``cells``: ``timing_cells(results.frame)``, computed once per report."""
        timings = cells.copy()
        if not timings.empty:
            timings["time_ms"] = timings["value"] * 1e3
        return cls(results, timings, calibration_table(results.frame), models, traces,
                   threshold, **extra)


def shape(row: Any) -> str:
    """A compact name for a config's shape: b8 n512 m512 d256 (+ cross/masked)."""
    text = f"b{row['batch']} n{row['n']} m{row['m']} d{row['d']}"
    return text + (" cross" if row["cross"] else "") + (" masked" if row["masked"] else "")


def group_key(key: dict[str, Any]) -> Key:
    return tuple(str(key[k]) for k in GROUP_KEY)


def head_sweeps(timings: pd.DataFrame) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """MHA head sweeps: cells that differ only in h, at least two head counts."""
    if timings.empty:
        return []
    mha = timings[timings["kv_heads"] == timings["heads"]]
    out = []
    for key, group in mha.groupby(list(SWEEP_KEY), sort=True, dropna=False):
        if group["heads"].nunique() >= 2:
            out.append((dict(zip(SWEEP_KEY, key, strict=True)), group.sort_values("heads")))
    return out


def is_chapter(key: dict[str, Any]) -> bool:
    return (key["batch"], key["n"], key["d"], key["mode"]) == (8, 512, 256, "forward")


def sweep_plots(sweeps: list[tuple[dict[str, Any], pd.DataFrame]], ylabel: str,
                values: Callable[[pd.DataFrame], list[float]], title: str) -> list[Plot]:
    """One log-log plot per sweep shape, one line per framework/backend."""
    panels: dict[tuple, Plot] = {}
    for key, group in sweeps:
        panel = (key["machine"], key["device"], key["dtype"], key["mode"], shape(key))
        if panel not in panels:
            if len(panels) >= MAX_PLOTS:
                continue
            panels[panel] = Plot(f"{title}: {key['machine']} {key['device']} {key['dtype']} "
                                 f"{key['mode']}, {shape(key)}", "heads h", ylabel, {},
                                 logx=True, logy=True)
        panels[panel].series[f"{key['framework']}/{key['backend']}"] = (
            group["heads"].astype(float).tolist(), values(group))
    return list(panels.values())


def peaks(ctx: Context, frame: pd.DataFrame) -> pd.Series:
    """Each row's calibrated matmul peak (GFLOP/s), NaN where none was measured."""
    if ctx.calibration.empty:
        return pd.Series(np.nan, index=frame.index)
    merged = frame.merge(ctx.calibration, how="left",
                         on=["machine", "framework", "device", "dtype"])
    return pd.Series(merged["peak_gflops"].to_numpy(dtype=float), index=frame.index)
