"""A calibrated time model: measured time as a non-negative sum of cost-model terms.

For one machine x framework x backend x device x dtype, a config's time is modelled as

    t = sum over the features f of c_f * f(config)

with the features of :mod:`mhabench.analysis.prediction.features` (FLOPs, map elements, K/V reads
and copies, weights, per-head and per-call costs, ...; what each counts, and why, is there;
every count comes from :mod:`mhabench.core.cost`). The map's cache size is calibrated per
group: the fit tries each of :data:`CACHE_CANDIDATES` (and none) and keeps the one with the
smallest relative residuals. The K/V cache size is a machine's, chosen the same way over
all its groups together (:func:`fit_machine`); few decode cells per group could otherwise
pick one by chance. Those choices and the coefficients are made by non-negative least
squares on *relative* residuals (each row divided by its measured time), so a 2 ms cell
counts as much as a 2 s one, and a cell a slow stretch of the machine read slow pulls less
than an over-prediction costs (:mod:`mhabench.analysis.prediction.solvers` says why). A group gets
the full model only when it has more cells than the model has coefficients (those whose
feature is not zero on every cell); otherwise the next simpler model of
:data:`FEATURE_SETS`, and a group too small even for FLOPs + constant is reported as
under-determined (:class:`UnderDetermined`), not fitted; a group with fewer than two cells
per coefficient is refitted toward its framework's rates (:func:`pool_small_groups`).
Each model records the ranges of the configs it was fitted on, and
:meth:`TimeModel.extrapolation` names every field of a config outside them. The per-head
split of a head sweep is in :mod:`mhabench.analysis.prediction.decomposition`, the accuracy checks
in :mod:`mhabench.analysis.prediction.validation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.fast_speed import SLOWDOWN, fast_values
from mhabench.analysis.prediction.features import (
    CACHE_CANDIDATES,
    FEATURE_LABELS,
    FEATURES,
    CellFeatures,
    feature_matrix,
    feature_values,
    kv_moved,
)
from mhabench.analysis.prediction.solvers import distinct_columns, nnls, pulled_nnls, r_squared
from mhabench.analysis.results import latest
from mhabench.core.config import AttentionConfig

__all__ = ["CACHE_CANDIDATES", "FEATURE_LABELS", "FEATURES", "CellFeatures",
           "feature_matrix", "feature_values"]  # re-exported

# The models a group may get, richest first: the first with fewer coefficients than the
# group has cells is fitted (the spill terms count only where a cache size makes them
# non-zero). FLOPs + constant is the plain roofline: one rate and a call overhead.
FEATURE_SETS: tuple[tuple[str, ...], ...] = (
    FEATURES,
    ("flops", "map", "kv", "heads", "const"),
    ("flops", "map", "const"),
    ("flops", "const"),
)
MIN_CELLS = len(FEATURE_SETS[-1]) + 1  # one residual left over for the simplest model
MIN_SPILLED = 2  # cells reading most of their K/V past the cache, to fit that term (_determined)
# A group with fewer cells than this per fitted coefficient (torch.compile and
# FlexAttention, which the quick grid times at 15-17 cells for 10-13 terms, JAX's
# reference layer) is pulled toward its framework's rates (:func:`pool_small_groups`).
CELLS_PER_TERM = 2
MIN_PRIOR_GROUPS = 3  # well-fitted groups of a framework whose median is a term's prior
# Config fields whose fitted range a model records; a config outside any is extrapolated.
RANGE_FIELDS = ("batch", "n", "m", "d", "heads", "kv_heads")
# Categorical fields: a value the fit never saw is an extrapolation too. Causal cells stay
# out of every fit (:func:`timing_cells`), so a causal config is always one: predicted as its
# full, non-causal step, which a causal kernel skips about half of.
SEEN_FIELDS = ("mode", "cross", "masked", "causal")
# ... and the pair of mode and cross: a group fitted on cross-attention forward steps and
# self-attention decode steps has not seen a cross decode step (its K/V read is a cached
# source, m new keys per query, unlike either), so a cross decode step is no "inside"
# prediction of such a group.
MODE_CROSS = "mode/cross"


def mode_cross(mode: str, cross: bool) -> str:
    """The value of :data:`MODE_CROSS` for a config: e.g. ``decode/cross``."""
    return f"{mode}/{'cross' if cross else 'self'}"
GROUP_KEY = ("machine", "framework", "backend", "device", "dtype")
# Losses (sums of squared relative residuals) closer than this are a tie: on exact data the
# solver's rounding would otherwise let a useless cache size "earn" its place.
LOSS_TIE = 1e-12

Key = tuple[str, ...]


class UnderDetermined(ValueError):
    """A group with too few cells for even the simplest model: not fitted."""


@dataclass(frozen=True)
class TimeModel:
    """Fitted coefficients (seconds per unit of each feature) for one group of cells."""

    key: Key  # values of GROUP_KEY
    coef: dict[str, float]  # every feature; 0 for those outside ``features``
    cache_bytes: float | None  # map size beyond which the spill term applies
    kv_cache_bytes: float | None  # K/V bytes a cache keeps; kv_spill counts reads past them
    cells: int
    r2: float
    median_rel_error: float  # in-sample
    separable: bool  # map and per-head terms distinguishable (several batch*n*m)
    loss: float  # nnls's sum of squared relative residuals, in-sample (picks cache sizes)
    features: tuple[str, ...] = FEATURES  # the terms fitted (non-zero columns)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # RANGE_FIELDS
    seen: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # SEEN_FIELDS
    level: int = 0  # index of the FEATURE_SETS model fitted
    pooled: bool = False  # pulled toward its framework's rates (few cells per term)

    @property
    def reduced(self) -> bool:
        """True when the group was too small for the full model's base terms (a model of
        :data:`FEATURE_SETS` past the second; a term whose feature is 0 on every cell, as
        K/V without decode steps, leaves a model as full as the cells allow)."""
        return self.level >= 2

    def terms(self, config: AttentionConfig) -> dict[str, float]:
        values = feature_values(config, self.cache_bytes, self.kv_cache_bytes)
        return {f: self.coef[f] * values[f] for f in FEATURES}

    def predict(self, config: AttentionConfig) -> float:
        return sum(self.terms(config).values())

    def extrapolation(self, config: AttentionConfig) -> list[str]:
        """Every way ``config`` lies outside what the model was fitted on (empty: inside)."""
        out = []
        for name, (lo, hi) in self.ranges.items():
            value = getattr(config, name)
            if not lo <= value <= hi:
                out.append(f"{name}={value} outside fitted {lo}-{hi}")
        for name, values in self.seen.items():
            if name == MODE_CROSS:
                continue
            value = getattr(config, name)
            if value not in values:
                out.append(f"{name}={value} not fitted (only {', '.join(map(str, values))})")
        pairs = self.seen.get(MODE_CROSS)
        pair = mode_cross(config.mode, config.cross)
        # said above already where the mode or the cross value alone was never fitted
        alone = (config.mode not in self.seen.get("mode", (config.mode,))
                 or config.cross not in self.seen.get("cross", (config.cross,)))
        if pairs is not None and pair not in pairs and not alone:
            out.append(f"{MODE_CROSS}={pair} not fitted (only {', '.join(pairs)})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**dict(zip(GROUP_KEY, self.key, strict=True)), "cells": self.cells,
                "pooled": self.pooled, "r2": self.r2,
                "median_rel_error": self.median_rel_error, "separable": self.separable,
                "features": list(self.features), "cache_bytes": self.cache_bytes,
                "kv_cache_bytes": self.kv_cache_bytes,
                "ranges": {k: list(v) for k, v in self.ranges.items()},
                **{f"coef_{f}": self.coef[f] for f in FEATURES}}


WARM_SUFFIX = ".time_step_warm"  # mhabench.bench: a GPU cell timed with L2 left warm


def timing_cells(frame: pd.DataFrame, commits: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows a time model is fitted on: the newest time_ measurement (newest by
    ``commits`` where given, see :func:`~mhabench.analysis.results.latest`) of each attention
    config cell at the machine's fast speed (divided by the moment's slowdown where the
    frame has it, :mod:`mhabench.analysis.fast_speed`), one row per (group, config) (the
    median where several benchmarks time one config)."""
    # A warm-L2 reference timing (time_step_warm) is not the cell's time: the cold one is.
    # Causal cells stay out too: the features have no term for the masked half a causal
    # kernel skips (bench_gpu times them for the GPU section).
    warm = frame["benchmark"].str.endswith(WARM_SUFFIX)
    cells = latest(frame[(frame["kind"] == "time") & frame["config_id"].notna() & ~warm
                         & ~frame["causal"].eq(True)], commits)
    if cells.empty:
        return cells
    # At fast speed once: without the slowdown column, cells passed through again (the
    # report's leave-out fits ctx.timings) keep their values instead of being divided twice.
    cells = cells.assign(value=fast_values(cells)).drop(columns=SLOWDOWN, errors="ignore")
    keep = [*GROUP_KEY, "config_id"]
    return cells.groupby(keep, as_index=False, sort=True).agg(
        {**{c: "first" for c in cells.columns if c not in (*keep, "value")},
         "value": "median"})


