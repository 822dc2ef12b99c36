"""Published models' cells (``benchmarks/bench_models.py``) as the rows the report reads.

A cell of a model class names its model (the results frame's ``param_model`` column,
:data:`MODEL_COLUMN`) and times a prompt (mode forward, causal) or a decode step over a KV
cache. Per cell: its time at the machine's fast speed (:mod:`mhabench.analysis.fast_speed`),
the projections' share of its FLOPs (the cost model's split: the whole n x n map counted,
as the eager backends compute it; a causal kernel skips about half of the attention part),
the KV cache's bytes per token and, for a decode step, what bounds it: the time model's
terms (:mod:`mhabench.analysis.prediction.timemodel`) summed into :data:`TERM_GROUPS` where a model
was fitted for its framework and backend, else the bytes it reads (projection weights against
the KV cache, :mod:`mhabench.analysis.prediction.decode_reads`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from mhabench.analysis.fast_speed import fast_values
from mhabench.analysis.prediction.decode_reads import decode_kv_bytes, weight_elements
from mhabench.analysis.prediction.timemodel import Key, TimeModel
from mhabench.analysis.results import config_from_row, latest
from mhabench.core.config import DTYPE_BYTES, AttentionConfig
from mhabench.core.cost import cost

MODEL_COLUMN = "param_model"  # the model's name: the loader keeps the ``model`` parameter
STEPS = {"forward": "prefill", "decode": "decode"}
# The time model's terms by what a decode step spends its time on; every feature is in one
# (tests/test_model_cells.py).
TERM_GROUPS: dict[str, tuple[str, ...]] = {
    "projection weights": ("weights", "weights_gemm", "weight_grads"),
    "KV cache read": ("kv", "kv_copy", "kv_spill"),
    "the map": ("map", "unaligned_map", "unaligned_rows", "decode_scores", "spill"),
    "FLOPs": ("flops", "train_flops", "unaligned_flops"),
    "per call and head": ("heads", "const", "projects_kv", "masked", "block_mask",
                          "loop_heads"),
}
BY_BYTES = "bytes read"  # the source of a bound where no time model was fitted
BY_MODEL = "time model"
# The fields that set how many bytes a decode step reads. A time model fitted on cells
# narrower than the step learnt its byte terms from cache-resident weights and caches:
# beyond them it under-predicts, so its split is not a bound (docs/models.md).
BYTES_FIELDS = ("d", "heads", "kv_heads", "m")
SHARES = [f"share {g}" for g in TERM_GROUPS]  # percent of a decode step's time
DECODE_COLUMNS = ["weights_mib", "kv_read_mib", "bound", "bound_source", *SHARES]
COLUMNS = ["machine", "model", "framework", "backend", "device", "dtype", "step", "length",
           "time_ms", "flops", "gflop_s", "projections_pct", "kv_bytes_per_token",
           *DECODE_COLUMNS]


def model_cells(frame: pd.DataFrame, commits: Sequence[str] | None = None) -> pd.DataFrame:
    """The newest ``time_step`` measurement of each model cell per machine (newest by
    ``commits`` where given), ``value`` at the machine's fast speed; empty without any."""
    if MODEL_COLUMN not in frame.columns or frame.empty:
        return frame.iloc[0:0]
    rows = frame[(frame["kind"] == "time") & frame[MODEL_COLUMN].notna()
                 & frame["benchmark"].str.endswith(".time_step")
                 & frame["mode"].isin(list(STEPS))]
    rows = latest(rows, commits)
    return rows.assign(value=fast_values(rows)) if len(rows) else rows


def projections_share(config: AttentionConfig) -> float:
    """The projections' percent of a step's FLOPs (the cost model's: projections, scores
    and mixing, and the elementwise work on the map)."""
    terms = cost(config)
    return 100.0 * terms.flops_projections / terms.flops_total


