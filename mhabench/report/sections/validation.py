"""The time model on random configs off the grid: the samples ``mhabench validate --save``
wrote, the newest in full and, given several, one row per sample and the pooled tail
against the floor (:mod:`mhabench.analysis.prediction.validation_samples`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.prediction.validation import (
    PART_LABELS,
    anchored_line,
    as_read_line,
    common_scale_line,
    error_summary,
    part_line,
)
from mhabench.analysis.prediction.validation_samples import (
    WORST_GOAL,
    newest,
    pooled_tail,
    samples_table,
    tail_line,
)
from mhabench.report.context import Context
from mhabench.report.sections.model import PERCENT, percent_table, predicted_plot
from mhabench.report.types import Section, Table


def validation_section(ctx: Context) -> Section:
    validations = [d for d in ctx.validations if d["rows"]]
    if not ctx.validations:
        return Section("", "", absent="No random validation given: run mhabench validate "
                                      "--results DIR --save FILE.json on the results' machine "
                                      "and pass --validation FILE.json (several files: one "
                                      "row per sample and the pooled tail).")
    if not validations:
        return Section("", "", absent="The validation files hold no timed configs.")
    data = newest(validations)
    rows = pd.DataFrame(data["rows"])
    s = data["summary"]
    # as measured, then against the grid's day (each measurement over the machine's drift)
    sources = [(s, ""), *([(s["anchored"], ", against the grid's day")]
                          if s.get("anchored", {}).get("cells") else [])]
    summary = pd.DataFrame([{"configs": what + suffix, "cells": part[k].get("cells", 0),
                             **{PERCENT[c]: 100 * part[k][c] if part[k].get("cells") else np.nan
                                for c in PERCENT}}
                            for part, suffix in sources
                            for k, what in PART_LABELS.items() if k in part])
    pooled = pd.concat([pd.DataFrame(d["rows"]).assign(seed=d.get("seed"))
                        for d in validations], ignore_index=True)
    # per mode: a decode step's time is its reads, which depend on what stayed in a CPU cache
    # between calls, and its errors run higher than the others', which the overall median
    # hides
    by_mode = percent_table(error_summary(pooled, by=["mode"]))
    several = len(validations) > 1
    section = Section("", "", tables=[
        Table("summary", f"Relative error on the random configs of seed {data.get('seed')} "
              "(%)", summary),
        Table("by-mode", "Relative error per mode, as measured (%)"
              + (f", {len(validations)} samples pooled" if several else ""), by_mode),
        Table("random-configs", "Random configs off the grid, timed fresh: measured against "
              "predicted", _configs_table(pooled), detail=True, rank="error (%)",
              rank_order="far from 0")])
    section.text.append(_newest_text(data, rows))
    if several:
        tail = pooled_tail(validations)
        section.tables.insert(1, Table(
            "samples", "Each sample against the grid's day: errors and the floor (%)",
            samples_table(validations)))
        section.tables.insert(2, Table(
            "tail", f"Configs past the worst-error goal ({100 * WORST_GOAL:.0f}%), all "
            "samples pooled, against the floor", tail.drop(columns="sample")))
        section.text.append(
            f"{len(validations)} samples given. One sample's worst error is the largest of "
            "its draws, and the machine alone moves a step by 20-50 % now and then; pooled, "
            "the rate of configs past the goal can be set beside the floor's (each sample's "
            "grid cells re-timed, each judged against the drift of the others): "
            + (tail_line(tail) + "." if len(tail) else "no sample measured the drift."))
    section.plots.append(predicted_plot("Random configs: predicted against measured", pooled))
    return section


def _configs_table(rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "seed": rows["seed"], "config": rows["config_id"],
        "measured (ms)": 1e3 * rows["measured_s"], "predicted (ms)": 1e3 * rows["predicted_s"],
        "error (%)": 100 * rows["signed_error"], "FLOP model (ms)": 1e3 * rows["flop_rate_s"],
        "FLOP model error (%)": 100 * (rows["flop_rate_s"] / rows["measured_s"] - 1),
        "extrapolation": rows["extrapolation"].fillna("")})


def _newest_text(data: Mapping[str, Any], rows: pd.DataFrame) -> str:
    s = data["summary"]
    box = ("inside the ranges each model was fitted on" if data.get("box") == "fitted" else
           "from a box wider than the fitted ranges (each size from half the smallest to "
           "twice the largest fitted)")
    busy = data.get("other_cores")
    slowed = data.get("slowdown_median")
    return (
        f"{len(rows)} configs drawn at random (seed {data.get('seed')}) off the benchmark "
        f"grid (odd widths, head counts off the powers of two, n != m, GQA ratios, masking), "
        f"{box}, timed fresh"
        + (f", interleaved ({data['rounds']} rounds)" if data.get("rounds") else "")
        + (f", while other processes took {busy:.2f} cores" if busy is not None else "")
        + (f", each timing divided by the slowdown its speed probe read against the grid's "
           f"fast reading (median x{slowed:.2f}), as the grid's cells were"
           if slowed is not None else "")
        + f" on host {data.get('host')!r} against the models of machine "
        f"{data.get('machine')!r} ({data.get('created', '')[:19]}): the model could not have "
        "been tuned on them. Relative error, calibrated model: "
        + "; ".join(part_line(s[k], label) for k, label in PART_LABELS.items()) + "; "
        + anchored_line(s) + "; "
        + common_scale_line(s) + " (the machine's speed moves from day to day, by 20 % "
        "within half an hour on shared VMs: grid cells timed with the sample measure how "
        "far since the grid; a scale per model removes it too and leaves how each model "
        "follows the configs)."
        + (" " + as_read_line(data["as_read"]) + "." if data.get("as_read") else ""))
