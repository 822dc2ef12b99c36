"""Put asv results from elsewhere beside this machine's: another machine's (a GPU run's
``results.tar.gz``, or a results folder), so ``mhabench report`` shows the machines side
by side, and the shards of one grid (``mhabench.cluster.shard``), whose cells of one
machine, commit and environment are unioned into one results file.

Nothing already there is lost or overwritten: new files are copied; identical files are
left alone; ``benchmarks.json`` gains the benchmarks it lacked (existing entries kept); a
results file of the same commit and environment gains the cells it lacked (values,
samples and stats as their shard recorded them; the benchmark's duration summed). The
merge stops before anything is written, naming the files, when a cell has other values
in two of them, when two ``machine.json`` differ, or when another file differs (import
under another machine name with ``as_machine``).
"""

from __future__ import annotations

import json
import math
import shutil
import tarfile
import tempfile
from pathlib import Path

from mhabench.analysis.fast_speed import beside_results
from mhabench.asvproject.result_files import BENCHMARKS, cell_names, measured, result_rows
from mhabench.measure.conditions.machine_load import FOLDER as LOAD


class MergeError(ValueError):
    """The merge would lose or overwrite something, or its source is not asv results."""


def _results_root(src: Path, scratch: Path) -> Path:
    """The results folder inside ``src`` (a tarball is unpacked into ``scratch``)."""
    if src.is_file():
        if not tarfile.is_tarfile(src):
            raise MergeError(f"{str(src)!r} is neither a results folder nor a tarball")
        with tarfile.open(src) as tar:
            tar.extractall(scratch, filter="data")
        src = scratch
    candidates = [p.parent for p in src.rglob(BENCHMARKS)]
    if len(candidates) != 1:
        raise MergeError(f"{str(src)!r} holds {len(candidates)} asv results folders "
                         f"(folders with {BENCHMARKS}); expected one")
    return candidates[0]


def _rename_machine(folder: Path, new: str) -> None:
    """Rewrite one machine folder's files to the machine name ``new`` (in place, in the
    scratch copy)."""
    for path in folder.glob("*.json"):
        data = json.loads(path.read_text())
        if path.name == "machine.json":
            data["machine"] = new
        elif isinstance(data.get("params"), dict):
            data["params"]["machine"] = new
        path.write_text(json.dumps(data))


# result_columns holding one entry per parameter cell
PER_CELL = ("result", "samples")


def _is_cell_column(column: str) -> bool:
    return column in PER_CELL or column.startswith("stats_")


def _same_value(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                      and math.isnan(b))


def union_results(ours: dict, theirs: dict, ours_name: str, theirs_name: str) -> dict:
    """One asv results file holding the cells of two shards of one machine, commit and
    environment; a cell with other values in both is an error naming both files."""
    for key in ("commit_hash", "env_name", "result_columns"):
        if ours.get(key) != theirs.get(key):
            raise MergeError(f"{ours_name} and {theirs_name} differ in {key} "
                             f"({ours.get(key)!r} != {theirs.get(key)!r}): not shards of "
                             "one run; nothing was merged")
    columns = ours["result_columns"]
    mine, other = result_rows(ours), result_rows(theirs)
    out = dict(mine)
    for name, row in other.items():
        if name not in mine:
            out[name] = row
            continue
        old = mine[name]
        for key in ("params", "version"):
            if old.get(key) != row.get(key):
                raise MergeError(f"{name} has another {key} in {ours_name} than in "
                                 f"{theirs_name}: not shards of one run; nothing was merged")
        cells = cell_names(name, old)
        if not old.get("params"):  # one cell, scalar columns: whichever ran it
            if old.get("result") is not None and row.get("result") is not None and not (
                    _same_value(old["result"], row["result"])):
                raise MergeError(f"{name} is in both {ours_name} and {theirs_name} with "
                                 "other values; nothing was merged")
            out[name] = old if old.get("result") is not None else row
            continue
        width = len(cells)
        merged = dict(old)
        ra, rb = old.get("result") or [None] * width, row.get("result") or [None] * width
        # A cell's columns come from the file that measured it: asv writes the cells -b
        # did not select as n/a (NaN), so a number beats NaN, and NaN beats nothing.
        take_b = []
        for cell, x, y in zip(cells, ra, rb, strict=True):
            if measured(x) and measured(y) and not _same_value(x, y):
                raise MergeError(f"{cell} is in both {ours_name} and {theirs_name} with "
                                 "other values: a cell belongs to one shard; nothing was "
                                 "merged")
            take_b.append((measured(y) and not measured(x)) or (x is None and y is not None))
        for column in columns:
            if not _is_cell_column(column):
                continue
            a = old.get(column) or [None] * width
            b = row.get(column) or [None] * width
            values = [y if t else x for x, y, t in zip(a, b, take_b, strict=True)]
            merged[column] = values if any(v is not None for v in values) else None
        if any(take_b):
            starts = [v for v in (old.get("started_at"), row.get("started_at")) if v]
            merged["started_at"] = min(starts) if starts else None
            merged["duration"] = (old.get("duration") or 0) + (row.get("duration") or 0)
        merged["profile"] = old.get("profile") or row.get("profile")
        out[name] = merged
    data = dict(ours)
    data["results"] = {name: _trim([row.get(c) for c in columns]) for name, row in out.items()}
    durations = dict(theirs.get("durations") or {})
    durations.update(ours.get("durations") or {})
    data["durations"] = durations
    return data


def _count(data: dict) -> int:
    """Measured cells (a number) in an asv results file."""
    count = 0
    for row in result_rows(data).values():
        result = row.get("result")
        count += sum(map(measured, result)) if isinstance(result, list) else measured(result)
    return count


