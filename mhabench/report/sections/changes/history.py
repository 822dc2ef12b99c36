"""Sections across commits: regressions of ``time_`` cells, and shifts in memory and other
``track_`` values, each judged by the cell's commit-to-commit noise with whole-run offsets
set apart, and confirmed by re-measurement (``mhabench confirm``). See
:mod:`mhabench.analysis.history.regressions` for the rules."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence

import pandas as pd

from mhabench.analysis.history.change_points import GAMMA, Z_CANDIDATE, Z_HOLD
from mhabench.analysis.history.regressions import (
    TIME_KINDS,
    VALUE_KINDS,
    Order,
    Shift,
    Verdicts,
    commit_order,
    histories,
    regressions,
)
from mhabench.analysis.tracks import kernel_changes, kernels_by_commit
from mhabench.compare.rounds import CONFIRM_ROUNDS
from mhabench.measure.conditions.machine_load import DISTURBED_CORES
from mhabench.report.context import MAX_PLOTS, Context
from mhabench.report.types import Plot, Section, Table

CONFIRM_COMMAND = "mhabench confirm --results {results}"


def _order(ctx: Context) -> Order:
    return ctx.order if ctx.order is not None else commit_order(ctx.results.frame, None)


def _verdicts(ctx: Context, kinds: Iterable[str]) -> tuple[Order, Verdicts, int]:
    """The commit order, every shift of the cells of ``kinds`` judged, and how many cells
    have a history."""
    order = _order(ctx)
    cells = histories(ctx.results.frame, order, kinds)
    return order, regressions(cells, ctx.threshold, ctx.loads, ctx.confirmations,
                              order), len(cells)


def _scale(unit: str) -> tuple[float, str]:
    return (1e3, "ms") if unit == "seconds" else (1.0, unit)


def _row(shift: Shift) -> dict[str, object]:
    h = shift.history
    scale, unit = _scale(h.unit)
    before = shift.before
    return {"verdict": shift.verdict, "machine": h.machine, "environment": h.env_name,
            "benchmark": h.benchmark, "cell": h.cell, "unit": unit,
            "shift at commit": h.commits[shift.after][:8],
            "position": f"{shift.after + 1} of {len(h.commits)}",
            "previous commit": h.commits[before][:8],
            "level before": scale * shift.level_before, "level after": scale * shift.level_after,
            "shift (after/before)": shift.ratio, "noise SDs (z)": shift.z,
            "cell's noise between processes": shift.noise,
            "undisturbed commits (before, after)": f"{shift.support[0]}, {shift.support[1]}",
            "samples before": sample_summary([scale * v for v in h.samples[before] or ()],
                                             scale * h.values[before]),
            "samples after": sample_summary([scale * v for v in h.samples[shift.after] or ()],
                                            scale * h.values[shift.after]),
            "why": shift.reason, "asv cell": h.asv_cell}


def sample_summary(samples: Sequence[float] | None, value: float) -> str:
    """``n=10 median 50.1 (IQR 48.0-52.3)`` in the values' unit; the value alone without
    samples."""
    if not samples:
        return f"{value:.4g} (no samples)"
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [
        samples[0]] * 3
    return f"n={len(samples)} median {statistics.median(samples):.4g} (IQR {q[0]:.4g}-{q[2]:.4g})"


def history_plot(shift: Shift) -> Plot:
    """The cell's values in commit order, samples as dots, the shift as a dashed line."""
    h = shift.history
    scale, unit = _scale(h.unit)
    x = list(range(len(h.commits)))
    xs, ys = [], []
    for i, samples in enumerate(h.samples):
        xs += [float(i)] * len(samples or ())
        ys += [scale * v for v in samples or ()]
    return Plot(f"{h.benchmark} [{h.cell}] on {h.machine}: {shift.ratio:.2f}x at "
                f"{h.commits[shift.after][:8]} ({shift.verdict})", "commit (oldest first)",
                unit, {"value": ([float(i) for i in x], [scale * v for v in h.values])},
                dots={"samples": (xs, ys)} if xs else {},
                xticks=[c[:8] for c in h.commits], marks=[shift.after - 0.5], small=True)


def runs_table(verdicts: Verdicts) -> Table | None:
    """Each commit's run: how it moved as a whole, the load recorded, and the verdict."""
    rows = []
    for (machine, env, kind), runs in verdicts.runs.items():
        for run in runs:
            rows.append({"machine": machine, "environment": env, "kind": kind,
                         "commit": run.commit[:8], "position": run.position + 1,
                         "cells": run.cells, "run's level (x cells' own)": run.factor,
                         "beyond the runs beside it (x)": run.departure,
                         "cells moved with it": run.moved_share,
                         "other processes (cores, median cell)": run.other_cores,
                         "cells timed under load": run.disturbed_cells,
                         "run": ("moved as a whole" if run.moved else
                                 "timed under load" if run.loaded else "")})
    return Table("runs", "Each commit's run as a whole: its level against its cells' own "
                 "(1 = typical), how far beyond the runs on both sides it ran (a burst), "
                 "the share of cells that moved with it, and the load other processes put "
                 "on the machine while it timed", pd.DataFrame(rows)) if rows \
        else None


