"""Sections that compare configs differing in one field: scaling in n and d, self- vs
cross-attention, MHA/GQA/MQA, decoding with and without caches, forward vs training,
PyTorch vs JAX, and machines side by side."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.core.cost import TRAIN_FACTOR, decoder_step_flops
from mhabench.report.context import CONFIG_KEY, Context, head_sweeps, shape, sweep_plots
from mhabench.report.types import Plot, Section, Table


def _exponent_rows(t: pd.DataFrame, axis: str, others: tuple[str, ...]) -> list[dict]:
    rows = []
    for key, g in t.groupby(list(others), sort=True, dropna=False):
        if g[axis].nunique() < 2:
            continue
        x, y = np.log(g[axis].astype(float)), np.log(g["value"].astype(float))
        slope, _ = np.polyfit(x, y, 1)
        fx, fy = np.log(g[axis].astype(float)), np.log(g["flops_model"].astype(float))
        rows.append({**dict(zip(others, key, strict=True)), "axis": axis,
                     "values": ", ".join(map(str, sorted(g[axis].unique()))),
                     "measured exponent": slope,
                     "FLOP model exponent": np.polyfit(fx, fy, 1)[0], "_group": g})
    return rows


def scaling_section(ctx: Context) -> Section:
    t = ctx.timings[~ctx.timings["cross"].astype(bool)]
    base = ("machine", "framework", "backend", "device", "dtype", "mode", "batch", "heads",
            "kv_heads", "masked", "dropout")
    rows = _exponent_rows(t, "n", (*base, "d")) + _exponent_rows(t, "d", (*base, "n"))
    if not rows:
        return Section("", "", absent="No config measured at several n or several d with "
                                      "everything else fixed.")
    plots = []
    for axis in ("n", "d"):
        series = {f"{r['framework']}/{r['backend']} h={r['heads']}":
                  (r["_group"][axis].astype(float).tolist(), r["_group"]["time_ms"].tolist())
                  for r in rows if r["axis"] == axis}
        if series:
            plots.append(Plot(f"Time against {axis} (log-log; the slope is the exponent)",
                              axis, "time (ms)", dict(list(series.items())[:10]),
                              logx=True, logy=True))
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "_group"} for r in rows])
    keep = ["machine", "framework", "backend", "device", "mode", "batch", "heads", "n", "d",
            "axis", "values", "measured exponent", "FLOP model exponent"]
    table = table.reindex(columns=keep)  # an n-only or d-only grid lacks the other column
    section = Section("", "", tables=[Table("exponents", "Fitted exponents: time ~ axis^k",
                                            table)], plots=plots)
    for axis in ("n", "d"):
        sub = table[table["axis"] == axis]
        if len(sub):
            section.text.append(
                f"Time grows as {axis}^k with k from {sub['measured exponent'].min():.2f} to "
                f"{sub['measured exponent'].max():.2f} (FLOP model "
                f"{sub['FLOP model exponent'].min():.2f}-{sub['FLOP model exponent'].max():.2f}).")
    return section


def cross_section(ctx: Context) -> Section:
    t = ctx.timings
    cross = t[t["cross"].astype(bool)]
    if cross.empty:
        return Section("", "", absent="No cross-attention (cross=True) cells in the results.")
    on = ["machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "d",
          "heads", "kv_heads", "masked", "dropout"]
    selfs = t[~t["cross"].astype(bool)]
    pairs = cross.merge(selfs[[*on, "value", "flops_model"]], how="left", on=on,
                        suffixes=("", "_self"))
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "batch": pairs["batch"], "n (queries)": pairs["n"],
        "m (keys)": pairs["m"], "d": pairs["d"], "h": pairs["heads"],
        "cross (ms)": pairs["time_ms"], "self n=m (ms)": 1e3 * pairs["value_self"],
        "cross/self time": pairs["value"] / pairs["value_self"],
        "cross/self FLOPs": pairs["flops_model"].astype(float)
        / pairs["flops_model_self"].astype(float)})
    section = Section("", "", tables=[Table("cross", "Cross-attention (n queries over m keys) "
                                            "against self-attention over n", table)])
    section.text.append("Cross-attention's cost is linear in m for the scores and mixing and "
                        "the key/value projections (Exercise 7); the table compares each cross "
                        "cell with the self-attention cell of the same n where one was timed.")
    return section


def variants_section(ctx: Context) -> Section:
    t = ctx.timings
    key = ["machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "m",
           "d", "heads", "cross", "masked", "dropout"]
    rows = []
    for _, g in t.groupby(key, sort=True, dropna=False):
        if g["kv_heads"].nunique() < 2:
            continue
        mha = g[g["kv_heads"] == g["heads"]]["value"]
        for r in g.sort_values("kv_heads", ascending=False).to_dict("records"):
            rows.append({"machine": r["machine"], "framework": r["framework"],
                         "backend": r["backend"], "mode": r["mode"], "shape": shape(r),
                         "h": r["heads"], "kv heads": r["kv_heads"], "variant": r["variant"],
                         "time (ms)": r["time_ms"],
                         "time / MHA": r["value"] / mha.iloc[0] if len(mha) else np.nan,
                         "parameters": r["params"],
                         "KV cache (bytes/token)": r["kv_cache_bytes_per_token"]})
    if not rows:
        return Section("", "", absent="No config timed at several kv_heads (MHA/GQA/MQA).")
    table = pd.DataFrame(rows)
    section = Section("", "", tables=[Table("variants", "MHA, GQA and MQA: time, parameters "
                                            "and KV-cache bytes per token", table)])
    section.text.append("Fewer key/value heads shrink the key/value projections' parameters "
                        "and the KV cache by h/h_kv; the time column shows what that buys.")
    return section


def decoding_section(ctx: Context) -> Section:
    t = ctx.timings
    cache = _kv_cache_table(t)
    # Exercise 7.2's cached-source step; self-attention decode (a KV cache) is other work.
    dec = t[(t["mode"] == "decode") & t["cross"].astype(bool)]
    if dec.empty:
        if cache is not None:
            return cache
        return Section("", "", absent="No decode-mode (cached keys/values) cells in the "
                                      "results.")
    # Without a cache a decoder step projects the m source tokens again: the same config as
    # a forward cross-attention step of n new queries over m keys.
    on = ["machine", "framework", "backend", "device", "dtype", "batch", "n", "m", "d",
          "heads", "kv_heads", "masked", "dropout"]
    fwd = t[(t["mode"] == "forward") & t["cross"].astype(bool)]
    pairs = dec.merge(fwd[[*on, "value"]], how="left", on=on, suffixes=("", "_nocache"))
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "batch": pairs["batch"], "n (new tokens)": pairs["n"],
        "m (cached)": pairs["m"], "d": pairs["d"], "h": pairs["heads"],
        "kv heads": pairs["kv_heads"], "cached (ms)": pairs["time_ms"],
        "recomputed (ms)": 1e3 * pairs["value_nocache"],
        "recomputed/cached time": pairs["value_nocache"] / pairs["value"],
        "model FLOPs cached": [decoder_step_flops(int(r["d"]), int(r["m"]), int(r["heads"]),
                                                 int(r["kv_heads"]), True) * int(r["batch"])
                               * int(r["n"]) for r in pairs.to_dict("records")],
        "model FLOPs recomputed": [decoder_step_flops(int(r["d"]), int(r["m"]), int(r["heads"]),
                                                      int(r["kv_heads"]), False)
                                   * int(r["batch"]) * int(r["n"])
                                   for r in pairs.to_dict("records")]})
    table["model FLOP ratio"] = table["model FLOPs recomputed"] / table["model FLOPs cached"]
    section = Section("", "", tables=[Table("decode", "Decoder step with cached keys/values "
                                            "against recomputing them", table)])
    if table["recomputed (ms)"].isna().all():
        section.text.append("No matching forward cross-attention cells were timed, so only the "
                            "cached step and the model's FLOP ratio are shown.")
    else:
        section.text.append("Caching the projected source keys/values (Exercise 7.2) removes "
                            "the 4md(h_kv p) projection FLOPs from every step.")
    if cache is not None:
        section.tables[:0] = cache.tables
        section.text[:0] = cache.text
    return section


def _kv_cache_table(t: pd.DataFrame) -> Section | None:
    """Self-attention decode (one token over a KV cache of m) against the no-cache prefix
    step (attention recomputed over all m + 1 tokens), with the cache bytes each reads."""
    dec = t[(t["mode"] == "decode") & ~t["cross"].astype(bool)]
    if dec.empty:
        return None
    on = ["machine", "framework", "backend", "device", "dtype", "batch", "m", "d", "heads",
          "kv_heads"]
    prefix = t[t["mode"] == "prefix"]
    pairs = dec.merge(prefix[[*on, "value"]], how="left", on=on, suffixes=("", "_prefix"))
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "batch": pairs["batch"], "m (cached)": pairs["m"],
        "d": pairs["d"], "h": pairs["heads"], "kv heads": pairs["kv_heads"],
        "cache read (MiB)": pairs["kv_cache_bytes_read"].astype(float) / 2**20,
        "decode step (ms)": pairs["time_ms"],
        "cache read rate (GB/s)": pairs["kv_cache_bytes_read"].astype(float)
        / pairs["value"] / 1e9,
        "no cache, prefix (ms)": 1e3 * pairs["value_prefix"],
        "prefix/decode time": pairs["value_prefix"] / pairs["value"]})
    section = Section("", "", tables=[Table("kv-cache", "One decode step over a KV cache of m "
                                            "against recomputing the prefix", table)])
    section.text.append(
        "A decode step projects the new token's q, k and v, writes k and v into the cache at "
        "position m and attends over the m + 1 positions it holds; every timed call starts "
        "from the same fill level m. Its cost is reading the cache (2 h_kv p values per "
        "token): MHA against GQA/MQA shows what the smaller cache buys. The prefix step is "
        "decoding without a cache: attention over all m + 1 tokens again for one new token.")
    return section


def train_section(ctx: Context) -> Section:
    t = ctx.timings
    train, fwd = t[t["mode"] == "train"], t[t["mode"] == "forward"]
    if train.empty:
        return Section("", "", absent="No train-mode (forward + backward) cells in the "
                                      "results.")
    on = [k for k in CONFIG_KEY if k != "mode"]
    pairs = train.merge(fwd[[*on, "value"]], how="inner", on=on, suffixes=("", "_fwd"))
    if pairs.empty:
        return Section("", "", absent="Train-mode cells have no forward cell of the same "
                                      "config to compare with.")
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "shape": [shape(r) for r in pairs.to_dict("records")],
        "h": pairs["heads"], "forward (ms)": 1e3 * pairs["value_fwd"],
        "forward+backward (ms)": pairs["time_ms"],
        "ratio": pairs["value"] / pairs["value_fwd"]})
    section = Section("", "", tables=[Table("train", "Forward + backward against forward",
                                            table)])
    section.text.append(f"The cost model counts a training step as {TRAIN_FACTOR}x the forward "
                        f"FLOPs; measured ratios run from {table['ratio'].min():.2f} to "
                        f"{table['ratio'].max():.2f} (median {table['ratio'].median():.2f}).")
    return section


def frameworks_section(ctx: Context) -> Section:
    t = ctx.timings
    on = [k for k in CONFIG_KEY if k != "framework"]
    torch_, jax_ = t[t["framework"] == "torch"], t[t["framework"] == "jax"]
    pairs = torch_.merge(jax_[[*on, "value"]], how="inner", on=on, suffixes=("", "_jax"))
    if pairs.empty:
        return Section("", "", absent="No config timed in both PyTorch and JAX.")
    table = pd.DataFrame({
        "machine": pairs["machine"], "backend": pairs["backend"], "mode": pairs["mode"],
        "shape": [shape(r) for r in pairs.to_dict("records")], "h": pairs["heads"],
        "kv heads": pairs["kv_heads"], "PyTorch (ms)": pairs["time_ms"],
        "JAX (ms)": 1e3 * pairs["value_jax"], "JAX/PyTorch": pairs["value_jax"] / pairs["value"]})
    section = Section("", "", tables=[Table("torch-vs-jax", "The same configs in PyTorch and "
                                            "JAX", table)])
    med = table.groupby("backend")["JAX/PyTorch"].median()
    section.text.append("Median JAX/PyTorch time ratio per backend (below 1: JAX faster): "
                        + "; ".join(f"{b} {v:.2f}" for b, v in med.items()) + ".")
    sweeps = [(k, g) for k, g in head_sweeps(t) if k["mode"] == "forward"]
    section.plots = sweep_plots(sweeps, "time (ms)", lambda g: g["time_ms"].tolist(),
                                 "PyTorch and JAX against h")[:2]
    return section


def machines_section(ctx: Context) -> Section:
    t = ctx.timings
    if t["machine"].nunique() < 2:
        return Section("", "", absent="The results hold one machine.")
    pivot = t.pivot_table(index="config_id", columns="machine", values="time_ms",
                          aggfunc="median")
    pivot.columns = [f"{c} (ms)" for c in pivot.columns]
    pivot = pivot.dropna(thresh=2).reset_index()
    section = Section("", "", tables=[Table("machines", "Time per config on each machine",
                                            pivot)])
    if pivot.empty:
        section.text.append("No config was timed on more than one machine.")
    return section