def _trim(values: list) -> list:
    """asv's row: trailing empty columns dropped."""
    while values and values[-1] is None:
        values.pop()
    return values


def _machine_difference(ours: dict, theirs: dict) -> str:
    keys = sorted(set(ours) | set(theirs))
    return ", ".join(f"{k}: {ours.get(k)!r} != {theirs.get(k)!r}" for k in keys
                     if ours.get(k) != theirs.get(k))


def _renamed(root: Path, scratch: Path, src: Path, as_machine: str) -> Path:
    """A copy of the results folder ``root`` with its one machine named ``as_machine``."""
    copy = scratch / "renamed"
    shutil.copytree(root, copy)
    machines = [p for p in copy.iterdir() if p.is_dir()]
    if len(machines) != 1:
        raise MergeError(f"as_machine needs one machine in {str(src)!r}, found "
                         f"{len(machines)}")
    _rename_machine(machines[0], as_machine)
    machines[0].rename(copy / as_machine)
    return copy


def _union_with(target: Path, path: Path) -> dict:
    """``target``'s results file with ``path``'s cells added, where both are results
    files of the same commit and environment; a MergeError for any other difference."""
    if path.name == "machine.json":
        differ = _machine_difference(json.loads(target.read_text()),
                                     json.loads(path.read_text()))
        raise MergeError(
            f"{target} and {path} describe the machine differently ({differ}); "
            "nothing was merged (import under another machine name, e.g. "
            "--as-machine NAME)")
    try:
        ours_data, theirs_data = (json.loads(p.read_text()) for p in (target, path))
        is_results = all("result_columns" in d for d in (ours_data, theirs_data))
    except (json.JSONDecodeError, UnicodeDecodeError):
        is_results = False
    if not is_results:
        raise MergeError(
            f"{target} exists with other contents; nothing was merged (import "
            "under another machine name, e.g. --as-machine NAME)")
    return union_results(ours_data, theirs_data, str(target), str(path))


def _file_plan(root: Path, dest: Path
               ) -> tuple[list[tuple[Path, Path]], list[tuple[Path, dict]]]:
    """What merging ``root`` into ``dest`` does to each file but ``benchmarks.json``:
    (files to copy, results files to rewrite with the union of their cells); identical
    files are left alone. Reads only."""
    plan: list[tuple[Path, Path]] = []
    unions: list[tuple[Path, dict]] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name == BENCHMARKS:
            continue
        target = dest / path.relative_to(root)
        if not target.exists():
            plan.append((path, target))
        elif target.read_bytes() != path.read_bytes():
            unions.append((target, _union_with(target, path)))
    return plan, unions


def _write(root: Path, dest: Path, plan: list[tuple[Path, Path]],
           unions: list[tuple[Path, dict]], load_plan: list[tuple[Path, Path]]) -> list[str]:
    """Carry out the plans: copies, unions, ``benchmarks.json``'s new entries and the load
    records; one line per file added or extended."""
    ours = dest / BENCHMARKS
    theirs = json.loads((root / BENCHMARKS).read_text())
    known = json.loads(ours.read_text()) if ours.is_file() else {}
    added = {k: v for k, v in theirs.items() if k not in known}
    done = []
    for path, target in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        done.append(f"added {target}")
    for target, data in unions:  # written whole, then renamed over: never half a file
        before = _count(json.loads(target.read_text()))
        partial = target.with_name(target.name + ".partial")
        partial.write_text(json.dumps(data))
        partial.replace(target)
        done.append(f"extended {target}: {_count(data) - before} cell(s) added, "
                    f"{before} kept")
    if added or not ours.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        ours.write_text(json.dumps({**known, **added}, indent=4))
        done.append(f"{ours}: {len(added)} benchmark(s) added, "
                    f"{len(known)} kept")
    for path, target in load_plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    if load_plan:
        done.append(f"{beside_results(dest, LOAD)}: {len(load_plan)} load record(s) added")
    return done


def merge(src: str | Path, dest: str | Path, as_machine: str | None = None) -> list[str]:
    """Merge the asv results in ``src`` into the results folder ``dest``; returns one line
    per file added or extended. Everything is planned (and checked) before anything is
    written."""
    src, dest = Path(src), Path(dest)
    if not src.exists():
        raise MergeError(f"{str(src)!r} does not exist")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        root = _results_root(src, scratch / "unpacked")
        # from the source's own folder: the records name a commit and environment, not a
        # machine, and a renamed copy of the results has none beside it
        load_plan = _load_plan(root, dest)
        if as_machine is not None:
            root = _renamed(root, scratch, src, as_machine)
        plan, unions = _file_plan(root, dest)
        return _write(root, dest, plan, unions, load_plan)


def _load_plan(root: Path, dest: Path) -> list[tuple[Path, Path]]:
    """The machine-load records (with a GPU run's clocks and throttle state) that travel
    beside the results (``load/`` next to ``results/`` in a GPU run's tarball), to copy
    into the folder beside ``dest``; a record of the same name with other contents stops
    the merge (records are only ever added)."""
    source = beside_results(root, LOAD)
    if not source.is_dir():
        return []
    plan = []
    for path in sorted(source.glob("*/*.json")):
        target = beside_results(dest, LOAD) / path.relative_to(source)
        if target.exists():
            if target.read_bytes() != path.read_bytes():
                raise MergeError(f"{target} exists with other contents than {path}; "
                                 "nothing was merged")
            continue
        plan.append((path, target))
    return plan