def decode_shares(config: AttentionConfig, model: TimeModel | None
                  ) -> tuple[dict[str, float], str]:
    """Each of :data:`TERM_GROUPS`' percent of a decode step's time and where it comes
    from: ``model``'s terms where it was fitted on cells as wide as the step
    (:data:`BYTES_FIELDS`), else the bytes the step reads (projection weights against the
    KV cache as its backend lays it out; the other groups NaN)."""
    if model is not None and not widths_beyond(model, config):
        terms = model.terms(config)
        total = sum(terms.values())
        if total > 0:
            return ({g: 100.0 * sum(terms[f] for f in fs) / total
                     for g, fs in TERM_GROUPS.items()}, BY_MODEL)
    weights = weight_elements(config) * DTYPE_BYTES[config.dtype]
    kv = decode_kv_bytes(config)
    shares = dict.fromkeys(TERM_GROUPS, float("nan"))
    shares.update({"projection weights": 100.0 * weights / (weights + kv),
                   "KV cache read": 100.0 * kv / (weights + kv)})
    return shares, BY_BYTES


def widths_beyond(model: TimeModel, config: AttentionConfig) -> list[str]:
    """Each of :data:`BYTES_FIELDS` where ``config`` lies beyond ``model``'s fitted cells,
    as ``d=4096 > 256``."""
    out = []
    for name in BYTES_FIELDS:
        value, (_, hi) = getattr(config, name), model.ranges.get(name, (0, float("inf")))
        if value > hi:
            out.append(f"{name}={value} > {hi}")
    return out


def model_rows(frame: pd.DataFrame, models: Mapping[Key, TimeModel],
               commits: Sequence[str] | None = None) -> pd.DataFrame:
    """One row of :data:`COLUMNS` per model cell (:func:`model_cells`); empty (with the
    columns) without any. ``models``: the time models fitted to the same results."""
    cells = model_cells(frame, commits)
    out = []
    for row in cells.to_dict("records"):
        config = config_from_row(row)
        terms = cost(config)
        seconds = float(row["value"])
        item = {"machine": row["machine"], "model": row[MODEL_COLUMN],
                "framework": config.framework, "backend": config.backend,
                "device": config.device, "dtype": config.dtype, "step": STEPS[config.mode],
                "length": config.m if config.mode == "decode" else config.n,
                "time_ms": 1e3 * seconds, "flops": terms.flops_total,
                "gflop_s": terms.flops_total / seconds / 1e9,
                "projections_pct": projections_share(config),
                "kv_bytes_per_token": terms.kv_cache_bytes_per_token,
                **dict.fromkeys(DECODE_COLUMNS, np.nan)}
        if config.mode == "decode":
            key = (str(row["machine"]), config.framework, config.backend, config.device,
                   config.dtype)
            shares, source = decode_shares(config, models.get(key))
            item.update({f"share {g}": v for g, v in shares.items()},
                        weights_mib=weight_elements(config) * DTYPE_BYTES[config.dtype] / 2**20,
                        kv_read_mib=decode_kv_bytes(config) / 2**20,
                        bound=max(shares, key=lambda g: np.nan_to_num(shares[g], nan=-1.0)),
                        bound_source=source)
        out.append(item)
    return pd.DataFrame(out, columns=COLUMNS)


def fastest(rows: pd.DataFrame) -> pd.DataFrame:
    """Per machine, device, dtype, model, step, length and framework: the fastest backend's
    row, with how many backends were timed there (``backends``)."""
    if rows.empty:
        return rows.assign(backends=pd.Series(dtype=int))
    key = ["machine", "device", "dtype", "model", "step", "length", "framework"]
    ordered = rows.sort_values([*key, "time_ms"], kind="stable")
    best = ordered.drop_duplicates(key, keep="first").copy()
    counts = rows.groupby(key).size().rename("backends").reset_index()
    return best.merge(counts, on=key).reset_index(drop=True)

