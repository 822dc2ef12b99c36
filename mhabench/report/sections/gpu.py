"""The GPU peak section: each kernel's rate at the shapes published sweeps use, as a percent
of the calibrated peak and of the spec sheet's, with the clocks and throttle state it ran
at (``mhabench.analysis.gpu_peak``)."""

from __future__ import annotations

import pandas as pd

from mhabench.analysis.gpu_peak import peak_rows, spec_sheet, state_text
from mhabench.report.context import Context
from mhabench.report.types import Plot, Section, Table

SHAPE = ["framework", "backend", "dtype", "causal", "batch", "n", "d", "heads", "kv_heads"]


def _round(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.round({"time ms": 3, "TFLOP/s": 1, "TB/s": 2,
                        "% calibrated": 1, "% spec": 1})


def _table(rows: pd.DataFrame, rate: str, rate_name: str, shape: list[str]) -> pd.DataFrame:
    out = rows[["machine", *shape]].copy()
    out["time ms"] = rows["time_ms"]
    out[rate_name] = rows[rate]
    out["% calibrated"] = rows["pct_calibrated"]
    out["% spec"] = rows["pct_spec"]
    out["GPU state"] = [state_text(s) for s in rows["state"]]
    return _round(out).sort_values(["machine", *shape]).reset_index(drop=True)


def _sheets(rows: pd.DataFrame) -> list[str]:
    lines = []
    for machine, gpu in rows[["machine", "gpu"]].drop_duplicates().itertuples(index=False):
        sheet = spec_sheet(gpu)
        if sheet is None:
            lines.append(f"{machine}: no spec sheet for GPU {gpu or 'unknown'!r}, so "
                         "'% spec' is empty; '% calibrated' still applies.")
        else:
            flops = ", ".join(f"{dt} {v / 1e12:g} TFLOP/s" for dt, v in sheet.flops.items())
            lines.append(f"{machine}: spec sheet {sheet.label}, dense {flops}, HBM "
                         f"{sheet.hbm_bytes_s / 1e12:g} TB/s.")
    return lines


def _state_lines(rows: pd.DataFrame) -> list[str]:
    states = [s for s in rows["state"] if s is not None]
    if not states:
        return ["No GPU state was recorded with these cells (results from before mhabench "
                "recorded clocks, or the load records were not imported)."]
    missing = [s for s in states if not s.get("available")]
    if missing:
        return [f"{len(missing)} of {len(rows)} cells have no GPU state: "
                f"{missing[0]['reason']}."]
    throttled = sum(bool(s["throttled"]) for s in states)
    low = min(s["sm_mhz"][0] for s in states if s.get("sm_mhz"))
    high = max(s["sm_mhz"][1] for s in states if s.get("sm_mhz"))
    return [f"SM clock before the samples: {low}-{high} MHz (maximum "
            f"{max(s['max_sm_mhz'] for s in states)} MHz); {throttled} of {len(states)} "
            "cells ran throttled (marked THROTTLED: a power or thermal reason was set, or "
            "NVML's violation counters grew during the samples). Clocks: "
            f"{states[0]['lock_note']}."]


def _warm_lines(rows: pd.DataFrame) -> list[str]:
    lines = []
    for _, row in rows[rows["warm_ms"].notna()].iterrows():
        lines.append(f"Cold against warm L2 ({row['machine']}, {row['framework']} "
                     f"{row['backend']} {row['mode']}, batch {row['batch']}, m {row['m']}): "
                     f"{row['time_ms']:.3f} ms cold, {row['warm_ms']:.3f} ms warm "
                     f"({row['time_ms'] / row['warm_ms']:.2f}x). Every other cell is "
                     "timed cold only.")
    return lines


def _plot(prefill: pd.DataFrame) -> list[Plot]:
    """TFLOP/s against n per kernel, one panel per machine, dtype and head width (MHA, the
    forward pass)."""
    plots = []
    mha = prefill[(prefill["mode"] == "forward") & (prefill["heads"] == prefill["kv_heads"])]
    for (machine, dtype, p, h, causal), group in mha.groupby(["machine", "dtype", "head_dim",
                                                              "heads", "causal"]):
        series = {}
        for (fw, backend), g in group.groupby(["framework", "backend"]):
            g = g.sort_values("n")
            if len(g) >= 2:
                series[f"{fw} {backend}"] = (g["n"].astype(float).tolist(),
                                             g["tflop_s"].astype(float).tolist())
        if series:
            title = (f"{machine}: {dtype}, h = {h}, head width {p}, forward"
                     f"{', causal' if causal else ''}, 16k tokens")
            plots.append(Plot(title, "sequence length n", "TFLOP/s (layer)", series,
                              logx=True))
    return plots


def gpu_section(ctx: Context) -> Section:
    rows = peak_rows(ctx.results.frame, ctx.calibration, ctx.results.machines, ctx.loads)
    if rows.empty:
        return Section("", "", absent="No GPU peak cells (benchmarks/bench_gpu.py): they run "
                       "on a CUDA grid, e.g. scripts/gpu-grid on a GPU machine (docs/gpu.md).")
    cells = rows[~rows["reference"]]  # the cold/warm reference is told in words
    decode = cells[cells["mode"] == "decode"]
    prefill = cells[cells["mode"] != "decode"]
    section = Section("", "", text=[
        "Rates at the shapes published attention sweeps use (16k tokens per step; decode "
        "over batch x KV length), each sample from a cold L2. TFLOP/s counts the FLOP "
        "model's layer (projections and attention; training 3x; causal: half the attention "
        "term, as FlashAttention counts); published kernel figures count attention alone, "
        "most of the layer from n = 2k on. '% calibrated' is of this "
        "machine's measured matmul peak (decode: copy bandwidth) for the framework and "
        "dtype; '% spec' of the spec sheet's dense peak (decode: HBM bandwidth)."])
    section.text += _sheets(rows) + _state_lines(rows) + _warm_lines(rows)
    if len(prefill):
        section.tables.append(Table("gpu-prefill", "Prefill and training: layer TFLOP/s "
                                    "per kernel", _table(prefill, "tflop_s", "TFLOP/s",
                                                         ["mode", *SHAPE])))
    if len(decode):
        section.tables.append(Table("gpu-decode", "Decode: TB/s read (cached K/V and "
                                    "weights) per backend",
                                    _table(decode, "tb_s", "TB/s",
                                           ["framework", "backend", "dtype", "batch", "m",
                                            "d", "heads", "kv_heads"])))
    section.plots = _plot(prefill) if len(prefill) else []
    return section
