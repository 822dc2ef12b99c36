"""asv results to one tidy pandas DataFrame, with the cost model's terms joined.

asv 0.6 writes ``<results>/<machine>/<sha8>-<env>.json``: ``result_columns`` name the
columns of each ``results[name]`` row; a row's values are a flat list in
``itertools.product(*params)`` order and params are repr strings; ``benchmarks.json`` at
the results root gives each benchmark's ``param_names``; ``machine.json`` describes each
machine. :func:`load_results` reads all of it (read only: nothing is ever written under
the results folder) into one row per benchmark x parameter cell x commit x machine x
environment. A damaged file, a benchmark missing from ``benchmarks.json`` or a cell that
failed becomes a warning naming the file (failed cells first), and the rest still loads;
only a missing or empty folder is an error. A cell asv skipped (n/a: not in this grid,
not supported, over the memory budget) is no warning: it is counted in
``Results.missing`` with every failed one.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost
from mhabench.core.grids import MODEL, POINT, cell_fields

CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(AttentionConfig))
COST_COLUMNS = tuple(cost(AttentionConfig()).as_dict())
# asv result_columns stats -> our column names (seconds for time_ benchmarks).
STAT_COLUMNS = {"stats_q_25": "q25", "stats_q_75": "q75", "stats_ci_99_a": "ci99_lo",
                "stats_ci_99_b": "ci99_hi", "stats_number": "number",
                "stats_repeat": "repeat"}
# ``samples``: the cell's raw samples (a tuple; asv run --record-samples) or None, for the
# regression section's significance test.
# ``asv_cell``: the cell as asv's tables name it (``name(repr, ...)``, what asv -b matches).
# ``date`` is the commit's date (asv's), ``started`` when the benchmark ran.
BASE_COLUMNS = ("machine", "commit", "date", "started", "env_name", "file", "benchmark", "kind",
                "unit", "cell", "asv_cell", "value", *STAT_COLUMNS.values(), "samples")
# A benchmark whose params name this field times an attention config; fields its params
# do not record take AttentionConfig's defaults (the chapter's batch 8, n 512, d 256),
# with a warning, since the results alone cannot tell what the benchmark fixed.
CONFIG_MARKER = "backend"
# Fields without a safe default (the benchmarks' convention records them all as params);
# m, kv_heads follow n, heads, and the rest default to a float32 CPU forward pass.
ESSENTIAL_FIELDS = ("framework", "backend", "batch", "n", "d", "heads")
# Fields whose None is a default that depends on others (head_dim: d / heads; scale:
# 1/sqrt(head_dim)): a frame holds them as numbers, NA where None (head_widths reads p).
OPTIONAL_FIELDS = ("head_dim", "scale")


# mhabench.measure.conditions.machine.FACTS_FILE and its numbered siblings
FACTS_PREFIX = "mhabench-machine"


class ResultsError(ValueError):
    """The results folder cannot be read at all (missing, empty, no benchmarks.json)."""


@dataclass
class Results:
    """Everything loaded from one asv results folder."""

    root: Path
    frame: pd.DataFrame  # one row per benchmark x cell x commit x machine x environment
    machines: dict[str, dict[str, Any]]  # machine name -> machine.json contents
    benchmarks: dict[str, dict[str, Any]]  # benchmarks.json, without its "version" key
    warnings: list[str] = field(default_factory=list)
    # cells without a value: (machine, commit, benchmark, cell, "skipped" | "failed")
    missing: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    # machine -> its fast speed-probe reading, where the frame's time rows carry the
    # moment's slowdown (mhabench.analysis.fast_speed; added by mhabench's CLI)
    fast_probe_s: dict[str, float] = field(default_factory=dict)
    # (commit, env, asv cell) -> CellLoad, where mhabench's CLI read the load records
    # (mhabench.measure.conditions.machine_load.read_records), so the report reads them once
    loads: dict[tuple[str, str, str], Any] | None = None

    @property
    def machine_names(self) -> list[str]:
        return sorted(set(self.machines) | set(self.frame["machine"].dropna()))


def parse_param(text: Any) -> Any:
    """asv stores each param value as its repr: ``"'torch'"``, ``"8"``, ``"True"``."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def benchmark_kind(name: str) -> str:
    """asv's benchmark type from the method name: time, track, peakmem, mem, timeraw."""
    method = name.rsplit(".", 1)[-1]
    return method.split("_", 1)[0] if "_" in method else method


