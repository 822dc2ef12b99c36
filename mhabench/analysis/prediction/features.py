"""The time model's features: what each kernel does, counted by the cost model.

Every count comes from :func:`mhabench.core.cost.cost` and, for what a decode step reads
and copies, :mod:`mhabench.analysis.prediction.decode_reads`; here they are only arranged into the
columns a fit needs, per config (whole batch, one step of its mode; a training step
multiplies the map, weight, head and per-call terms by ``TRAIN_FACTOR`` as its FLOPs).
Why each term is in: docs/report.md; the figures that put it in: docs/research.md.

- ``flops`` at one matmul rate; ``train_flops``: a training step's again (slower backward).
- ``unaligned_flops``, ``unaligned_map``, ``unaligned_rows``: ``flops``, ``map`` and the
  score rows (b*h*n) again where n, m, d or p is off a multiple (or divisor) of
  :data:`ALIGN` floats, which the kernels run on slower paths.
- ``map``: one per score (b*h*n*m): elementwise work and the narrow-head penalty; JAX
  blockwise scores whole tiles of keys (:func:`scored_keys`). ``spill``: the map past a
  cache size, where the kernel writes it. ``decode_scores``: a decode step's scores again.
- ``kv``: the K/V elements a decode step reads, as its backend lays them out; ``kv_copy``:
  those it copies first, as often as the compiled step does; ``kv_spill``: the part of both
  past a cache size, decided by the step's whole working set
  (:func:`decode_working_set_bytes`), fitted only where two cells read most K/V past it.
- ``weights``: projection weights read once a call; ``weights_gemm``: again wherever the
  projections are matrix products (not a batch-1 decode step's GEMVs); ``weight_grads``:
  the gradients a training step writes.
- ``loop_heads``: the loop backend's per-head passes over full-width activations.
- ``heads``, ``const``: fixed costs per head and per call; ``projects_kv``: per call of a
  step that projects K/V (all but cross decode); ``masked``: per call of a masked step that
  dispatches the mask's ops (:func:`masks_fused`); ``block_mask``: the padded (b, rows,
  keys) mask a backend builds per masked call (FlexAttention's ``create_block_mask``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mhabench.analysis.prediction.decode_reads import (
    decode_kv_copied,
    decode_kv_elements,
    decode_working_set_bytes,
    weight_elements,
)
from mhabench.analysis.results import config_from_row
from mhabench.core import backends
from mhabench.core.backends import KEY_BLOCK
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import TRAIN_FACTOR, block_mask_elements, cost, padded, step_lengths

FEATURES = ("flops", "train_flops", "unaligned_flops", "map", "unaligned_map", "unaligned_rows",
            "decode_scores", "spill", "kv", "kv_spill", "kv_copy", "weights", "weights_gemm",
            "weight_grads",
            "loop_heads", "heads", "const", "projects_kv", "masked", "block_mask")
FEATURE_LABELS = {"flops": "FLOPs (flops_model)",
                  "train_flops": "training steps' FLOPs, again (the backward's rate)",
                  "unaligned_flops": "FLOPs again where n, m, d or p is not a multiple of 16",
                  "unaligned_map": "scores again where m or p is not a multiple of 16",
                  "unaligned_rows": "score rows (b*h*n) where m or p is not a multiple of 16",
                  "map": "per score (batch*h*n*m): softmax, narrow heads",
                  "decode_scores": "decode: scores again (batch*h*m, one cache row each)",
                  "spill": "attention map written beyond cache",
                  "kv": "decode: keys/values read (batch*m*2*width)",
                  "kv_spill": "decode: keys/values read or copied past the cache",
                  "kv_copy": "decode: keys/values copied before the read",
                  "weights": "projection weights read (2d^2 + 2d*h_kv*p)",
                  "weights_gemm": "weights again where the projections are matrix products "
                                  "(all but batch-1 decode steps)",
                  "weight_grads": "training: weight gradients written (2d^2 + 2d*h_kv*p)",
                  "loop_heads": "loop: per-head passes over activations (b*d*(n*h + m*h_kv))",
                  "heads": "per-head fixed cost",
                  "const": "fixed per call (train: 3x)",
                  "projects_kv": "fixed per call projecting keys/values (train: 3x)",
                  "masked": "fixed per call of a masked step (train: 3x)",
                  "block_mask": "block mask built per call (b*n*m, padded to its blocks)"}
# Lengths and widths that are multiples of this many floats run the kernels' fast paths
# (one AVX-512 vector of float32, one 64-byte cache line); see ``unaligned_flops`` above.
ALIGN = 16
# Map sizes (bytes of one batch*h*n*m map) the spill term may start at: 1 MiB to 1 GiB.
CACHE_CANDIDATES = tuple(2**k * 2**20 for k in range(11))


def feature_values(config: AttentionConfig, cache_bytes: float | None = None,
                   kv_cache_bytes: float | None = None) -> dict[str, float]:
    """The model's features for one config (see the module docstring); no spill term
    when ``cache_bytes`` is None, no K/V spill term when ``kv_cache_bytes`` is None."""
    terms = cost(config)
    factor = TRAIN_FACTOR if config.mode == "train" else 1
    # rows: query rows; keys: key positions; projected: key/value rows projected, 0 for a
    # cross decode step (its source is cached)
    rows, keys, projected = step_lengths(config)
    elements = float(terms.attention_map_elements * factor * scored_keys(config) / keys)
    # attention_map_bytes is 0 where the kernel keeps the map in tiles: it cannot spill.
    spills = cache_bytes is not None and terms.attention_map_bytes > cache_bytes
    kv = float(decode_kv_elements(config))
    copied = float(decode_kv_copied(config))
    weights = weight_elements(config)
    loop_heads = (config.batch * config.d * (rows * config.heads + projected * config.kv_heads)
                  if config.backend == "loop" else 0)
    decode = config.mode == "decode"  # one query row: its time is its cache reads
    ragged_rows = not decode and not aligned(config.m, config.head_dim)
    ragged = ragged_rows or not decode and not aligned(config.n, config.d)
    return {"flops": float(terms.flops_model),
            "train_flops": float(terms.flops_model) if config.mode == "train" else 0.0,
            "unaligned_flops": float(terms.flops_model) if ragged else 0.0,
            "map": elements,
            "unaligned_map": elements if ragged_rows else 0.0,
            "unaligned_rows": float(config.batch * config.heads * rows * factor)
            if ragged_rows else 0.0,
            "decode_scores": elements if decode else 0.0,
            "spill": elements if spills else 0.0, "kv": kv,
            "kv_spill": (kv + copied) * float(beyond(decode_working_set_bytes(config),
                                                     kv_cache_bytes)),
            "kv_copy": copied, "weights": float(weights * factor),
            "weights_gemm": float(weights * factor) if config.batch > 1 or not decode else 0.0,
            "weight_grads": float(weights) if config.mode == "train" else 0.0,
            "loop_heads": float(loop_heads),
            "heads": float(config.heads * factor), "const": float(factor),
            "projects_kv": float(factor) if projected else 0.0,
            "masked": float(factor) if config.masked and not masks_fused(config) else 0.0,
            "block_mask": float(block_mask_elements(config))}


def masks_fused(config: AttentionConfig) -> bool:
    """Whether ``config``'s backend builds and applies its key mask inside one compiled graph
    (:attr:`mhabench.core.backends.Backend.fuses_mask`): no per-call cost of its own."""
    return bool(backends.get(config.framework, config.backend).fuses_mask)


def beyond(size: np.ndarray | float, cache_bytes: float | None) -> np.ndarray | float:
    """The fraction of ``size`` bytes past a cache of ``cache_bytes`` (0 while they fit, or
    with no cache size): the part of a step's reads that comes from memory."""
    if cache_bytes is None:
        return 0.0 * size
    return np.clip(1.0 - cache_bytes / np.maximum(size, 1.0), 0.0, None)


