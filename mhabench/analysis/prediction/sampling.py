"""What ``mhabench validate`` times: a seeded random sample of configs off the benchmark
grid, and grid cells beside them as anchors of the machine's drift.

:func:`sample_configs` draws configs for the fitted groups (odd widths, head counts that
are not powers of two, n != m, GQA ratios, masking), by default inside the ranges each
group was fitted on, or (``wide``) each integer field from half the smallest to twice the
largest fitted value. :func:`anchor_cells` picks grid cells of the same groups with their
asv times: timed with the sample, they say how far the machine's speed has moved since
the grid (:func:`mhabench.analysis.prediction.validation.machine_drift`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from mhabench.analysis.prediction.timemodel import MODE_CROSS, Key, TimeModel, mode_cross
from mhabench.analysis.results import config_from_row, head_widths
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import TRAIN_FACTOR, cost

WIDEN = 2  # the random sample's box: [smallest / WIDEN, largest * WIDEN] per field
MAX_GFLOP = 2.0  # keeps each freshly timed config to tens of ms on a 2-core CPU
ANCHORS = 8  # grid cells re-timed with the sample: a median of the drift at little cost
ANCHOR_MAX_S = 0.05  # only grid cells this fast: each visit of every round times one


def _log_int(rng: np.random.Generator, lo: float, hi: float) -> int:
    """An integer drawn log-uniformly from [lo, hi]."""
    lo, hi = max(1.0, lo), max(1.0, hi)
    return max(1, round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _box(values: pd.Series, wide: bool) -> tuple[float, float]:
    """The range a random draw spans: the fitted values' range, widened by WIDEN when
    ``wide``."""
    widen = WIDEN if wide else 1
    return float(values.min()) / widen, float(values.max()) * widen


def draw_config(rng: np.random.Generator, model: TimeModel, cells: pd.DataFrame,
                wide: bool = False) -> AttentionConfig:
    """One random config for ``model``'s group (may be invalid or, inside the fitted
    ranges, outside them after all: the caller redraws).

    Mode: one the group was fitted on (the model has no other). Shapes: log-uniform in
    the fitted range of that mode's cells (``wide``: from 1/WIDEN of the smallest to WIDEN
    times the largest); the head width p is drawn apart from h, so d = h * p is odd
    whenever both are. GQA/MQA (a random divisor of h) half the time where the backend has
    it, cross-attention (m != n) 40 % and masking 30 % (inside the ranges: only where the
    group was fitted on some: cross-attention in this mode).
    """
    mode = str(rng.choice(list(model.seen["mode"])))
    mine = cells[cells["mode"] == mode]
    _, framework, backend, device, dtype = model.key
    heads = _log_int(rng, *_box(mine["heads"], wide))
    p = _log_int(rng, *_box(head_widths(mine), wide))
    kv_heads = heads
    if backend != "reference" and rng.random() < 0.5:
        kv_heads = int(rng.choice([g for g in range(1, heads + 1) if heads % g == 0]))
    n = _log_int(rng, *_box(mine["n"], wide))
    cross = bool(rng.random() < 0.4) and (
        wide or mode_cross(mode, True) in model.seen.get(MODE_CROSS, ()))
    # A decode step's n new tokens attend over m cached ones: m is its own draw there.
    m = _log_int(rng, *_box(mine["m"], wide)) if cross or mode == "decode" else n
    if cross and m == n:
        m = n + 1 + int(rng.integers(0, n))
    masked = bool(rng.random() < 0.3) and (wide or True in model.seen["masked"])
    return AttentionConfig(
        framework=framework, backend=backend, device=device, dtype=dtype, mode=mode,
        batch=_log_int(rng, *_box(mine["batch"], wide)), n=n, m=m, d=heads * p,
        heads=heads, kv_heads=kv_heads, cross=cross, masked=masked)


def sample_configs(models: Mapping[Key, TimeModel], cells: Mapping[Key, pd.DataFrame],
                   size: int, seed: int, max_gflop: float = MAX_GFLOP,
                   runnable: Callable[[AttentionConfig], None] | None = None,
                   wide: bool = False) -> list[tuple[Key, AttentionConfig]]:
    """``size`` distinct configs, each for a group drawn at random from ``models``, none
    of them a cell the group was fitted on; inside each model's fitted ranges (no
    extrapolation) unless ``wide`` (see :func:`draw_config`). ``runnable`` raises ValueError (e.g.
    :func:`mhabench.measure.timing.check_runnable`) for configs this machine cannot time; those
    and configs over ``max_gflop`` model GFLOPs are redrawn."""
    if size < 1:
        raise ValueError(f"sample={size} is not allowed; it must be a positive integer")
    keys = sorted(models)
    if not keys:
        raise ValueError("no fitted time model to validate")
    rng = np.random.default_rng(seed)
    seen = {k: set(cells[k]["config_id"]) for k in keys}
    out: list[tuple[Key, AttentionConfig]] = []
    for _ in range(1000 * size):
        if len(out) == size:
            return out
        key = keys[int(rng.integers(len(keys)))]
        try:
            config = draw_config(rng, models[key], cells[key], wide)
            if not wide and models[key].extrapolation(config):
                continue
            factor = TRAIN_FACTOR if config.mode == "train" else 1
            if cost(config).flops_model * factor > max_gflop * 1e9:
                continue
            if runnable is not None:
                runnable(config)
        except ValueError:  # not a valid config, or not runnable here: draw again
            continue
        if config.id not in seen[key] and all(config != c for _, c in out):
            out.append((key, config))
    raise ValueError(f"could not draw {size} runnable configs under {max_gflop:g} GFLOP "
                     f"(got {len(out)}); raise --max-gflop or lower --sample")


def anchor_cells(cells: Mapping[Key, pd.DataFrame], keys: Sequence[Key], count: int,
                 seed: int, runnable: Callable[[AttentionConfig], None] | None = None
                 ) -> list[tuple[AttentionConfig, float]]:
    """``count`` grid cells of the groups ``keys`` (seeded), each with its asv time: timed
    with the sample, they say how much slower or faster the machine runs now than when
    the grid was timed (:func:`mhabench.analysis.prediction.validation.machine_drift`). A shared
    VM's speed moves within the hour, which no model can know and which a comparison with a
    grid timed earlier charges to the model."""
    pool = [(config_from_row(r), float(r["value"])) for key in sorted(set(keys))
            for r in cells[key].to_dict("records") if r["value"] <= ANCHOR_MAX_S]
    rng = np.random.default_rng(seed)
    out: list[tuple[AttentionConfig, float]] = []
    for i in rng.permutation(len(pool)):
        if len(out) == count:
            break
        try:
            if runnable is not None:
                runnable(pool[i][0])
        except ValueError:
            continue
        out.append(pool[i])
    return out
