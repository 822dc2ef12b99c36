"""Timings read at the machine's fast speed: the moment's slowness taken out.

A shared host runs the same step slower in some stretches than in others
(:mod:`mhabench.measure.conditions.speed`), and a grid cell is one process timed over a fraction
of a second. Each asv timing process records the machine's speed probe before and after
its samples (:mod:`mhabench.measure.conditions.machine_load`). A cell's *slowdown* is that probe
over the machine's fast reading (:func:`mhabench.measure.conditions.speed.fast_reference` of the
probes of all its time cells); the time model is fitted on ``value / slowdown``
(:func:`mhabench.analysis.prediction.timemodel.timing_cells`), and ``mhabench validate`` divides its
own timings by the slowdown its probes read against the same reference, so the model and
the measurements it is checked against are both read at the machine's fast speed.

Cells without probes (records written before them, or none at all) keep slowdown 1; a
machine none of whose cells has a probe gets no reference, and nothing is divided on
either side.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from mhabench.measure.conditions.machine_load import CellLoad
from mhabench.measure.conditions.speed import fast_reference, slowdown

SLOWDOWN = "slowdown"  # the frame's column: 1 where no probe was recorded


def beside_results(results: str | Path, name: str) -> Path:
    """The folder ``name`` beside an asv results folder (``.asv/load`` for
    ``.asv/results``): where mhabench keeps what it adds to asv's results."""
    return Path(results).resolve().parent / name


def add_slowdown(frame: pd.DataFrame, loads: Mapping[tuple[str, str, str], CellLoad]
                 ) -> tuple[pd.DataFrame, dict[str, float]]:
    """``frame`` with the :data:`SLOWDOWN` column for its time rows (1 elsewhere), and
    each machine's fast probe reading (machines without probes are absent)."""
    out = frame.copy()
    out[SLOWDOWN] = 1.0
    if out.empty:
        return out, {}
    timed = out.index[out["kind"] == "time"]
    probes = pd.Series([
        getattr(loads.get((str(c), str(e), str(a))), "probe_s", None)
        for c, e, a in zip(out.loc[timed, "commit"], out.loc[timed, "env_name"],
                           out.loc[timed, "asv_cell"], strict=True)], index=timed, dtype=float)
    references = {}
    for machine, rows in probes.groupby(out.loc[timed, "machine"]):
        known = rows.dropna()
        if known.empty:
            continue
        references[str(machine)] = reference = fast_reference(known.to_numpy())
        out.loc[known.index, SLOWDOWN] = [slowdown(p, reference) for p in known]
    return out, references


def fast_values(cells: pd.DataFrame) -> np.ndarray:
    """The cells' values divided by their slowdown (the values as they are without the
    column)."""
    values = cells["value"].to_numpy(dtype=float)
    if SLOWDOWN not in cells.columns:
        return values
    return values / cells[SLOWDOWN].fillna(1.0).to_numpy(dtype=float)


# A grid whose cells' probes read a 90th percentile past this was timed in bursts, which
# the probes (2 ms before and after a cell's samples) catch only in part: whole classes
# then run slow beyond their probes, and the fit suffers (docs/research.md).
BURSTY_P90 = 1.3


def grid_steadiness(frame: pd.DataFrame) -> pd.DataFrame:
    """Per machine, the slowdowns of the newest measurement of each time cell (1 where the
    probe read the fast speed or no probe was recorded): cells, median, 90th percentile
    and whether that percentile passes :data:`BURSTY_P90`. A machine none of whose cells
    read a slowdown (no probes) is left out."""
    from mhabench.analysis.results import latest

    columns = ["machine", "cells", "median slowdown", "90th percentile", "bursty"]
    rows = []
    if SLOWDOWN in frame.columns and not frame.empty:
        cells = latest(frame[frame["kind"] == "time"])
        for machine, g in cells.groupby("machine", sort=True):
            read = g[SLOWDOWN].fillna(1.0).to_numpy(dtype=float)
            if not (read > 1.0).any():
                continue
            p90 = float(np.percentile(read, 90))
            rows.append([str(machine), len(read), float(np.median(read)), p90,
                         p90 > BURSTY_P90])
    return pd.DataFrame(rows, columns=columns)
