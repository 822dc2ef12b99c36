"""Sections that compare configs differing in one field: scaling in n and d, self- vs
cross-attention, MHA/GQA/MQA, decoding with and without caches, forward vs training,
PyTorch vs JAX, and machines side by side."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.core.cost import TRAIN_FACTOR, decoder_step_flops
from mhabench.report.context import (
    CONFIG_KEY,
    MIN_SWEEP,
    Context,
    exercise_sweeps,
    head_sweeps,
    shape,
)
from mhabench.report.types import Plot, Section, Table


def medians(table: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    """A summary: per ``by`` group, how many rows and the median of each of ``columns``."""
    out = table.groupby(by, sort=True)[columns].median()
    out.insert(0, "pairs", table.groupby(by, sort=True).size())
    return out.rename(columns={c: f"median {c}" for c in columns}).reset_index()


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


def _scaling_plot(rows: list[dict], axis: str, machine: str) -> Plot | None:
    """Time against ``axis`` on one machine: the slice (everything but framework/backend
    fixed) timed by the most backends, one line per framework/backend; sweeps of fewer
    than MIN_SWEEP values are left out."""
    rows = [r for r in rows if r["axis"] == axis and r["machine"] == machine
            and r["_group"][axis].nunique() >= MIN_SWEEP]
    if not rows:
        return None
    fixed = [k for k in ("device", "dtype", "mode", "batch", "heads", "n", "d", "kv_heads",
                         "masked", "dropout") if k != axis]
    slices: dict[tuple, list[dict]] = {}
    for r in rows:
        slices.setdefault(tuple(r[k] for k in fixed), []).append(r)
    key, chosen = max(slices.items(), key=lambda kv: (len(kv[1]), kv[0][4] == 8))
    where = ", ".join(f"{k} {v}" for k, v in zip(fixed[:6], key, strict=False))
    return Plot(f"Against {axis}: {where}", axis, "time (ms)",
                {f"{r['framework']}/{r['backend']}": (g[axis].astype(float).tolist(),
                                                      g["time_ms"].tolist())
                 for r in chosen if (g := r["_group"].sort_values(axis)) is not None},
                logx=True, logy=True)


def scaling_section(ctx: Context) -> Section:
    t = ctx.timings[~ctx.timings["cross"].astype(bool)]
    base = ("machine", "framework", "backend", "device", "dtype", "mode", "batch", "heads",
            "kv_heads", "masked", "dropout")
    rows = _exponent_rows(t, "n", (*base, "d")) + _exponent_rows(t, "d", (*base, "n"))
    if not rows:
        return Section("", "", absent="No config measured at several n or several d with "
                                      "everything else fixed.")
    plots = []
    for machine in sorted({r["machine"] for r in rows}):  # one figure: n and d side by side
        facets = [p for axis in ("n", "d") if (p := _scaling_plot(rows, axis, machine))]
        if facets:
            plots.append(Plot(f"Time against n and d on {machine} (log-log: the slope is the "
                              "exponent)", "", "time (ms)", {}, facets=facets))
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "_group"} for r in rows])
    keep = ["machine", "framework", "backend", "device", "mode", "batch", "heads", "n", "d",
            "axis", "values", "measured exponent", "FLOP model exponent"]
    table = table.reindex(columns=keep)  # an n-only or d-only grid lacks the other column
    summary = table.groupby(["machine", "axis", "framework", "backend"]).agg(**{
        "slices": ("values", "size"),
        "median exponent": ("measured exponent", "median"),
        "lowest": ("measured exponent", "min"), "highest": ("measured exponent", "max"),
        "FLOP model exponent": ("FLOP model exponent", "median")}).reset_index()
    section = Section("", "", plots=plots, tables=[
        Table("summary", "Fitted exponents per backend (time ~ axis^k; median over the "
              "slices timed)", summary),
        Table("exponents", "Fitted exponents: time ~ axis^k, every slice", table)])
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
    section = Section("", "", tables=[
        Table("summary", "Cross against self-attention per backend (medians over the pairs)",
              medians(table.dropna(subset=["cross/self time"]),
                      ["machine", "framework", "backend"],
                      ["cross/self time", "cross/self FLOPs"])),
        Table("cross", "Cross-attention (n queries over m keys) against self-attention over n",
              table, detail=True, rank="cross/self time")])
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
                         "KV cache (bytes/token)": r["kv_cache_bytes_per_token"],
                         "KV cache / MHA": r["kv_heads"] / r["heads"]})
    if not rows:
        return Section("", "", absent="No config timed at several kv_heads (MHA/GQA/MQA).")
    table = pd.DataFrame(rows)
    shrunk = table[table["variant"] != "mha"]
    section = Section("", "", tables=[
        Table("summary", "GQA and MQA against MHA per backend (medians over the configs)",
              medians(shrunk, ["machine", "framework", "backend", "variant"],
                      ["time / MHA", "KV cache / MHA"])),
        Table("variants", "MHA, GQA and MQA: time, parameters and KV-cache bytes per token",
              table, detail=True, rank="time / MHA")])
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
        "model FLOPs cached": _decoder_flops(pairs, cached=True),
        "model FLOPs recomputed": _decoder_flops(pairs, cached=False)})
    table["model FLOP ratio"] = table["model FLOPs recomputed"] / table["model FLOPs cached"]
    section = Section("", "", tables=[
        Table("summary", "Decoder step with cached source keys/values against recomputing "
              "them, per backend (medians)",
              medians(table, ["machine", "framework", "backend"],
                      ["recomputed/cached time", "model FLOP ratio"])),
        Table("decode", "Decoder step with cached keys/values against recomputing them",
              table, detail=True, rank="recomputed/cached time", rank_order="low")])
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


def _decoder_flops(pairs: pd.DataFrame, cached: bool) -> list[int]:
    """The model's FLOPs of each row's decoder step: batch x new tokens x one token's."""
    return [decoder_step_flops(int(r["d"]), int(r["m"]), int(r["heads"]), int(r["kv_heads"]),
                               cached, None if pd.isna(r.get("head_dim")) else
                               int(r["head_dim"])) * int(r["batch"]) * int(r["n"])
            for r in pairs.to_dict("records")]


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
    section = Section("", "", tables=[
        Table("kv-summary", "One decode step over a KV cache against recomputing the prefix, "
              "per backend (medians)",
              medians(table, ["machine", "framework", "backend"],
                      ["prefix/decode time", "cache read rate (GB/s)"])),
        Table("kv-cache", "One decode step over a KV cache of m against recomputing the prefix",
              table, detail=True, rank="prefix/decode time", rank_order="low")])
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
    section = Section("", "", tables=[
        Table("summary", "Forward + backward over forward per backend (medians)",
              medians(table, ["machine", "framework", "backend"], ["ratio"])),
        Table("train", "Forward + backward against forward", table, detail=True,
              rank="ratio")])
    section.text.append(f"The cost model counts a training step as {TRAIN_FACTOR}x the forward "
                        f"FLOPs; measured ratios run from {table['ratio'].min():.2f} to "
                        f"{table['ratio'].max():.2f} (median {table['ratio'].median():.2f}).")
    return section


