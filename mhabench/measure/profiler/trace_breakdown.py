"""Offline region breakdown of saved profiler traces: where a step's time goes, per config.

Reads only files (``mhabench profile --logdir`` writes them; no live profiler, no torch or
JAX import):

- torch: ``*.pt.trace.json``. The ``record_function`` labels are ``user_annotation`` events
  (not nested); the step is the ``ProfilerStep#k`` annotation around them.
- JAX: ``*.trace.json.gz``, whose kernel events carry ``hlo_op``. An HLO op belongs to the
  named scopes found in the ``op_name`` metadata of the op and of every instruction fused
  into it (the saved compiled HLO text). When XLA fused several regions into one kernel,
  its time is reported under the fused group (e.g. ``scores+softmax``), never split by
  guess. The step is one execution of the module (events sharing a ``run_id``).

Each config gets one row per region (or fused group) and one ``other`` row for step time
outside every labelled region, so the shares of a config sum to 1.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# written beside each trace by mhabench.measure.profiler.profiling
META_FILE = "mhabench-profile.json"
OTHER = "other"  # step time outside every labelled region (python, reshapes, gaps)
CONFIG_COLUMNS = ["backend", "batch", "n", "m", "d", "heads", "kv_heads"]
COLUMNS = ["framework", "config_id", *CONFIG_COLUMNS, "region", "time_s", "share",
           "fused_group"]


class TraceError(ValueError):
    """A logdir or run folder that holds no usable trace."""


# ----- the table -------------------------------------------------------------------------
def find_runs(logdir: str | Path) -> list[Path]:
    """Run folders under ``logdir`` written by ``mhabench profile`` (sorted)."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        raise TraceError(f"trace folder {str(logdir)!r} does not exist or is not a folder")
    return sorted(p.parent for p in logdir.rglob(META_FILE))


def run_breakdown(run: str | Path) -> list[dict[str, Any]]:
    """Rows (see :data:`COLUMNS`) for one run folder."""
    run = Path(run)
    meta = json.loads((run / META_FILE).read_text())
    config = meta["config"]
    if config["framework"] == "torch":
        times, steps = _torch_region_times(run, meta)
    else:
        times, steps = _jax_region_times(run, meta)
    total = sum(times.values())
    if total <= 0:
        raise TraceError(f"{run}: the trace holds no step time")
    order = {r: i for i, r in enumerate([*meta["regions"], OTHER])}
    rows = []
    for region in sorted(times, key=lambda r: (r.count("+"), order.get(r.split("+")[0], 99),
                                               r == OTHER, r)):
        rows.append({"framework": config["framework"], "config_id": meta["config_id"],
                     **{c: config[c] for c in CONFIG_COLUMNS},
                     "region": region, "time_s": times[region] / steps,
                     "share": times[region] / total,
                     "fused_group": region if "+" in region else ""})
    return rows


def breakdown_table(logdir: str | Path) -> pd.DataFrame:
    """One row per (config, region) for every run under ``logdir``: columns
    framework, config_id, backend, batch, n, m, d, heads, kv_heads, region, time_s (seconds
    per step), share (of the step; a config's shares sum to 1) and fused_group (the regions
    XLA fused into one kernel, joined by ``+``, or "")."""
    import pandas as pd

    runs = find_runs(logdir)
    if not runs:
        raise TraceError(f"no mhabench traces under {str(logdir)!r} (no {META_FILE}; write "
                         "some with: mhabench profile --logdir DIR)")
    rows = [row for run in runs for row in run_breakdown(run)]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["framework", *CONFIG_COLUMNS, "config_id"], kind="stable",
                             ignore_index=True)


def format_table(frame: pd.DataFrame) -> str:
    """A readable text table: one line per config, region shares in percent."""
    # Columns: single regions in pipeline order (taken from the config that shows the most
    # of them separately), then fused groups, then other.
    singles = frame[~frame["region"].str.contains("+", regex=False) & (frame["region"] != OTHER)]
    by_config = sorted(singles.groupby("config_id", sort=False)["region"],
                       key=lambda item: -len(item[1]))
    regions = list(dict.fromkeys(r for _, group in by_config for r in group))
    regions += list(dict.fromkeys(frame.loc[frame["fused_group"] != "", "region"])) + [OTHER]
    wide = frame.pivot_table(index="config_id", columns="region", values="share",
                             sort=False).reindex(columns=regions)
    step_ms = frame.groupby("config_id", sort=False)["time_s"].sum() * 1e3
    lines = [["config", "step ms", *regions]]
    for config_id, shares in wide.iterrows():
        lines.append([config_id, f"{step_ms[config_id]:.2f}",
                      *("-" if shares[r] != shares[r] else f"{100 * shares[r]:.1f}%"
                        for r in regions)])
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    text = ["  ".join([row[0].ljust(widths[0])]
                      + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)])
            for row in lines]
    fused = sorted(set(frame.loc[frame["fused_group"] != "", "fused_group"]))
    if fused:
        text.append("")
        text.append("fused by XLA into single kernels: " + "; ".join(fused)
                    + " (their time is shown together, not split)")
    text.append(f"'{OTHER}': step time outside the labelled regions. Shares are of the "
                "profiled step; step ms is per step.")
    return "\n".join(text)


