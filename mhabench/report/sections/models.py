"""The Models section: published models' attention layers (``benchmarks/bench_models.py``)
per model: the prompt's time at each length, a decode step's at each cache length and what
bounds it, the KV cache's bytes per token, the fastest backend per framework and the
projections' share of the FLOPs (:mod:`mhabench.analysis.model_cells`); and the Findings
line that reads its summary."""

from __future__ import annotations

import pandas as pd

from mhabench.analysis.model_cells import SHARES, fastest, model_rows
from mhabench.core.models import MODELS, model_shape
from mhabench.report.context import Context
from mhabench.report.render.formatting import size_text
from mhabench.report.render.palette import FRAMEWORK_NAMES
from mhabench.report.types import Section, Table

SECTION_ID = "models"  # its id in mhabench.report.build.SECTIONS
ABSENT = ("No model-shape cells in the results (benchmarks/bench_models.py: ModelPrefill, "
          "ModelDecode).")
WHERE = ["machine", "device", "dtype"]


def _shapes(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model and dtype timed: its shape and the KV cache's bytes per token."""
    out = []
    for (model, dtype), g in _in_order(rows).groupby(["model", "dtype"], sort=False):
        shape = model_shape(str(model))
        out.append({"model": model, "d": shape.hidden_size, "h": shape.num_attention_heads,
                    "kv heads": shape.num_key_value_heads, "p": shape.head_dim,
                    "scale": shape.scale if shape.scale is not None
                    else shape.head_dim ** -0.5,
                    "dtype": dtype,
                    "KV cache (bytes/token)": int(g["kv_bytes_per_token"].iloc[0]),
                    "source": shape.source})
    return pd.DataFrame(out)


def _in_order(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows by machine, device, dtype, then the models' table order (mhabench.core.models),
    the prompt before the decode step, length and framework."""
    rank = {name: i for i, name in enumerate(MODELS)}
    keys = rows.assign(_model=rows["model"].map(rank).fillna(len(rank)),
                       _step=rows["step"].map({"prefill": 0, "decode": 1}))
    return keys.sort_values(["machine", "device", "dtype", "_model", "_step", "length",
                             "framework"], kind="stable").drop(columns=["_model", "_step"])


def _summary(rows: pd.DataFrame) -> pd.DataFrame:
    best = _in_order(fastest(rows)).reset_index(drop=True)
    return pd.DataFrame({
        **{k: best[k] for k in WHERE}, "model": best["model"], "step": best["step"],
        "n or m": best["length"], "framework": best["framework"],
        "fastest backend": best["backend"], "time (ms)": best["time_ms"],
        "backends timed": best["backends"],
        "projections (% of FLOPs)": best["projections_pct"],
        "bound by": best["bound"],
        "bound share (%)": [r[f"share {r['bound']}"] if isinstance(r["bound"], str)
                              else float("nan") for r in best.to_dict("records")],
        "bound from": best["bound_source"],
        "KV cache (bytes/token)": best["kv_bytes_per_token"]})


def _cells(rows: pd.DataFrame) -> pd.DataFrame:
    names = {"length": "n or m", "time_ms": "time (ms)", "flops": "FLOPs",
             "gflop_s": "GFLOP/s", "projections_pct": "projections (% of FLOPs)",
             "kv_bytes_per_token": "KV cache (bytes/token)",
             "weights_mib": "weights read (MiB)", "kv_read_mib": "KV read (MiB)",
             "bound": "bound by", "bound_source": "bound from",
             **{s: s.replace("share ", "") + " (% of time)" for s in SHARES}}
    return _in_order(rows).reset_index(drop=True).rename(columns=names)


def models_section(ctx: Context) -> Section:
    rows = model_rows(ctx.results.frame, ctx.models,
                      ctx.order.commits if ctx.order is not None else None)
    if rows.empty:
        return Section("", "", absent=ABSENT)
    section = Section("", "", tables=[
        Table("summary", "Each model's fastest backend per framework, step and length",
              _summary(rows)),
        Table("shapes", "The models' attention shapes and KV cache per token (one layer)",
              _shapes(rows)),
        Table("cells", "Every model cell", _cells(rows), detail=True)])
    section.text.append(
        "One attention layer of each model at batch 1: the prompt (a causal forward pass "
        "over n tokens) and one decode step over a KV cache of m tokens. 'projections (% "
        "of FLOPs)' is the cost model's split of a step's FLOPs (the whole n x n map "
        "counted, as the eager backends compute it; a causal kernel skips about half of "
        "the attention part). A decode step is bound by the largest group of the time "
        "model's terms for its framework and backend (projection weights, KV cache read, "
        "the map, FLOPs, per call and head: 'bound from' time model), or where no time "
        "model was fitted, or it was fitted on narrower cells than the step (d, heads, "
        "kv heads or cache length beyond them: its byte terms were learnt from weights and "
        "caches that stay in the CPU's caches), by the larger of the bytes it reads, the "
        "weights or the KV cache ('bound from' bytes read).")
    return section


def _time(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1e3 else f"{ms / 1e3:.3g} s"


def _fw(name: str) -> str:
    return FRAMEWORK_NAMES.get(name, name)


def finding(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    """Per model on ``machine`` (float32 first, the CPU first): the fastest prompt at each
    length and decode step at each cache length, the decode step's bound, and the KV
    cache per token; None without model cells there."""
    section = sections.get(SECTION_ID)
    table = next((t.frame for t in section.tables if t.name == "summary"), None) if (
        section) else None
    if table is None or table.empty or not (table["machine"] == machine).any():
        return None
    mine = table[table["machine"] == machine]
    rank = 2 * (mine["dtype"] != "float32") + (mine["device"] != "cpu")
    where = mine.loc[rank.sort_values(kind="stable").index[0]]
    mine = mine[(mine["dtype"] == where["dtype"]) & (mine["device"] == where["device"])]
    parts = []
    for model, g in mine.groupby("model", sort=False):
        text = []
        for step in ("prefill", "decode"):
            best = g[g["step"] == step].sort_values("time (ms)").drop_duplicates("n or m")
            for r in best.sort_values("n or m").to_dict("records"):
                what = f"{step} n={r['n or m']}" if step == "prefill" else \
                    f"decode over m={r['n or m']}"
                item = (f"{what} {_time(r['time (ms)'])} ({_fw(r['framework'])} "
                        f"{r['fastest backend']})")
                if step == "decode":
                    item += (f", bound by {r['bound by']} ({r['bound share (%)']:.0f}% "
                             f"by the {r['bound from']})")
                text.append(item)
        kv = size_text(g["KV cache (bytes/token)"].iloc[0])
        parts.append(f"{model}: " + ", ".join(text) + f"; KV cache {kv}/token")
    return f"{where['device']} {where['dtype']}, batch 1: " + "; ".join(parts) + "."