def _ranges(cells: pd.DataFrame) -> tuple[dict[str, tuple[int, int]],
                                          dict[str, tuple[Any, ...]]]:
    ranges = {f: (int(cells[f].min()), int(cells[f].max())) for f in RANGE_FIELDS}
    seen = {f: tuple(sorted({v.item() if hasattr(v, "item") else v for v in cells[f]}))
            for f in SEEN_FIELDS}
    seen[MODE_CROSS] = tuple(sorted({mode_cross(str(mode), bool(cross))
                                     for mode, cross in zip(cells["mode"], cells["cross"],
                                                            strict=True)}))
    return ranges, seen


def fit_cells(cells: pd.DataFrame, key: Key = (),
              kv_cache_bytes: float | None = None,
              features_of: CellFeatures | None = None,
              prior: Mapping[str, float] | None = None) -> TimeModel:
    """Fit one :class:`TimeModel` to cells of one group, with the K/V spill term starting
    at ``kv_cache_bytes`` (a machine's, see :func:`fit_machine`): the richest model of
    :data:`FEATURE_SETS` with fewer coefficients than cells. Raises
    :class:`UnderDetermined` when even the simplest has as many coefficients as cells.
    ``features_of``: the cells' features if already computed; ``prior``: coefficients the
    chosen terms' fit is pulled toward (:func:`mhabench.analysis.prediction.solvers.pulled_nnls`),
    the model then ``pooled``."""
    t = cells["value"].to_numpy(dtype=float)
    table = features_of if features_of is not None else CellFeatures.of(cells)
    for level, features in enumerate(FEATURE_SETS):
        best = None
        for cache in (None, *CACHE_CANDIDATES) if "spill" in features else (None,):
            X = table.matrix(cache, kv_cache_bytes)
            used = distinct_columns(X, [i for i, f in enumerate(FEATURES) if f in features
                                        and X[:, i].any() and _determined(X, f)])
            if len(used) >= len(cells):
                continue  # as many coefficients as cells: an exact fit that proves nothing
            coef = np.zeros(len(FEATURES))
            coef[used] = nnls(X[:, used] / t[:, None], np.ones(len(t)))
            loss = float(np.sum((X @ coef / t - 1) ** 2))
            if best is None or loss < best[0] * (1 - 1e-9) - LOSS_TIE:  # must earn its place
                best = (loss, cache, X, coef, tuple(FEATURES[i] for i in used), level)
        if best is not None:
            break
    else:
        raise UnderDetermined(
            f"{'/'.join(key) or 'this group'} has {len(cells)} timed cell(s); the simplest "
            f"model ({' + '.join(FEATURE_SETS[-1])}) needs at least {MIN_CELLS}: "
            "under-determined, not fitted")
    loss, cache, X, coef, used, level = best
    if prior is not None:
        at = [FEATURES.index(f) for f in used]
        coef[at] = pulled_nnls(X[:, at] / t[:, None], np.array([prior.get(f, 0.0) for f in used]))
    predicted = X @ coef
    heads = FEATURES.index("heads")
    separable = len(np.unique(np.round(X[:, FEATURES.index("map")] / X[:, heads]))) > 1
    ranges, seen = _ranges(cells)
    return TimeModel(key, dict(zip(FEATURES, map(float, coef), strict=True)), cache,
                     kv_cache_bytes, len(cells), r_squared(t, predicted),
                     float(np.median(np.abs(predicted / t - 1))), separable, loss, used,
                     ranges, seen, level, pooled=prior is not None)