def best_backends(ctx: Context) -> pd.DataFrame:
    """Each framework's backends at the Exercise 6.4 shape of each machine, fastest first:
    the geometric mean time over the head counts every backend there was timed at."""
    rows = []
    sweeps = exercise_sweeps(head_sweeps(ctx.timings))
    where: dict[tuple, list] = {}
    for key, group in sweeps:
        where.setdefault((key["machine"], key["device"], key["dtype"], shape(key)),
                         []).append((key, group))
    for (machine, device, dtype, shape_), found in where.items():
        common = set.intersection(*(set(g["heads"]) for _, g in found))
        for key, group in found:
            at = group[group["heads"].isin(common)]
            rows.append({"machine": machine, "device": device, "dtype": dtype,
                         "shape": shape_, "h": ", ".join(map(str, sorted(common))),
                         "framework": key["framework"], "backend": key["backend"],
                         "geometric mean (ms)": float(np.exp(np.log(at["time_ms"]).mean()))})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out = out.sort_values(["machine", "dtype", "framework", "geometric mean (ms)"])
    out["rank in framework"] = out.groupby(["machine", "dtype", "framework"]).cumcount() + 1
    return out.reset_index(drop=True)


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
    best = best_backends(ctx)
    top = best[best["rank in framework"] <= 3] if len(best) else best
    section = Section("", "", tables=[
        Table("best", "The three fastest backends of each framework at the Exercise 6.4 shape "
              "(geometric mean over h)", top),
        Table("summary", "JAX over PyTorch per backend (medians over the configs timed in "
              "both)", medians(table, ["machine", "backend"], ["JAX/PyTorch"])),
        Table("torch-vs-jax", "The same configs in PyTorch and JAX", table, detail=True,
              rank="JAX/PyTorch", rank_order="far from 1")])
    section.facts["best"] = best
    med = table.groupby("backend")["JAX/PyTorch"].median()
    section.text.append("Median JAX/PyTorch time ratio per backend (below 1: JAX faster): "
                        + "; ".join(f"{b} {v:.2f}" for b, v in med.items()) + ".")
    return section


def machines_section(ctx: Context) -> Section:
    t = ctx.timings
    if t["machine"].nunique() < 2:
        return Section("", "", absent="The results hold one machine.")
    # the same config on different machines: every field but the machine and its device
    same = t.assign(config=["-".join(p for i, p in enumerate(c.split("-")) if i != 2)
                            for c in t["config_id"]])  # ids read framework-backend-device-...
    pivot = same.pivot_table(index="config", columns="machine", values="time_ms",
                             aggfunc="median")
    pivot.columns = [f"{c} (ms)" for c in pivot.columns]
    pivot = pivot.dropna(thresh=2).reset_index()
    best = best_backends(ctx)
    section = Section("", "", tables=[
        Table("summary", "Each machine's fastest backends at its Exercise 6.4 shape",
              best[best["rank in framework"] == 1] if len(best) else best),
        Table("machines", "Time per config on each machine (the config's device aside)",
              pivot, detail=True)])
    if pivot.empty:
        section.text.append("No config was timed on more than one machine.")
    return section