def _run_lines(verdicts: Verdicts) -> list[str]:
    out = []
    for (machine, env, kind), run in verdicts.disturbed_runs():
        held = sum(s.verdict == "disturbed" and s.history.commits[s.after] == run.commit
                   for s in verdicts.shifts if s.history.machine == machine)
        what = []
        if run.moved:
            what.append(f"ran {run.factor:.2f}x {'slower' if run.factor > 1 else 'faster'} "
                        f"than its cells' own levels, {run.moved_share:.0%} of its "
                        f"{run.cells} {kind} cells with it")
        if run.loaded:
            what.append(f"other processes took {run.other_cores:.2f} cores (median cell) "
                        "while it timed")
        out.append(f"The whole {kind} run of commit {run.commit[:8]} on {machine} ({env}) "
                   f"{' and '.join(what)}: a disturbed run, not a regression of each cell "
                   f"({held} cell shift(s) rest on it alone). Time it again on a quiet "
                   f"machine: asv run --record-samples --append-samples {run.commit[:8]}^!")
    return out


def groups_table(verdicts: Verdicts) -> Table | None:
    """Shifts shared by the cells of one framework/backend (all but noise)."""
    rows = [{"verdict": g.verdict, "machine": g.machine, "environment": g.env_name,
             "framework/backend": g.group, "shift at commit": g.after[:8],
             "previous commit": g.before[:8], "median cell's shift (after/before)": g.ratio,
             "noise SDs (z)": g.z, "cells": g.cells, "why": g.reason}
            for g in verdicts.groups if g.verdict != "noise"]
    return Table("groups", "Shifts shared by the cells of one framework/backend: the median "
                 "cell's change, judged against the SD of a median over that many cells",
                 pd.DataFrame(rows)) if rows else None


def _group_lines(verdicts: Verdicts) -> list[str]:
    return [f"{g.group} on {g.machine} moved {g.ratio:.2f}x at {g.after[:8]} over its {g.cells} "
            f"cells ({g.z:.1f} SDs of their median): {g.verdict}."
            for g in verdicts.groups if g.verdict in ("holds", "candidate")]


def _counts(verdicts: Verdicts) -> str:
    words = {"confirmed": "confirmed by re-measurement", "holds": "hold over the history",
             "candidate": "candidates", "cleared": "cleared by re-measurement",
             "disturbed": "rest only on disturbed runs", "noise": "within the noise"}
    return ", ".join(f"{verdicts.count(v)} {w}" for v, w in words.items())


def _rules(kind_text: str, order: Order, cells: int) -> str:
    return (
        f"{cells} {kind_text} cells have a history of two or more commits, ordered by "
        f"{order.source}. A cell's samples at one commit come from one asv process and "
        "scatter far less than separate processes do, so shifts are judged by the cell's "
        "noise between commits (the robust scale of its commit-to-commit changes, or its "
        "benchmark's if larger), after setting apart how each whole run moved (a median "
        "polish of the log values over cells and commits, backfitted without the "
        "backends' own shifts) and, where the load records say when each process started, "
        "the machine's state at that moment (the cells of other backends timed nearest "
        "it). asv's step detection (its Potts "
        f"solver, a new level costing {GAMMA:g} noise SDs, and detect_regressions at the "
        "threshold) finds the upward shifts. A shift holds when it is at least "
        f"{Z_HOLD:g} SDs of the difference of its two levels with two or more undisturbed "
        f"commits on each side; from {Z_CANDIDATE:g} SDs it is a candidate (at the newest "
        "commit, resting on one commit, or smaller). A change confined to one "
        "framework/backend moves all its cells at one commit: their median is judged the "
        "same way, by the scatter of a median of that many cells or, where larger, of "
        "the backends' median cells from commit to commit, and each of its cells that "
        "moved the same way takes its verdict. As in asv, higher is worse.")


def _kernel_at_shift(ctx: Context) -> Callable[[Shift], str]:
    """For a shift of a time_ cell, "flash → math" where the same config recorded another
    kernel at the shift's commit than at the commit before it, else ""."""
    frame = ctx.results.frame
    ids = (frame[frame["config_id"].notna()].drop_duplicates(["machine", "benchmark", "cell"])
           .set_index(["machine", "benchmark", "cell"])["config_id"].to_dict())
    kernels = kernels_by_commit(frame)

    def at(shift: Shift) -> str:
        h = shift.history
        config_id = ids.get((h.machine, h.benchmark, h.cell))
        k0, k1 = (kernels.get((h.machine, h.env_name, config_id, h.commits[i]))
                  for i in (shift.before, shift.after))
        return f"{k0} → {k1}" if k0 and k1 and k0 != k1 else ""
    return at


