"""What every section builder reads (:class:`Context`), and the helpers several builders
share: naming a config's shape, finding head sweeps, plotting them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.history.regressions import Order
from mhabench.analysis.prediction.timemodel import GROUP_KEY, Key, TimeModel
from mhabench.analysis.results import Results, calibration_table
from mhabench.analysis.tracks import kernel_table
from mhabench.core.grids import CHAPTER_SHAPE
from mhabench.report.types import Plot

# Everything that names a head sweep except h (MHA: kv_heads follows h).
SWEEP_KEY = ("machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "m",
             "d", "cross", "masked", "dropout")
CONFIG_KEY = (*SWEEP_KEY, "heads", "kv_heads")
MAX_PLOTS = 6
MIN_SWEEP = 3  # fewer values than this are a comparison, not a sweep: not drawn as a line
# Exercise 6.4: the chapter's shape, forward
CHAPTER_SWEEP = {**CHAPTER_SHAPE.fields(), "mode": "forward"}


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
    validations: list[dict[str, Any]] = field(default_factory=list)  # validate --save files
    # the machine's load while cells timed: (commit, env, asv cell) -> CellLoad
    loads: dict[tuple[str, str, str], Any] | None = None
    # re-measured shifts (mhabench confirm): (machine, asv cell, before, after) -> verdict
    confirmations: dict[tuple[str, str, str, str], Any] | None = None
    kernels: pd.DataFrame | None = None  # kernel_table: what each fused/reference cell ran

    @classmethod
    def from_results(cls, results: Results, cells: pd.DataFrame,
                     models: dict[Key, TimeModel], traces: pd.DataFrame | None,
                     threshold: float, **extra: Any) -> Context:
        """``cells``: ``timing_cells(results.frame)``, computed once per report."""
        timings = cells.copy()
        if not timings.empty:
            timings["time_ms"] = timings["value"] * 1e3
        return cls(results, timings, calibration_table(results.frame), models, traces,
                   threshold, **extra, kernels=kernel_table(results.frame))

    def writes_map(self, machine: str, framework: str, backend: str, device: str) -> bool:
        """Whether this backend's shifts on ``machine`` write the attention map: the kernel
        most of its recorded cells ran, else the one its description predicts."""
        from mhabench.core.config import AttentionConfig
        from mhabench.core.kernel_codes import expected_kernel, materialises

        k = self.kernels if self.kernels is not None else pd.DataFrame()
        if len(k):
            k = k[(k["machine"] == machine) & (k["framework"] == framework)
                  & (k["backend"] == backend) & (k["device"] == device)]
        if len(k) and k["writes map"].notna().any():
            return bool(k["writes map"].dropna().astype(bool).mean() >= 0.5)
        try:
            config = AttentionConfig(framework=framework, backend=backend, device=device)
        except ValueError:  # a backend no longer registered: the map is the safe guess
            return True
        return materialises(expected_kernel(config))

    def score_term(self, machine: str, framework: str, backend: str, device: str) -> str:
        """What the time model's b*h*n*m term counts for this backend on ``machine``."""
        from mhabench.core.kernel_codes import SCORE_TERMS

        return SCORE_TERMS[self.writes_map(machine, framework, backend, device)]


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


def sweep_id(key: dict[str, Any]) -> tuple:
    """What names one head sweep (every field but h)."""
    return tuple(key[k] for k in SWEEP_KEY)


def is_chapter(key: dict[str, Any]) -> bool:
    return all(key[k] == v for k, v in CHAPTER_SWEEP.items())


SHAPE_KEY = ("machine", "device", "dtype", "mode", "batch", "n", "m", "d", "cross", "masked",
             "dropout")


def exercise_sweeps(sweeps: list[tuple[dict[str, Any], pd.DataFrame]]
                    ) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """The head sweeps that answer Exercise 6.4 on each machine: the chapter's shape (batch
    8, n 512, d 256, forward) where it was timed, else the forward shape swept over the most
    head counts (at least :data:`MIN_SWEEP`; then the widest batch*n*d), per device and
    dtype, float32 first; every framework/backend timed at that shape."""
    def rank(key: dict[str, Any], group: pd.DataFrame) -> tuple:
        return (is_chapter(key), key["mode"] == "forward" and not key["cross"]
                and not key["masked"], group["heads"].nunique(),
                key["batch"] * key["n"] * key["d"])

    best: dict[tuple, tuple] = {}
    for key, group in sweeps:
        if group["heads"].nunique() < MIN_SWEEP:
            continue
        where = (key["machine"], key["device"], key["dtype"])
        shape_of = tuple(key[k] for k in SHAPE_KEY)
        score = rank(key, group)
        if where not in best or score > best[where][0]:
            best[where] = (score, shape_of)
    chosen = {v[1] for v in best.values()}
    picked = [(k, g) for k, g in sweeps if tuple(k[s] for s in SHAPE_KEY) in chosen
              and g["heads"].nunique() >= MIN_SWEEP]
    return sorted(picked, key=lambda kg: (kg[0]["machine"], kg[0]["dtype"] != "float32",
                                          kg[0]["dtype"], kg[0]["framework"],
                                          kg[0]["backend"]))


def sweep_plots(sweeps: list[tuple[dict[str, Any], pd.DataFrame]], ylabel: str,
                values: Callable[[pd.DataFrame], list[float]], title: str) -> list[Plot]:
    """One log-log plot per sweep shape, one line per framework/backend; a sweep of fewer
    than :data:`MIN_SWEEP` head counts is left out (two points are no trend)."""
    panels: dict[tuple, Plot] = {}
    for key, group in sweeps:
        if group["heads"].nunique() < MIN_SWEEP:
            continue
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