def scored_keys(config: AttentionConfig) -> int:
    """Keys each query row of a step scores: its key positions
    (:func:`~mhabench.core.cost.step_lengths`), padded to whole tiles of
    :data:`~mhabench.core.backends.KEY_BLOCK` keys (fewer where there are fewer keys) by the
    JAX blockwise backend, which scores the padding too."""
    keys = step_lengths(config)[1]
    if config.framework != "jax" or config.backend != "blockwise":
        return keys
    return padded(keys, min(KEY_BLOCK, keys))


def aligned(*sizes: int) -> bool:
    """Whether every size is a multiple of :data:`ALIGN` or divides it (heads 4 or 8 wide
    fill a vector together)."""
    return all(size % ALIGN == 0 or ALIGN % size == 0 for size in sizes)


@dataclass(frozen=True)
class CellFeatures:
    """The features of a set of cells, computed once: the matrix without the spill terms,
    and what decides the spill terms for any cache size (so a fit can try every size
    without rebuilding configs)."""

    base: np.ndarray  # one row of FEATURES per cell; spill columns zero
    map_bytes: np.ndarray  # bytes of each cell's map as its kernel writes it (0: tiles)
    working_set: np.ndarray  # bytes each decode cell reads (decode_working_set_bytes); else 0

    @classmethod
    def of(cls, cells: pd.DataFrame) -> CellFeatures:
        configs = [config_from_row(r) for r in cells.to_dict("records")]
        base = np.array([[feature_values(c)[f] for f in FEATURES] for c in configs],
                        dtype=float).reshape(-1, len(FEATURES))
        maps = [cost(c).attention_map_bytes for c in configs]
        reads = [decode_working_set_bytes(c) for c in configs]
        return cls(base, np.array(maps, dtype=float), np.array(reads, dtype=float))

    def matrix(self, cache_bytes: float | None = None,
               kv_cache_bytes: float | None = None) -> np.ndarray:
        """The same as :func:`feature_values` row by row, for these cache sizes."""
        X = self.base.copy()
        if cache_bytes is not None:
            spills = self.map_bytes > cache_bytes
            X[spills, FEATURES.index("spill")] = X[spills, FEATURES.index("map")]
        X[:, FEATURES.index("kv_spill")] = kv_moved(X) * beyond(self.working_set,
                                                                 kv_cache_bytes)
        return X


def kv_moved(X: np.ndarray) -> np.ndarray:
    """Per row of a feature matrix: the K/V elements a decode step reads and copies, the
    count whose part past the cache is ``kv_spill``."""
    return X[:, FEATURES.index("kv")] + X[:, FEATURES.index("kv_copy")]


def feature_matrix(cells: pd.DataFrame, cache_bytes: float | None = None,
                   kv_cache_bytes: float | None = None) -> np.ndarray:
    """One row of :data:`FEATURES` per cell (cells hold the config columns)."""
    return CellFeatures.of(cells).matrix(cache_bytes, kv_cache_bytes)