def kernel_changes_table(ctx: Context, order: Order) -> Table | None:
    changes = kernel_changes(ctx.results.frame, order.commits)
    if changes.empty:
        return None
    return Table("kernel-changes", "Cells whose recorded kernel changed between two commits, "
                 "with their time at both", pd.DataFrame({
                     "machine": changes["machine"], "config": changes["config_id"],
                     "previous commit": changes["before"].str[:8],
                     "commit": changes["after"].str[:8], "kernel": changes["kernels"],
                     "time before (ms)": 1e3 * changes["time before (s)"].astype(float),
                     "time after (ms)": 1e3 * changes["time after (s)"].astype(float),
                     "after/before": changes["time after (s)"].astype(float)
                     / changes["time before (s)"].astype(float)}))


def regressions_section(ctx: Context) -> Section:
    order, verdicts, cells = _verdicts(ctx, TIME_KINDS)
    if not cells:
        return Section("", "", absent="No time_ cell was measured at two or more commits of "
                                      "one machine and environment: nothing to compare.")
    section = Section("", "", facts={"verdicts": verdicts, "order": order})
    section.text.append(_rules("time_", order, cells))
    section.text += _run_lines(verdicts)
    section.text += _group_lines(verdicts)
    listed = verdicts.listed()
    section.text.append(f"{len(verdicts.shifts)} upward shift(s) of a cell of at least "
                        f"{ctx.threshold:g}x: {_counts(verdicts)}.")
    if any(s.verdict in ("candidate", "disturbed") for s in listed):
        section.text.append(
            "A candidate, or a shift resting on a disturbed run, is not yet a regression: "
            "re-measure it. `" + CONFIRM_COMMAND.format(results=ctx.results.root) + "` re-runs "
            "each of them (and every shift that holds) at the commits on either side in "
            f"{CONFIRM_ROUNDS} fresh interleaved rounds of processes (the gate's second "
            "stage) and saves "
            "the verdicts beside the results; build the report again and each reads "
            "confirmed or cleared.")
    loads = ("recorded" if ctx.loads else "not recorded (no records beside the results: "
             "runs of mhabench before its load records, or another folder)")
    section.text.append(f"Machine load while cells timed: {loads}; a cell counts as "
                        f"disturbed when other processes took {DISTURBED_CORES:g} cores "
                        "or more while it timed.")
    kernel = _kernel_at_shift(ctx)
    if listed:
        shifts = pd.DataFrame([_row(s) for s in listed])
        shifts.insert(shifts.columns.get_loc("shift (after/before)") + 1, "kernel",
                     [kernel(s) for s in listed])  # the kernel change beside the time change
        section.tables.append(Table("shifts", "Upward shifts: the verdict, where, how large "
                                    "against the cell's noise, the kernel where it changed, "
                                    "and the samples either side", shifts))
    changes = kernel_changes_table(ctx, order)
    if changes is not None:
        section.text.append(
            f"{len(changes.frame)} cell(s) recorded another kernel than at the commit before: "
            + "; ".join(f"{r['config']} {r['kernel']} at {r['commit']} "
                        f"({r['after/before']:.2f}x time)"
                        for r in changes.frame.head(4).to_dict("records"))
            + ("; ..." if len(changes.frame) > 4 else "") + ".")
    runs = runs_table(verdicts)
    if runs is not None:
        runs.detail = True
    section.tables += [t for t in (changes, groups_table(verdicts), runs) if t]
    shown = [s for s in listed if s.verdict in ("confirmed", "holds", "candidate")]
    section.plots = [history_plot(s) for s in shown[:MAX_PLOTS]]
    if len(shown) > MAX_PLOTS:
        section.text.append(f"History plots for the first {MAX_PLOTS} of {len(shown)} "
                            "confirmed, holding and candidate shifts.")
    return section


def values_section(ctx: Context) -> Section:
    order, verdicts, cells = _verdicts(ctx, VALUE_KINDS)
    if not cells:
        return Section("", "", absent="No peakmem_, mem_ or track_ cell was measured at two or "
                                      "more commits of one machine and environment.")
    section = Section("", "")
    section.text.append(_rules("peakmem_/mem_/track_", order, cells) + (
        " These hold one value per commit; peakmem_ is the whole process's peak RSS (imports "
        "included), so its shifts understate the step's own memory change in proportion; "
        "for track_ values asv counts higher as worse whatever the unit."))
    section.text += _run_lines(verdicts)
    section.text.append(f"{len(verdicts.shifts)} upward shift(s) of at least "
                        f"{ctx.threshold:g}x: {_counts(verdicts)}.")
    listed = verdicts.listed()
    if listed:
        section.tables.append(Table("shifts", "Upward shifts in memory and track_ values",
                                    pd.DataFrame([_row(s) for s in listed]).drop(
                                        columns=["samples before", "samples after"])))
        section.plots = [history_plot(s) for s in listed[:MAX_PLOTS]]
    return section