def _determined(X: np.ndarray, feature: str) -> bool:
    """Whether the cells can set ``feature``'s coefficient. The K/V read past the cache
    needs :data:`MIN_SPILLED` cells that read (or copy) at least half their K/V past it
    (K/V larger than twice the cache): a cell just past the size holds a sliver of the
    feature, and fitted to such cells alone the term can take any value, which a long
    cache outside the fit then multiplies."""
    if feature != "kv_spill":
        return True
    moved = kv_moved(X)
    past = X[:, FEATURES.index("kv_spill")]
    return not past.any() or int(np.sum((moved > 0) & (past >= 0.5 * moved))) >= MIN_SPILLED


def fit_machine(groups: Mapping[Key, pd.DataFrame]) -> dict[Key, TimeModel]:
    """Fit the groups of one machine with one K/V cache size for all of them.

    A cache is the machine's, not a backend's, and one group's ~20 cells could pick a size
    by chance: the size (or none) is the one of :data:`CACHE_CANDIDATES` with the smallest
    relative residuals summed over the machine's groups. Groups with fewer than
    :data:`MIN_CELLS` cells are left out (see :func:`underdetermined`).
    """
    groups = {k: g for k, g in groups.items() if len(g) >= MIN_CELLS}
    tables = {k: CellFeatures.of(g) for k, g in groups.items()}
    fits = [{key: fit_cells(cells, key, kv_cache, tables[key]) for key, cells in groups.items()}
            for kv_cache in (None, *CACHE_CANDIDATES)]
    models = fits[_pick([sum(m.loss for m in models.values()) for models in fits])]
    return pool_small_groups(models, groups, tables)


