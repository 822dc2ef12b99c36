"""Sections across commits: regressions of ``time_`` cells (asv's step detection, confirmed
by asv's sample test), and steps in memory and other ``track_`` values (one value per
commit, asv publish's rule). See :mod:`mhabench.analysis.regressions` for the rules."""

from __future__ import annotations

import pandas as pd

from mhabench.analysis.regressions import (
    STEP_PENALTY,
    TIME_KINDS,
    VALUE_KINDS,
    Order,
    Step,
    commit_order,
    histories,
    regressions,
    sample_summary,
)
from mhabench.report.context import MAX_PLOTS, Context
from mhabench.report.types import Plot, Section, Table


def _order(ctx: Context) -> Order:
    return ctx.order if ctx.order is not None else commit_order(ctx.results.frame, None)


def _scale(unit: str) -> tuple[float, str]:
    return (1e3, "ms") if unit == "seconds" else (1.0, unit)


def _row(step: Step) -> dict[str, object]:
    h = step.history
    scale, unit = _scale(h.unit)
    before = step.before
    return {"machine": h.machine, "environment": h.env_name, "benchmark": h.benchmark,
            "cell": h.cell, "unit": unit,
            "step at commit": h.commits[step.after][:8],
            "position": f"{step.after + 1} of {len(h.commits)}",
            "previous commit": h.commits[before][:8],
            "level before": scale * step.level_before, "level after": scale * step.level_after,
            "step (after/before)": step.ratio,
            "samples before": sample_summary([scale * v for v in h.samples[before] or ()],
                                             scale * h.values[before]),
            "samples after": sample_summary([scale * v for v in h.samples[step.after] or ()],
                                            scale * h.values[step.after]),
            "asv test": step.test,
            "confirmed": "n/a" if step.confirmed is None else step.confirmed}


def history_plot(step: Step) -> Plot:
    """The cell's values in commit order, samples as dots, the step as a dashed line."""
    h = step.history
    scale, unit = _scale(h.unit)
    x = list(range(len(h.commits)))
    xs, ys = [], []
    for i, samples in enumerate(h.samples):
        xs += [float(i)] * len(samples or ())
        ys += [scale * v for v in samples or ()]
    return Plot(f"{h.benchmark} [{h.cell}] on {h.machine}: {step.ratio:.2f}x at "
                f"{h.commits[step.after][:8]}", "commit (oldest first)", unit,
                {"value": ([float(i) for i in x], [scale * v for v in h.values])},
                dots={"samples": (xs, ys)} if xs else {},
                xticks=[c[:8] for c in h.commits], marks=[step.after - 0.5], small=True)


def regressions_section(ctx: Context) -> Section:
    order = _order(ctx)
    cells = histories(ctx.results.frame, order, TIME_KINDS)
    if not cells:
        return Section("", "", absent="No time_ cell was measured at two or more commits of "
                                      "one machine and environment: nothing to compare.")
    steps = regressions(cells, ctx.threshold)
    confirmed = [s for s in steps if s.confirmed]
    section = Section("", "")
    section.text.append(
        f"{len(cells)} time_ cells have a history of two or more commits, ordered by "
        f"{order.source}. asv's step detection (asv.step_detect, as behind asv publish's "
        "regressions page) fits a level per run of commits, weighting each commit's median "
        "by its samples' 99% confidence interval; a new level must cut the weighted "
        f"deviation by {STEP_PENALTY:g} median CI half-width(s) (asv publish searches this "
        "penalty itself and then misses most steps in short histories). Each upward step "
        f"of at least {ctx.threshold:g}x that asv's detect_regressions keeps is tested "
        "between the commits on either side with asv's own test (asv._stats.is_different: "
        "Mann-Whitney U at p < 0.002 on the samples, as asv compare; with fewer samples, "
        "whether the 99% CIs overlap): confirmed only when the samples differ and the new "
        "commit is at least that factor slower. As in asv, higher is worse.")
    section.text.append(f"{len(steps)} upward step(s) found, {len(confirmed)} confirmed by "
                        "the samples." + ("" if len(steps) == len(confirmed) else
                                          " Unconfirmed steps need more samples per commit "
                                          "(asv run --append-samples) or are noise."))
    if steps:
        section.tables.append(Table("steps", "Upward steps: where, how large, the samples on "
                                    "both sides and asv's test",
                                    pd.DataFrame([_row(s) for s in steps])))
    shown = (confirmed or steps)[:MAX_PLOTS]
    section.plots = [history_plot(s) for s in shown]
    if len(confirmed or steps) > len(shown):
        section.text.append(f"History plots for the first {len(shown)} of them.")
    return section


def values_section(ctx: Context) -> Section:
    order = _order(ctx)
    cells = histories(ctx.results.frame, order, VALUE_KINDS)
    if not cells:
        return Section("", "", absent="No peakmem_, mem_ or track_ cell was measured at two or "
                                      "more commits of one machine and environment.")
    steps = regressions(cells, ctx.threshold, penalty=None, test=False)
    section = Section("", "")
    section.text.append(
        f"{len(cells)} peakmem_/mem_/track_ cells have a history of two or more commits "
        f"(ordered by {order.source}). They hold one value per commit and no samples, so no "
        "test can confirm a step: a cell is flagged when asv's step detection, run exactly as "
        "asv publish runs it, finds an upward step that detect_regressions keeps at "
        f"{ctx.threshold:g}x. peakmem_ is the whole process's peak RSS (imports included), "
        "so its steps understate the step's own memory change in proportion; for track_ "
        "values asv counts higher as worse whatever the unit.")
    if steps:
        section.tables.append(Table("steps", "Upward steps in memory and track_ values",
                                    pd.DataFrame([_row(s) for s in steps]).drop(
                                        columns=["samples before", "samples after",
                                                 "confirmed"])))
        section.plots = [history_plot(s) for s in steps[:MAX_PLOTS]]
    else:
        section.text.append("No upward step found.")
    return section
