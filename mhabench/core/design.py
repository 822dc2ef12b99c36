"""A seeded space-filling calibration design: shapes the time model can learn from.

The one-factor sweeps of the asv grids vary one field at a time around a few centres, so a
fit per backend sees almost no interactions (n x h, m x h_kv, batch x d, the head width
p = d/h). :func:`calibration_design` draws the first points of a scrambled Sobol sequence
(:class:`scipy.stats.qmc.Sobol`) over log n, log m, log d, log p, the key/value
head ratio, log batch, mode, cross-attention and masking, inside :data:`QUICK_BOX` (the
ranges the quick grid runs on a 2-core CPU), and turns each point into the shape fields of
an :class:`~mhabench.core.config.AttentionConfig`. It is pure arithmetic on a seed: the
same arguments give the same points on every machine and commit, so the asv benchmark ids
built from it (``benchmarks/bench_design.py``) stay stable; the grids' points (the fixed
seed, up to 32) are read from :mod:`mhabench.core.design_sobol`, scipy's own, stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mhabench.core import design_sobol
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import TRAIN_FACTOR, cost

# The design's axes, in order (each a uniform [0, 1) coordinate of a point).
AXES = ("n", "m", "d", "p", "kv", "batch", "mode", "cross", "masked")
SEED = design_sobol.SEED  # fixed: the same points, so the same asv benchmark ids, every run


@dataclass(frozen=True)
class Box:
    """Ranges of a design (inclusive); widths and lengths are drawn log-uniformly."""

    n: tuple[int, int] = (32, 1024)
    m: tuple[int, int] = (32, 2048)  # keys of cross-attention and of a decode step's cache
    d: tuple[int, int] = (64, 1024)
    p: tuple[int, int] = (4, 256)  # head width d/h: narrow heads run matmuls far below peak
    heads: tuple[int, int] = (1, 64)
    batch: tuple[int, int] = (1, 8)
    # Model GFLOPs of one step (train counted 3x): larger points shrink batch, then n and m.
    max_gflop: float = 0.5
    # Mode by the point's coordinate: forward below the first bound, train below the second,
    # decode above (decode and train are what users run beside forward).
    mode_bounds: tuple[float, float] = (0.6, 0.8)
    cross_share: float = 0.35
    masked_share: float = 0.3
    # Decode points attending to a cached cross-attention source: none in the general
    # design (its points keep their benchmark ids), half in the decode design.
    decode_cross_share: float = 0.0


QUICK_BOX = Box()
TINY_BOX = Box(n=(8, 64), m=(8, 64), d=(16, 64), p=(4, 32), heads=(1, 8), batch=(1, 2),
               max_gflop=0.01)
# Decode steps only, self (a KV cache) and cross (a cached source) alike: the sweeps time
# decode at one width (d = 256, h = 16), and the general design's few decode points alone
# cannot show a fit how d, h, batch and m move a decode step.
DECODE_BOX = replace(QUICK_BOX, mode_bounds=(0.0, 0.0), decode_cross_share=0.5)
TINY_DECODE_BOX = replace(TINY_BOX, mode_bounds=(0.0, 0.0), decode_cross_share=0.5)
# Training steps only: the general design's one point in five leaves a group's training
# FLOP rate (the backward's, a coefficient of its own) to two to four cells, one of them
# the sweeps' n = 512 step.
TRAIN_BOX = replace(QUICK_BOX, mode_bounds=(0.0, 1.0))
TINY_TRAIN_BOX = replace(TINY_BOX, mode_bounds=(0.0, 1.0))


def _log_level(u: float, lo: int, hi: int) -> int:
    """The integer at quantile ``u`` of a log-uniform draw from [lo, hi]."""
    return min(hi, max(lo, round(math.exp(math.log(lo) + u * math.log(hi / lo)))))


def _kv_heads(u: float, heads: int) -> int:
    """MHA for half the points, then GQA (a middle divisor of h, MHA where h has none),
    then MQA."""
    if u < 0.5 or heads == 1:
        return heads
    if u >= 0.75:
        return 1
    middle = [g for g in range(2, heads) if heads % g == 0]
    return middle[min(len(middle) - 1, int((u - 0.5) / 0.25 * len(middle)))] if middle \
        else heads


def point_fields(u: np.ndarray, box: Box = QUICK_BOX) -> dict[str, Any]:
    """The config shape fields of one design point ``u`` (one coordinate per axis of
    :data:`AXES`); a point over ``box.max_gflop`` is shrunk (batch first, then n and m)."""
    c = dict(zip(AXES, map(float, u), strict=True))
    d = _log_level(c["d"], *box.d)
    p = _log_level(c["p"], *box.p)
    heads = min(box.heads[1], max(box.heads[0], round(d / p)))
    p = min(box.p[1], max(box.p[0], round(d / heads)))
    d = heads * p  # h divides d; d may leave the box by under one head width
    lo, hi = box.mode_bounds
    mode = "forward" if c["mode"] < lo else "train" if c["mode"] < hi else "decode"
    cross = c["cross"] < (box.decode_cross_share if mode == "decode" else box.cross_share)
    n = 1 if mode == "decode" else _log_level(c["n"], *box.n)
    m = _log_level(c["m"], *box.m) if cross or mode == "decode" else n
    fields = {"mode": mode, "batch": _log_level(c["batch"], *box.batch), "n": n, "m": m,
              "d": d, "heads": heads, "kv_heads": _kv_heads(c["kv"], heads), "cross": cross,
              "masked": cross and c["masked"] < box.masked_share * 2
              or not cross and mode != "decode" and c["masked"] < box.masked_share}
    return _shrink(fields, box.max_gflop)


def _gflop(fields: dict[str, Any]) -> float:
    config = AttentionConfig(**fields)
    factor = TRAIN_FACTOR if config.mode == "train" else 1
    return cost(config).flops_model * factor / 1e9


def _shrink(fields: dict[str, Any], max_gflop: float) -> dict[str, Any]:
    while _gflop(fields) > max_gflop:
        if fields["batch"] > 1:
            fields["batch"] = max(1, fields["batch"] // 2)
        elif fields["mode"] != "decode" and fields["n"] > 1:
            fields["n"] = max(1, fields["n"] // 2)
            fields["m"] = fields["n"] if not fields["cross"] else max(1, fields["m"] // 2)
        elif fields["m"] > 1:
            fields["m"] = max(1, fields["m"] // 2)
        else:
            break  # the projections alone are over the cap: keep the point as it is
    return fields


def _check_power_of_two(size: int) -> None:
    if size < 1 or size & (size - 1):
        raise ValueError(f"size={size} is not allowed; it must be a power of two (a Sobol "
                         "prefix is balanced only at powers of two)")


def design_points(size: int, seed: int = SEED) -> np.ndarray:
    """The first ``size`` points of the scrambled Sobol sequence in [0, 1)^len(AXES)."""
    _check_power_of_two(size)
    if seed == SEED and size <= len(design_sobol.POINTS):
        # The grids' designs: scipy's points, stored (asv imports this in every process)
        return np.array(design_sobol.POINTS[:size])
    from scipy.stats import qmc

    sampler = qmc.Sobol(d=len(AXES), scramble=True, rng=np.random.default_rng(seed))
    return sampler.random_base2(size.bit_length() - 1)


def calibration_design(size: int, seed: int = SEED, box: Box = QUICK_BOX,
                       start: int = 0) -> list[dict[str, Any]]:
    """``size`` (a power of two) points of a scrambled Sobol sequence in ``box``, as config
    shape fields (mode, batch, n, m, d, heads, kv_heads, cross, masked); distinct, in a
    fixed order: a larger size starts with the same points. ``start`` (a multiple of
    ``size``): the points from there instead (a block of ``size`` that starts at a multiple
    of it is itself one point in each 1/size of every axis), so a second design does not
    repeat the first one's shapes."""
    _check_power_of_two(size)
    if start % size:
        raise ValueError(f"start={start} is not allowed; it must be a multiple of size={size} "
                         "(only such blocks of a Sobol sequence are balanced)")
    prefix = 1 << (start + size - 1).bit_length()  # the power of two that holds the block
    points = design_points(prefix, seed)[start:start + size]
    out: list[dict[str, Any]] = []
    for u in points:
        fields = point_fields(u, box)
        if fields not in out:
            out.append(fields)
    return out