def _well_fitted(model: TimeModel) -> bool:
    return model.cells >= CELLS_PER_TERM * len(model.features)


def pool_small_groups(models: Mapping[Key, TimeModel], groups: Mapping[Key, pd.DataFrame],
                      tables: Mapping[Key, CellFeatures] | None = None
                      ) -> dict[Key, TimeModel]:
    """``models`` with each group of fewer than :data:`CELLS_PER_TERM` cells per fitted
    coefficient refitted toward its framework's rates: a term's prior is its median
    coefficient over the framework's well-fitted groups (at least
    :data:`MIN_PRIOR_GROUPS` fitting it; a term without one is fitted as before).

    What such a group's few cells cannot tell apart lands anywhere (a per-call cost on
    the heads, say), and off-grid configs pay for it (docs/research.md)."""
    rates: dict[str, dict[str, list[float]]] = {}
    for key, model in models.items():
        if _well_fitted(model):
            for name in model.features:
                rates.setdefault(key[1], {}).setdefault(name, []).append(model.coef[name])
    priors = {framework: {name: float(np.median(values)) for name, values in terms.items()
                          if len(values) >= MIN_PRIOR_GROUPS}
              for framework, terms in rates.items()}
    out = dict(models)
    for key, model in models.items():
        if not _well_fitted(model) and priors.get(key[1]):
            table = tables[key] if tables is not None else None
            out[key] = fit_cells(groups[key], key, model.kv_cache_bytes, table,
                                 prior=priors[key[1]])
    return out


def _pick(losses: Sequence[float]) -> int:
    """Index of the best of (no cache, *CACHE_CANDIDATES) by loss: a cache size must earn
    its place against none, and where several sizes fit equally (no cell lies between
    them, so the data cannot tell them apart) the middle one of them, not the edge next to
    the cells on one side."""
    best = min(losses[1:], default=losses[0])
    if not best < losses[0] * (1 - 1e-9) - LOSS_TIE:
        return 0
    tied = [i for i, loss in enumerate(losses) if i and loss <= best * (1 + 1e-9) + LOSS_TIE]
    return tied[len(tied) // 2]


def groups(frame: pd.DataFrame, cells: pd.DataFrame | None = None
           ) -> dict[Key, pd.DataFrame]:
    """The timed cells of each machine x framework x backend x device x dtype
    (``cells``: ``timing_cells(frame)`` if already computed)."""
    cells = timing_cells(frame) if cells is None else cells
    if cells.empty:
        return {}
    return {tuple(map(str, key)): group
            for key, group in cells.groupby(list(GROUP_KEY), sort=True)}


def fit_models(frame: pd.DataFrame, by_group: Mapping[Key, pd.DataFrame] | None = None
               ) -> dict[Key, TimeModel]:
    """One model per group with at least :data:`MIN_CELLS` cells (``by_group``:
    ``groups(frame)`` if already computed)."""
    by_group = groups(frame) if by_group is None else by_group
    models = {}
    for machine in sorted({key[0] for key in by_group}):
        models.update(fit_machine({k: g for k, g in by_group.items() if k[0] == machine}))
    return models


def underdetermined(frame: pd.DataFrame, by_group: Mapping[Key, pd.DataFrame] | None = None
                    ) -> dict[Key, int]:
    """Groups too small for any model, with their number of cells."""
    by_group = groups(frame) if by_group is None else by_group
    return {k: len(g) for k, g in by_group.items() if len(g) < MIN_CELLS}


def select_model(models: Mapping[Key, TimeModel], config: AttentionConfig,
                 machine: str | None = None,
                 too_small: Mapping[Key, int] | None = None) -> TimeModel:
    """The model that predicts ``config`` (on ``machine``, or the only machine there is);
    a ValueError names what is missing and what is available (``too_small``: the
    under-determined groups, named as such)."""
    too_small = too_small or {}
    machines = sorted({k[0] for k in (*models, *too_small)})
    if not machines:
        raise ValueError("no time model could be fitted: the results hold no group with "
                         f"at least {MIN_CELLS} timed attention cells")
    if machine is None:
        if len(machines) > 1:
            raise ValueError(f"results hold several machines ({', '.join(machines)}); "
                             "choose one with --machine")
        machine = machines[0]
    key = (machine, config.framework, config.backend, config.device, config.dtype)
    if key in too_small:
        raise ValueError(f"{'/'.join(key[1:])} on machine {machine!r} has {too_small[key]} "
                         f"timed cell(s), fewer than the {MIN_CELLS} the simplest model "
                         "needs: under-determined, not fitted")
    if key not in models:
        have = ", ".join("/".join(k[1:]) for k in sorted(models) if k[0] == machine)
        raise ValueError(f"no time model for framework/backend/device/dtype "
                         f"{'/'.join(key[1:])} on machine {machine!r}; fitted: {have or 'none'}")
    return models[key]