@functools.lru_cache(maxsize=4096)
def _cost_terms(config: AttentionConfig) -> dict[str, int]:
    return cost(config).as_dict()


def config_from_cell(params: dict[str, Any]) -> AttentionConfig | None:
    """The config a cell times, or None for benchmarks that do not time a config
    (calibration); raises ValueError (from AttentionConfig) for an invalid combination."""
    if CONFIG_MARKER not in params:
        return None
    return AttentionConfig(**{k: v for k, v in params.items() if k in CONFIG_FIELDS})


def head_widths(frame: pd.DataFrame) -> pd.Series:
    """Each row's head width p: its ``head_dim``, or d / heads where that is left at its
    default (None in ``AttentionConfig.to_dict``, NA in the frame)."""
    split = frame["d"] // frame["heads"]
    return split if "head_dim" not in frame else frame["head_dim"].fillna(split)


def config_from_row(row: Any) -> AttentionConfig:
    """The config of one row of the results frame (pandas hands back numpy scalars, and
    float columns where other rows lack the field, so each field is coerced back)."""
    values = {k: row[k] for k in CONFIG_FIELDS if k not in OPTIONAL_FIELDS}
    for k in ("batch", "n", "m", "d", "heads", "kv_heads"):
        values[k] = int(values[k])
    for k in OPTIONAL_FIELDS:  # absent, or NaN/NA where other rows set them: the default
        value = row.get(k) if hasattr(row, "get") else None
        if value is not None and not pd.isna(value):
            values[k] = (int if k == "head_dim" else float)(value)
    values["dropout"] = float(values["dropout"])
    values["cross"], values["masked"] = bool(values["cross"]), bool(values["masked"])
    return AttentionConfig(**values)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)


def _column(row: dict[str, Any], key: str, index: int) -> Any:
    values = row.get(key)
    if not isinstance(values, list) or index >= len(values):
        return None
    value = values[index]
    return value if _finite(value) else None


def _samples(row: dict[str, Any], index: int) -> tuple[float, ...] | None:
    values = row.get("samples")
    if not isinstance(values, list) or index >= len(values):
        return None
    cell = values[index]
    if not isinstance(cell, list):
        return None
    kept = tuple(float(v) for v in cell if _finite(v))
    return kept or None


def _read_json(path: Path, root: Path, warnings: list[str]) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)  # Python's json reads asv's NaN and Infinity
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warnings.append(f"{path.relative_to(root)}: not readable JSON ({exc}); skipped")
        return None


