"""A calibrated time model: measured time as a non-negative sum of cost-model terms.

For one machine x framework x backend x device x dtype, a config's time is modelled as

    t = c_flops * flops_model + c_map * map_elements + c_spill * spilled_map_elements
        + c_kv * kv_elements + c_kv_spill * spilled_kv_elements + c_heads * heads + c_const

``flops_model`` is the chapter's FLOP count, ``map_elements`` the ``batch * h * n * m``
attention-map elements each step writes and reads, ``spilled_map_elements`` the same count
for steps whose map is larger than a cache size (0 otherwise: an element that spills to
memory costs more than one that stays in cache), ``kv_elements`` the key and value
elements the attention step reads (``batch * m * 2 * width``: in a decode step the KV
cache itself, which the FLOP count leaves out entirely, since a one-token step is bound by
reading the cache, not by its few FLOPs; ``width`` is the key/value width ``h_kv * d/h``,
or ``d`` for backends that materialise K/V repeated to every query head, see
:data:`REPEATS_KV`), ``spilled_kv_elements`` the same count for decode steps whose stored
K/V cache (``batch * m * 2 * h_kv * d/h`` elements) is larger than a cache size (a decode
step re-reads the cache every call; it stays in a CPU cache between calls only while it
fits; forward K/V are fresh activations), ``heads`` a fixed cost per head (dispatch,
kernel launches); a training step multiplies the map, K/V and head terms by the cost model's
``TRAIN_FACTOR`` as it does the FLOPs. The map's cache size is calibrated per
group too: the fit tries each of :data:`CACHE_CANDIDATES` (and none) and keeps the one
with the smallest relative residuals. The K/V cache size is a machine's, chosen the same
way over all its groups together (:func:`fit_machine`); few decode cells per group could
otherwise pick one by chance. The
coefficients are fitted by non-negative least squares on *relative* residuals (each row
divided by its measured time), so a 2 ms cell counts as much as a 2 s one. The same
model splits a head sweep's time into its terms (:func:`decompose`), and
:func:`leave_out` measures its accuracy on cells left out of the fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mhabench.config import DTYPE_BYTES, AttentionConfig
from mhabench.cost import TRAIN_FACTOR, cost
from mhabench.results import config_from_row, latest

FEATURES = ("flops", "map", "spill", "kv", "kv_spill", "heads", "const")
FEATURE_LABELS = {"flops": "FLOPs (flops_model)", "map": "attention map (batch*h*n*m)",
                  "spill": "attention map beyond cache",
                  "kv": "keys/values read (batch*m*2*width)",
                  "kv_spill": "keys/values beyond cache", "heads": "per-head fixed cost",
                  "const": "fixed per call"}
# Backends whose grouped-query path copies each key/value head to its g query heads
# (torch repeat_interleave, jnp.repeat) before the batched matmuls, so the attention reads
# h-wide keys/values whatever h_kv is. The loop backends index the shared head and fused
# kernels take grouped K/V directly: they read the h_kv-wide tensors.
REPEATS_KV = frozenset({"batched"})
# Map sizes (bytes of one batch*h*n*m map) the spill term may start at: 1 MiB to 1 GiB.
CACHE_CANDIDATES = tuple(2**k * 2**20 for k in range(11))
GROUP_KEY = ("machine", "framework", "backend", "device", "dtype")
FOLDS = 5


def nnls(A: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """min ||A x - b||_2 subject to x >= 0 (Lawson and Hanson's active-set method).

    Columns are scaled to unit norm first: the features differ by ten orders of
    magnitude (FLOPs vs a constant), which would otherwise swamp the tolerances.
    """
    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    A = A / norms
    n = A.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * max(A.shape) * max(1.0, np.abs(A).sum(axis=0).max())
    for _ in range(max_iter or 3 * n + 10):
        w = A.T @ (b - A @ x)
        if passive.all() or w[~passive].max() <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if s[passive].min() > tol:
                break
            # Step back towards the old x until a passive coefficient reaches zero.
            shrink = passive & (s <= tol)
            alpha = np.min(x[shrink] / (x[shrink] - s[shrink]))
            x = x + alpha * (s - x)
            passive &= x > tol
        x = s
    return x / norms


def feature_values(config: AttentionConfig, cache_bytes: float | None = None,
                   kv_cache_bytes: float | None = None) -> dict[str, float]:
    """The model's features for one config (see the module docstring); no spill term
    when ``cache_bytes`` is None, no K/V spill term when ``kv_cache_bytes`` is None."""
    terms = cost(config)
    factor = TRAIN_FACTOR if config.mode == "train" else 1
    elements = float(terms.attention_map_elements * factor)
    map_bytes = terms.attention_map_elements * DTYPE_BYTES[config.dtype]
    spills = cache_bytes is not None and map_bytes > cache_bytes
    width = config.d if config.backend in REPEATS_KV else config.kv_heads * config.head_dim
    kv = float(config.batch * config.m * 2 * width * factor)
    # A decode step re-reads the stored K/V cache (h_kv wide) every call: it stays in a
    # cache between calls only while it fits. Forward K/V are fresh activations.
    stored = config.batch * config.m * 2 * config.kv_heads * config.head_dim
    kv_spills = (config.mode == "decode" and kv_cache_bytes is not None
                 and stored * DTYPE_BYTES[config.dtype] > kv_cache_bytes)
    return {"flops": float(terms.flops_model), "map": elements,
            "spill": elements if spills else 0.0, "kv": kv,
            "kv_spill": kv if kv_spills else 0.0,
            "heads": float(config.heads * factor), "const": 1.0}


def feature_matrix(cells: pd.DataFrame, cache_bytes: float | None = None,
                   kv_cache_bytes: float | None = None) -> np.ndarray:
    """One row of :data:`FEATURES` per cell (cells hold the config columns)."""
    rows = [feature_values(config_from_row(r), cache_bytes, kv_cache_bytes)
            for r in cells.to_dict("records")]
    return np.array([[r[f] for f in FEATURES] for r in rows],
                    dtype=float).reshape(-1, len(FEATURES))


def r_squared(measured: np.ndarray, predicted: np.ndarray) -> float:
    total = float(np.sum((measured - measured.mean()) ** 2))
    if total == 0:
        return float("nan")
    return 1.0 - float(np.sum((measured - predicted) ** 2)) / total


@dataclass(frozen=True)
class TimeModel:
    """Fitted coefficients (seconds per unit of each feature) for one group of cells."""

    key: tuple[str, ...]  # values of GROUP_KEY
    coef: dict[str, float]
    cache_bytes: float | None  # map size beyond which the spill term applies
    kv_cache_bytes: float | None  # K/V size beyond which the K/V spill term applies
    cells: int
    r2: float
    median_rel_error: float  # in-sample
    separable: bool  # map and per-head terms distinguishable (several batch*n*m)
    loss: float  # sum of squared relative residuals, in-sample

    def terms(self, config: AttentionConfig) -> dict[str, float]:
        values = feature_values(config, self.cache_bytes, self.kv_cache_bytes)
        return {f: self.coef[f] * values[f] for f in FEATURES}

    def predict(self, config: AttentionConfig) -> float:
        return sum(self.terms(config).values())

    def as_dict(self) -> dict[str, Any]:
        return {**dict(zip(GROUP_KEY, self.key, strict=True)), "cells": self.cells, "r2": self.r2,
                "median_rel_error": self.median_rel_error, "separable": self.separable,
                "cache_bytes": self.cache_bytes, "kv_cache_bytes": self.kv_cache_bytes,
                **{f"coef_{f}": self.coef[f] for f in FEATURES}}


def timing_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows a time model is fitted on: the newest time_ measurement of each attention
    config cell, one row per (group, config) (the median where several benchmarks time
    one config)."""
    cells = latest(frame[(frame["kind"] == "time") & frame["config_id"].notna()])
    if cells.empty:
        return cells
    keep = [*GROUP_KEY, "config_id"]
    return cells.groupby(keep, as_index=False, sort=True).agg(
        {**{c: "first" for c in cells.columns if c not in (*keep, "value")},
         "value": "median"})


def fit_cells(cells: pd.DataFrame, key: tuple[str, ...] = (),
              kv_cache_bytes: float | None = None) -> TimeModel:
    """Fit one :class:`TimeModel` to cells of one group (at least 2 cells), with the K/V
    spill term starting at ``kv_cache_bytes`` (a machine's, see :func:`fit_machine`)."""
    if len(cells) < 2:
        raise ValueError(f"{len(cells)} timed cell(s) for {'/'.join(key) or 'this group'}; "
                         "a time model needs at least 2")
    t = cells["value"].to_numpy(dtype=float)
    best = None
    # Too few cells to fit the spill term as well: leave it out (cache None).
    candidates = CACHE_CANDIDATES if len(cells) > len(FEATURES) else ()
    for cache in (None, *candidates):
        X = feature_matrix(cells, cache, kv_cache_bytes)
        coef = nnls(X / t[:, None], np.ones(len(t)))
        loss = float(np.sum((X @ coef / t - 1) ** 2))
        if best is None or loss < best[0] * (1 - 1e-9):  # a cache size must earn its place
            best = (loss, cache, X, coef)
    loss, cache, X, coef = best
    predicted = X @ coef
    heads = FEATURES.index("heads")
    separable = len(np.unique(np.round(X[:, 1] / X[:, heads]))) > 1
    return TimeModel(key, dict(zip(FEATURES, map(float, coef), strict=True)), cache,
                     kv_cache_bytes, len(cells), r_squared(t, predicted),
                     float(np.median(np.abs(predicted / t - 1))), separable, loss)


def fit_machine(groups: Mapping[tuple[str, ...], pd.DataFrame]
                ) -> dict[tuple[str, ...], TimeModel]:
    """Fit the groups of one machine with one K/V cache size for all of them.

    A cache is the machine's, not a backend's, and one group's ~20 cells could pick a size
    by chance: the size (or none) is the one of :data:`CACHE_CANDIDATES` with the smallest
    relative residuals summed over the machine's groups.
    """
    fits = [{key: fit_cells(cells, key, kv_cache) for key, cells in groups.items()}
            for kv_cache in (None, *CACHE_CANDIDATES)]
    return fits[_pick([sum(m.loss for m in models.values()) for models in fits])]


def _pick(losses: Sequence[float]) -> int:
    """Index of the best of (no cache, *CACHE_CANDIDATES) by loss: a cache size must earn
    its place against none, and where several sizes fit equally (no cell lies between
    them, so the data cannot tell them apart) the middle one of them, not the edge next to
    the cells on one side."""
    best = min(losses[1:], default=losses[0])
    if not best < losses[0] * (1 - 1e-9):
        return 0
    tied = [i for i, loss in enumerate(losses) if i and loss <= best * (1 + 1e-9)]
    return tied[len(tied) // 2]


def fit_models(frame: pd.DataFrame) -> dict[tuple[str, ...], TimeModel]:
    """One model per machine x framework x backend x device x dtype with >= 2 cells."""
    cells = timing_cells(frame)
    groups = {tuple(map(str, key)): group
              for key, group in cells.groupby(list(GROUP_KEY), sort=True) if len(group) >= 2}
    models = {}
    for machine in sorted({key[0] for key in groups}):
        models.update(fit_machine({k: g for k, g in groups.items() if k[0] == machine}))
    return models


def select_model(models: Mapping[tuple[str, ...], TimeModel], config: AttentionConfig,
                 machine: str | None = None) -> TimeModel:
    """The model that predicts ``config`` (on ``machine``, or the only machine there is);
    a ValueError names what is missing and what is available."""
    machines = sorted({k[0] for k in models})
    if not machines:
        raise ValueError("no time model could be fitted: the results hold no group with "
                         "at least 2 timed attention cells")
    if machine is None:
        if len(machines) > 1:
            raise ValueError(f"results hold several machines ({', '.join(machines)}); "
                             "choose one with --machine")
        machine = machines[0]
    key = (machine, config.framework, config.backend, config.device, config.dtype)
    if key not in models:
        have = ", ".join("/".join(k[1:]) for k in sorted(models) if k[0] == machine)
        raise ValueError(f"no time model for framework/backend/device/dtype "
                         f"{'/'.join(key[1:])} on machine {machine!r}; fitted: {have or 'none'}")
    return models[key]


# ----- accuracy on left-out cells ---------------------------------------------------------
def leave_out(frame: pd.DataFrame, folds: int = FOLDS) -> pd.DataFrame:
    """K-fold leave-out per group: fit without every K-th cell, predict the left-out ones.

    Also predicts them with the plain FLOP model at one rate (the training cells' median
    FLOP/s), the baseline the calibrated model must beat. One row per predicted cell.
    """
    groups = {}
    for key, group in timing_cells(frame).groupby(list(GROUP_KEY), sort=True):
        group = group.sort_values(["n", "d", "heads", "config_id"]).reset_index(drop=True)
        k = min(folds, len(group))
        if len(group) - -(-len(group) // k) < len(FEATURES):
            continue  # too few cells to fit without a fold
        groups[tuple(map(str, key))] = (group, np.arange(len(group)) % k)
    rows = []
    for machine in sorted({key[0] for key in groups}):
        mine = {key: v for key, v in groups.items() if key[0] == machine}
        # Fold i of every group of the machine is left out together, so the machine's
        # K/V cache size is fitted without any of the cells predicted.
        for i in range(max(fold.max() + 1 for _, fold in mine.values())):
            train = {key: g[fold != i] for key, (g, fold) in mine.items()}
            models = fit_machine(train)
            for key, (group, fold) in mine.items():
                test = group[fold == i]
                rate = float(np.median(train[key]["flops_model"].astype(float)
                                       / train[key]["value"]))
                for r in test.to_dict("records"):
                    rows.append({**dict(zip(GROUP_KEY, key, strict=True)),
                                 "config_id": r["config_id"], "heads": r["heads"],
                                 "measured_s": r["value"],
                                 "predicted_s": models[key].predict(config_from_row(r)),
                                 "flop_rate_s": float(r["flops_model"]) / rate})
    out = pd.DataFrame(rows, columns=[*GROUP_KEY, "config_id", "heads", "measured_s",
                                      "predicted_s", "flop_rate_s"])
    out["rel_error"] = (out["predicted_s"] / out["measured_s"] - 1).abs()
    out["flop_rate_rel_error"] = (out["flop_rate_s"] / out["measured_s"] - 1).abs()
    return out


def error_summary(errors: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Median and worst relative error of both models, overall or per group."""
    def summary(g: pd.DataFrame) -> pd.Series:
        return pd.Series({"cells": len(g), "median_rel_error": g["rel_error"].median(),
                          "worst_rel_error": g["rel_error"].max(),
                          "flop_rate_median_rel_error": g["flop_rate_rel_error"].median(),
                          "flop_rate_worst_rel_error": g["flop_rate_rel_error"].max()})
    if errors.empty:
        return pd.DataFrame(columns=[*by, "cells", "median_rel_error", "worst_rel_error",
                                     "flop_rate_median_rel_error", "flop_rate_worst_rel_error"])
    if not by:
        return summary(errors).to_frame().T
    return errors.groupby(list(by)).apply(summary, include_groups=False).reset_index()


# ----- decomposition of a head sweep ------------------------------------------------------
def decompose(model: TimeModel, sweep: pd.DataFrame) -> dict[str, Any]:
    """Split a head sweep's times into the model's terms.

    Returns the terms at each h, R^2 of the model on the sweep, and each term's share of
    the h-trend: its change from the smallest to the largest h over the total change of
    the model's time (FLOPs do not change with h at fixed d, so their share is ~0).
    """
    sweep = sweep.sort_values("heads")
    configs = [config_from_row(r) for r in sweep.to_dict("records")]
    terms = pd.DataFrame([model.terms(c) for c in configs], index=sweep["heads"].to_numpy())
    measured = sweep["value"].to_numpy(dtype=float)
    predicted = terms.sum(axis=1).to_numpy()
    change = terms.iloc[-1] - terms.iloc[0]
    total = float(change.sum())
    shares = {f: (float(change[f]) / total if total > 0 else float("nan")) for f in FEATURES}
    return {"terms": terms, "measured": measured, "predicted": predicted,
            "r2": r_squared(measured, predicted), "shares": shares,
            "trend_measured_s": float(measured[-1] - measured[0]), "trend_model_s": total}
