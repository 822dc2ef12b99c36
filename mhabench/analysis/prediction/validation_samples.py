"""Several saved validations together: one row per sample, and the pooled tail against the
floor.

One sample of 24 configs says little about the worst error: its worst is the largest of 24
draws, and on a shared VM the machine alone moves a step by 20-50 % now and then. What can
be judged is the *rate* at which configs land past the worst-error goal, pooled over
samples, beside the same rate for the floor: grid cells timed with each sample (the
anchors) and compared with their own grid times, i.e. the errors of a model that
reproduced every grid cell exactly. Each anchor is judged against the drift measured by
the sample's other anchors, as each config is judged against a drift it took no part in.
From a rate, the chance that a sample of ``n`` configs has none past the goal is
``(1 - rate) ** n`` (independent draws).

Errors are the model's orientation throughout: ``|predicted / measured - 1|`` with the
measurement divided by the sample's drift (against the grid's day), and for an anchor its
grid time as the prediction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

# The worst-error goal for configs inside the fitted ranges on this machine type
# (docs/report.md, "validation"): what the tail is counted past.
WORST_GOAL = 0.35

SAMPLE_COLUMNS = ("machine", "seed", "box", "created", "configs", "inside", "drift",
                  "median (%)", "worst (%)", "inside median (%)", "inside worst (%)",
                  "FLOP model median (%)", "floor median (%)", "floor worst (%)")
TAIL_COLUMNS = ("machine", "samples", "what", "count", "median (%)", "p90 (%)",
                "past goal", "past goal (%)", "sample meets goal (%)")


def newest(validations: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The sample written last (by its ``created`` stamp): the one a report shows in full."""
    return max(validations, key=lambda d: str(d.get("created", "")))


def drift(data: Mapping[str, Any]) -> float | None:
    """The machine's drift since the grid that a saved validation measured (its anchors'
    median ratio), None where it timed no anchors."""
    return (data["summary"].get("anchored") or {}).get("drift") or None


def config_errors(data: Mapping[str, Any]) -> pd.DataFrame:
    """One saved validation's configs with ``error``: against the grid's day where the
    file measured the drift, else as measured (older files, or ``--anchors 0``)."""
    rows = pd.DataFrame(data["rows"])
    if rows.empty:
        return rows.assign(error=pd.Series(dtype=float))
    scale = drift(data) or 1.0
    return rows.assign(error=(rows["predicted_s"] * scale / rows["measured_s"] - 1).abs())


def floor_errors(data: Mapping[str, Any]) -> np.ndarray:
    """Each anchor's error as a prediction of its own grid time, against the drift of the
    sample's other anchors (none with fewer than two anchors)."""
    ratios = np.array([a["ratio"] for a in data.get("anchors", [])], dtype=float)
    if len(ratios) < 2:
        return np.array([])
    others = [np.median(np.delete(ratios, i)) for i in range(len(ratios))]
    return np.abs(np.array(others) / ratios - 1)


def samples_table(validations: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per saved validation: what it drew and its errors against the grid's day."""
    rows = []
    for data in validations:
        errors = config_errors(data)
        if errors.empty:
            continue
        inside = errors[~errors["extrapolated"].astype(bool)]
        floor = floor_errors(data)
        moved = drift(data)
        flop = (errors["flop_rate_s"] * (moved or 1.0) / errors["measured_s"] - 1).abs()
        rows.append({
            "machine": data.get("machine"), "seed": data.get("seed"), "box": data.get("box"),
            "created": str(data.get("created", ""))[:19], "configs": len(errors),
            "inside": len(inside),
            "drift": moved or np.nan,
            "median (%)": 100 * errors["error"].median(),
            "worst (%)": 100 * errors["error"].max(),
            "inside median (%)": 100 * inside["error"].median() if len(inside) else np.nan,
            "inside worst (%)": 100 * inside["error"].max() if len(inside) else np.nan,
            "FLOP model median (%)": 100 * flop.median(),
            "floor median (%)": 100 * np.median(floor) if len(floor) else np.nan,
            "floor worst (%)": 100 * floor.max() if len(floor) else np.nan})
    return pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))


def pooled_tail(validations: Sequence[Mapping[str, Any]], goal: float = WORST_GOAL,
                sample: int | None = None) -> pd.DataFrame:
    """Per machine, the configs inside the fitted ranges of every sample pooled, and the
    anchors pooled: median and 90th percentile error, how many lie past ``goal``, and the
    chance that a sample of ``sample`` configs (default: the files' median sample size)
    has none past it. Only files that measured the drift count (the floor needs it)."""
    by_machine: dict[str, list[Mapping[str, Any]]] = {}
    for data in validations:
        if drift(data) and data["rows"]:
            by_machine.setdefault(str(data.get("machine")), []).append(data)
    rows = []
    for machine, files in sorted(by_machine.items()):
        size = sample or int(np.median([d.get("sample") or len(d["rows"]) for d in files]))
        configs = pd.concat([config_errors(d) for d in files], ignore_index=True)
        inside = configs.loc[~configs["extrapolated"].astype(bool), "error"].to_numpy()
        floor = np.concatenate([floor_errors(d) for d in files])
        for what, errors in (("configs inside the fitted ranges", inside),
                             ("grid cells re-timed (the floor)", floor)):
            if not len(errors):
                continue
            past = int((errors > goal).sum())
            rate = past / len(errors)
            rows.append({"machine": machine, "samples": len(files), "what": what,
                         "count": len(errors), "median (%)": 100 * np.median(errors),
                         "p90 (%)": 100 * np.percentile(errors, 90), "past goal": past,
                         "past goal (%)": 100 * rate,
                         "sample meets goal (%)": 100 * (1 - rate) ** size,
                         "sample": size})
    return pd.DataFrame(rows, columns=[*TAIL_COLUMNS, "sample"])


def tail_line(tail: pd.DataFrame, goal: float = WORST_GOAL) -> str:
    """The pooled tail in words, one clause per machine (CLI-free: report and findings)."""
    parts = []
    for machine, rows in tail.groupby("machine", sort=True):
        model = rows[rows["what"].str.startswith("configs")]
        floor = rows[rows["what"].str.startswith("grid")]
        if model.empty:
            continue
        m = model.iloc[0]
        text = (f"{machine}: over {m['samples']} samples, {m['past goal']} of {m['count']} "
                f"configs inside the fitted ranges ({m['past goal (%)']:.1f}%) are more than "
                f"{100 * goal:.0f}% off (median {m['median (%)']:.1f}%), so a sample of "
                f"{m['sample']} meets a worst of {100 * goal:.0f}% "
                f"{m['sample meets goal (%)']:.0f}% of the time")
        if not floor.empty:
            f = floor.iloc[0]
            text += (f"; the grid's own cells re-timed: {f['past goal']} of {f['count']} "
                     f"({f['past goal (%)']:.1f}%, median {f['median (%)']:.1f}%), so a "
                     f"model that reproduced the grid exactly would meet it "
                     f"{f['sample meets goal (%)']:.0f}% of the time")
        parts.append(text)
    return "; ".join(parts)