def _load_benchmarks(root: Path) -> dict[str, dict[str, Any]]:
    path = root / "benchmarks.json"
    if not path.is_file():
        raise ResultsError(f"{path} is missing: without it the benchmarks' parameter names "
                           "are unknown (asv run --bench just-discover writes it)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path} is not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ResultsError(f"{path} is not an asv benchmarks.json (not a JSON object)")
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _cell_rows(path: Path, root: Path, data: dict[str, Any],
               benchmarks: dict[str, dict[str, Any]], warnings: list[str],
               missing: list[tuple[str, str, str, str, str]], failures: list[str]
               ) -> list[dict[str, Any]]:
    rel = str(path.relative_to(root))
    header = {"machine": data.get("params", {}).get("machine") or path.parent.name,
              "commit": data["commit_hash"], "date": data.get("date"),
              "env_name": data.get("env_name", ""), "file": rel}
    columns = data["result_columns"]
    unknown, rows = [], []
    for name, values in data["results"].items():
        if name not in benchmarks:
            unknown.append(name)
            continue
        if not isinstance(values, list):
            warnings.append(f"{rel}: benchmark {name}: malformed row; skipped")
            continue
        row = dict(zip(columns, values, strict=False))  # trailing Nones dropped
        rows.extend(_benchmark_rows(rel, name, row, benchmarks[name], header, warnings,
                                    missing, failures))
    if unknown:
        warnings.append(f"{rel}: {len(unknown)} benchmark(s) not in benchmarks.json "
                        f"(removed from the suite?) skipped: {', '.join(sorted(unknown))}")
    return rows


def _benchmark_rows(rel: str, name: str, row: dict[str, Any], spec: dict[str, Any],
                    header: dict[str, Any], warnings: list[str],
                    lost: list[tuple[str, str, str, str, str]], failures: list[str]
                    ) -> list[dict[str, Any]]:
    """The rows of one benchmark's cells in one results file. A cell without a value goes
    to ``lost`` (skipped or failed); the failed ones also make a warning in ``failures``."""
    params = row.get("params") or []
    names = spec.get("param_names") or []
    result = row.get("result")
    if not isinstance(result, list):
        result = [result]
    expected = math.prod(len(p) for p in params)
    if len(names) != len(params) or len(result) != expected:
        warnings.append(f"{rel}: benchmark {name}: {len(result)} values for {len(params)} "
                        f"params ({expected} cells) and param_names {names}; skipped")
        return []
    base = {**header, "benchmark": name, "kind": benchmark_kind(name),
            "unit": spec.get("unit", ""), "started": row.get("started_at")}
    # a design's point, or a model's name, records them all
    if CONFIG_MARKER in names and not {POINT, MODEL} & set(names):
        unrecorded = [f for f in ESSENTIAL_FIELDS if f not in names]
        note = (f"benchmarks.json: benchmark {name}: params do not record config field(s) "
                f"{', '.join(unrecorded)}; AttentionConfig defaults assumed for them")
        if unrecorded and note not in warnings:
            warnings.append(note)
    out, failed, invalid = [], [], []
    for index, combo in enumerate(itertools.product(*params)):
        # a design's point (a dict of config fields) spread into its fields, a model's
        # name followed by its shape's (the name kept: the param_model column)
        raw = dict(zip(names, (parse_param(v) for v in combo), strict=True))
        try:
            cell, unknown = cell_fields(raw), None
        except ValueError as exc:  # a model no longer in mhabench.core.models
            cell, unknown = raw, exc
        label = ", ".join(f"{k}={v}" for k, v in cell.items())
        if not _finite(result[index]):
            # asv stores NaN for a skipped cell (NotImplementedError: not in this grid, not
            # supported, over the memory budget) and null for one that failed
            status = "failed" if result[index] is None else "skipped"
            lost.append((header["machine"], header["commit"], name, label, status))
            if status == "failed":
                failed.append(label or "(no params)")
            continue
        if unknown is not None:
            invalid.append(f"{label} ({unknown})")
            continue
        try:
            config = config_from_cell(cell)
        except ValueError as exc:
            invalid.append(f"{label} ({exc})")
            continue
        record = {**base, "cell": label, "asv_cell": f"{name}({', '.join(combo)})"
                  if combo else name, "value": float(result[index]),
                  **{col: _column(row, key, index) for key, col in STAT_COLUMNS.items()},
                  "samples": _samples(row, index),
                  **{(k if k in CONFIG_FIELDS else f"param_{k}"): v for k, v in cell.items()}}
        if config is not None:
            record.update(config.to_dict(), config_id=config.id, variant=config.variant,
                          **_cost_terms(config))
        out.append(record)
    if failed:
        failures.append(f"{rel}: benchmark {name}: {len(failed)} of {expected} cells failed "
                        f"(no value), e.g. {'; '.join(failed[:3])}"
                        + (" ..." if len(failed) > 3 else ""))
    if invalid:
        warnings.append(f"{rel}: benchmark {name}: {len(invalid)} cells are not valid configs; "
                        f"skipped: {'; '.join(invalid[:3])}")
    return out


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    extra = sorted({k for r in rows for k in r if k.startswith("param_")})
    columns = [*BASE_COLUMNS, *CONFIG_FIELDS, "config_id", "variant", *COST_COLUMNS, *extra]
    frame = pd.DataFrame(rows, columns=columns)
    frame["date"] = pd.to_datetime(frame["date"], unit="ms")
    frame["started"] = pd.to_datetime(frame["started"], unit="ms")
    for col in ("batch", "n", "m", "d", "heads", "kv_heads", "head_dim", *COST_COLUMNS):
        frame[col] = frame[col].astype("Int64")
    return frame


def load_results(root: str | Path, machine: str | None = None) -> Results:
    """Load every asv results file under ``root`` (all machines, commits, environments).

    ``machine`` keeps one machine's results (ResultsError naming the machines present if
    it has none). Problems with single files are collected in ``Results.warnings``.
    """
    root = Path(root)
    if not root.is_dir():
        raise ResultsError(f"results folder {str(root)!r} does not exist or is not a folder")
    benchmarks = _load_benchmarks(root)
    warnings: list[str] = []
    machines: dict[str, dict[str, Any]] = {}
    files = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        info = folder / "machine.json"
        if info.is_file():
            data = _read_json(info, root, warnings)
            machines[folder.name] = data if isinstance(data, dict) else {}
        # mhabench's own facts beside asv's machine.json (GPU, versions;
        # mhabench.measure.conditions.machine): the newest file wins.
        for facts_file in sorted(folder.glob(f"{FACTS_PREFIX}*.json"),
                                 key=lambda p: p.stat().st_mtime):
            facts = _read_json(facts_file, root, warnings)
            if isinstance(facts, dict):
                machines.setdefault(folder.name, {})["facts"] = facts
        files.extend(sorted(p for p in folder.glob("*.json")
                            if p.name != "machine.json" and not p.name.startswith(FACTS_PREFIX)))
    if not files:
        raise ResultsError(f"results folder {str(root)!r} holds no asv results files "
                           "(expected <machine>/<commit>-<env>.json)")
    if machine is not None:
        present = sorted(set(machines) | {f.parent.name for f in files})
        if machine not in present:
            raise ResultsError(f"machine {machine!r} is not in {str(root)!r}; "
                               f"machines there: {', '.join(present)}")
        files = [f for f in files if f.parent.name == machine]
        machines = {k: v for k, v in machines.items() if k == machine}
    rows: list[dict[str, Any]] = []
    missing: list[tuple[str, str, str, str, str]] = []
    failures: list[str] = []  # warnings of failed cells, listed first
    for path in files:
        data = _read_json(path, root, warnings)
        if data is None:
            continue
        lacking = [k for k in ("commit_hash", "result_columns", "results")
                   if not isinstance(data, dict) or k not in data]
        if lacking:
            warnings.append(f"{path.relative_to(root)}: not an asv results file "
                            f"(missing {', '.join(lacking)}); skipped")
            continue
        info = machines.setdefault(path.parent.name, {})
        if isinstance(data.get("params"), dict) and (data.get("date") or 0) >= info.get(
                "versions_date", 0):  # the newest environment's framework versions
            info.update(versions=data["params"], versions_date=data.get("date") or 0)
        rows.extend(_cell_rows(path, root, data, benchmarks, warnings, missing, failures))
    return Results(root, _frame(rows), machines, benchmarks, failures + warnings, missing)


def latest(frame: pd.DataFrame, commits: Sequence[str] | None = None) -> pd.DataFrame:
    """The newest measurement of each cell per machine: what the model sections use. Newest
    by ``commits`` (oldest first, e.g. the git history's order) where given, else and among
    one commit's files by the results file's date: commits made or rebased within one second
    share a date. A partial ``asv run --bench`` at a newer commit replaces only the cells it
    ran; cells timed in several environments keep the newest."""
    if frame.empty:
        return frame
    if commits is None:
        order = frame.sort_values("date", kind="stable")
    else:
        rank = {c: i for i, c in enumerate(commits)}
        order = (frame.assign(_rank=frame["commit"].map(rank).fillna(-1))
                 .sort_values(["_rank", "date"], kind="stable").drop(columns="_rank"))
    return order.drop_duplicates(["machine", "benchmark", "cell"], keep="last")


# ----- calibration ------------------------------------------------------------------------
def calibration_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Each machine's best matmul rate (GFLOP/s) and copy bandwidth (GB/s) per framework,
    device and dtype, from its newest results of the calibration benchmarks (time_matmul
    with a ``size`` param, time_copy with ``mib``; see mhabench.measure.calibration)."""
    from mhabench.measure.calibration import copy_bytes, matmul_flops

    columns = ["machine", "framework", "device", "dtype", "peak_gflops", "bandwidth_gbs"]
    method = frame["benchmark"].str.rsplit(".", n=1).str[-1]
    rows = latest(frame[(frame["kind"] == "time") & method.isin(["time_matmul", "time_copy"])])
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows = rows.assign(peak_gflops=float("nan"), bandwidth_gbs=float("nan"))
    for index, row in rows.iterrows():
        if row["benchmark"].endswith("time_matmul") and pd.notna(row.get("param_size")):
            rows.loc[index, "peak_gflops"] = matmul_flops(int(row["param_size"])) / row["value"]
        elif row["benchmark"].endswith("time_copy") and pd.notna(row.get("param_mib")):
            rows.loc[index, "bandwidth_gbs"] = copy_bytes(int(row["param_mib"])) / row["value"]
    rows[["peak_gflops", "bandwidth_gbs"]] /= 1e9
    rows = rows.fillna({"framework": "torch", "device": "cpu", "dtype": "float32"})
    out = rows.groupby(columns[:4], as_index=False)[columns[4:]].max()
    return out[columns]