# ----- torch -----------------------------------------------------------------------------
def _load_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _one_file(run: Path, pattern: str) -> Path:
    files = sorted(run.glob(pattern))
    if len(files) != 1:
        raise TraceError(f"{run}: expected one {pattern} file, found {len(files)}")
    return files[0]


def _torch_region_times(run: Path, meta: dict[str, Any]) -> tuple[dict[str, float], int]:
    events = _load_json(_one_file(run, "*.pt.trace.json*")).get("traceEvents", [])
    # On a GPU the labels' device-side twins measure kernel time, not launch time.
    cat = "gpu_user_annotation" if meta["config"]["device"] == "cuda" else "user_annotation"
    regions = set(meta["regions"])
    times: dict[str, float] = defaultdict(float)
    step_us, steps = 0.0, 0
    for e in events:
        if e.get("ph") != "X":
            continue
        name = e.get("name", "")
        if e.get("cat") == "user_annotation" and name.startswith("ProfilerStep#"):
            step_us += e["dur"]
            steps += 1
        elif e.get("cat") == cat and name in regions:
            times[name] += e["dur"]
    if not steps:
        raise TraceError(f"{run}: no ProfilerStep annotations in the torch trace")
    times[OTHER] = max(step_us - sum(times.values()), 0.0)
    return {k: v * 1e-6 for k, v in times.items()}, steps


# ----- JAX -------------------------------------------------------------------------------
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_CALLS = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations)="
                    r"\{?(%?[\w.\-]+(?:,\s*%?[\w.\-]+)*)\}?")


def hlo_op_regions(hlo_text: str, regions: list[str]) -> dict[str, frozenset[str]]:
    """Map every HLO instruction name to the named scopes (among ``regions``) in the
    ``op_name`` metadata of the instruction and of all computations it calls (a fusion's
    fused instructions, a reduce's reducer, a loop's body)."""
    scope = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, regions)) + r")(?![\w])")
    own: dict[str, set[str]] = {}
    calls: dict[str, list[str]] = {}
    members: dict[str, list[str]] = defaultdict(list)  # computation -> its instructions
    computation = None
    for line in hlo_text.splitlines():
        if (m := _COMPUTATION.match(line)) and not line.startswith(" "):
            computation = m.group(1)
            continue
        if computation is None or not (m := _INSTRUCTION.match(line)):
            continue
        name = m.group(1)
        members[computation].append(name)
        found: set[str] = set()
        if op := _OP_NAME.search(line):
            path = op.group(1).split("/")[:-1]  # the last part is the primitive itself
            found = {r for part in path for r in scope.findall(part)}
        own[name] = found
        calls[name] = [c.lstrip("%") for group in _CALLS.findall(line)
                       for c in re.split(r",\s*", group)]

    resolved: dict[str, frozenset[str]] = {}

    def regions_of(name: str, seen: frozenset[str]) -> frozenset[str]:
        if name in resolved:
            return resolved[name]
        out = set(own.get(name, ()))
        for comp in calls.get(name, ()):
            for inner in members.get(comp, ()):
                if inner not in seen:
                    out |= regions_of(inner, seen | {inner})
        resolved[name] = frozenset(out)
        return resolved[name]

    return {name: regions_of(name, frozenset({name})) for name in own}


def _jax_region_times(run: Path, meta: dict[str, Any]) -> tuple[dict[str, float], int]:
    hlo_file = run / meta["hlo_file"]
    if not hlo_file.is_file():
        raise TraceError(f"{run}: the compiled HLO text {meta['hlo_file']} is missing")
    regions = list(meta["regions"])
    op_regions = hlo_op_regions(hlo_file.read_text(), regions)
    events = _load_json(_one_file(run, "*.trace.json.gz")).get("traceEvents", [])
    module = meta["hlo_module"]
    order = {r: i for i, r in enumerate(regions)}
    times: dict[str, float] = defaultdict(float)
    spans: dict[str, list[float]] = {}  # run_id -> [first start, last end] of one execution
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") != "X" or args.get("hlo_module") != module:
            continue
        if "run_id" in args:
            span = spans.setdefault(args["run_id"], [e["ts"], e["ts"] + e["dur"]])
            span[0], span[1] = min(span[0], e["ts"]), max(span[1], e["ts"] + e["dur"])
        if "hlo_op" in args:
            found = op_regions.get(args["hlo_op"], frozenset())
            group = "+".join(sorted(found, key=order.__getitem__)) if found else OTHER
            times[group] += e["dur"]
    if not times:
        raise TraceError(f"{run}: no {module} kernels in the JAX trace")
    steps = len(spans) or meta["steps"]
    labelled = sum(v for k, v in times.items() if k != OTHER)
    step_us = sum(end - start for start, end in spans.values())
    # Ops without a region and gaps between kernels are both outside the labels.
    times[OTHER] = max(step_us - labelled, times.get(OTHER, 0.0))
    return {k: v * 1e-6 for k, v in times.items()}, steps
