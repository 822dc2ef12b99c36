"""One shard of a plan (``mhabench.cluster.shard``) run by asv on this host, and what its
results hold.

asv writes every cell of a benchmark it ran, and records the cells ``-b`` did not select
as n/a, like the ones it skipped: which cells a shard has run comes from its progress
file (``progress.json``, rewritten after each chunk that asv saved), and a shard is
restartable from it. A failed cell (no value) is run again.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from mhabench.asvproject.asv_config import write_config
from mhabench.asvproject.result_files import BENCHMARKS, cell_names, measured, result_rows
from mhabench.cluster.merge import MergeError
from mhabench.cluster.shard import (
    CHUNK_CELLS,
    Plan,
    ShardError,
    expected_cells,
    head,
    load_plan,
    shard_folder,
)


def cell_values(results: Path, machine: str, commit: str) -> dict[str, float | None]:
    """Each cell's value in the asv results of ``machine`` at ``commit`` under ``results``:
    a number, NaN (n/a: skipped, or not selected by ``-b`` in the asv run that wrote the
    row: asv records both alike) or None (failed)."""
    out: dict[str, float | None] = {}
    for path in (Path(results) / machine).glob(f"{commit[:8]}-*.json"):
        data = json.loads(path.read_text())
        if data.get("commit_hash") != commit:
            continue
        for name, row in result_rows(data).items():
            cells, result = cell_names(name, row), row.get("result")
            values = result if isinstance(result, list) else [result] * len(cells)
            out.update(zip(cells, values, strict=True))
    return out


def done_cells(results: Path, machine: str, commit: str) -> set[str]:
    """Cells with a value or n/a in the asv results (failed ones are not done). Where
    ``-b`` selected some of a benchmark's cells, the rest read n/a too: use
    :func:`attempted` to know which cells a shard ran."""
    return {c for c, v in cell_values(results, machine, commit).items() if v is not None}


def finite_cells(results: Path, machine: str, commit: str) -> set[str]:
    """Cells with a measured value."""
    return {c for c, v in cell_values(results, machine, commit).items() if measured(v)}


PROGRESS = "progress.json"


def attempted(folder: Path) -> tuple[int | None, set[str]]:
    """(shard index, cells whose asv run completed) from a shard folder's progress file,
    written after each chunk that asv saved; (None, empty) without one."""
    path = Path(folder) / PROGRESS
    if not path.is_file():
        return None, set()
    data = json.loads(path.read_text())
    return int(data["index"]), set(data["cells"])


def _record_progress(folder: Path, index: int, commit: str, cells: Sequence[str]) -> None:
    _, done = attempted(folder)
    path = Path(folder) / PROGRESS
    partial = path.with_name(PROGRESS + ".partial")
    partial.write_text(json.dumps({"index": index, "commit": commit,
                                   "cells": sorted(done | set(cells))}))
    partial.replace(path)


def _registry() -> Path:
    """Where shard runs on this host register, by pid."""
    return Path(tempfile.gettempdir()) / f"mhabench-shards-{os.getuid()}"


def _neighbours(index: int, plan: Plan) -> list[str]:
    """Other shard runs alive on this host that share its devices (registered under the
    temporary folder by pid); registers this one."""
    registry = _registry()
    registry.mkdir(exist_ok=True)
    mine = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    found = []
    for entry in registry.glob("*.json"):
        try:
            other = json.loads(entry.read_text())
            os.kill(int(entry.stem), 0)
        except (OSError, ValueError, json.JSONDecodeError):
            entry.unlink(missing_ok=True)
            continue
        if plan.devices == "cpu" or not mine or other.get("devices") in ("", mine):
            found.append(f"shard {other.get('index')} (pid {entry.stem})")
    (registry / f"{os.getpid()}.json").write_text(json.dumps({"index": index,
                                                              "devices": mine}))
    return found


def _unregister() -> None:
    (_registry() / f"{os.getpid()}.json").unlink(missing_ok=True)


def check_chunk(chunk: int) -> None:
    """Refuse a chunk size (cells per asv invocation) below one, naming it."""
    if chunk < 1:
        raise ShardError(f"--chunk {chunk} is not allowed; give 1 or more cells")


def run_shard(plan_path: Path, index: int, *, repo: Path = Path("."),
              folder: Path | None = None, python: str | None = None,
              asv_args: Sequence[str] = (), chunk: int = CHUNK_CELLS,
              echo: Callable[[str], None] = print) -> Path:
    """Run shard ``index`` of the plan with asv at the plan's commit, into ``folder``
    (default :func:`shard_folder`); returns its results folder. ``python="same"`` runs in
    this interpreter's environment (asv ``--python=same``) instead of asv's own; progress
    is saved after each ``chunk`` cells (one asv invocation each)."""
    check_chunk(chunk)
    plan = load_plan(plan_path)
    if not 0 <= index < len(plan.shards):
        raise ShardError(f"shard {index} is out of range: the plan has shards 0.."
                         f"{len(plan.shards) - 1}")
    at = head(repo)
    if at != plan.commit:
        raise ShardError(f"the plan is for commit {plan.commit[:12]}, this checkout is at "
                         f"{at[:12]}: check out the plan's commit or make a new plan")
    folder = Path(folder) if folder else shard_folder(plan_path, index)
    config = folder / "asv.conf.json"
    if not config.exists():
        write_config(repo, folder, exist_ok=True)
    results = folder / "results"
    shard = plan.shards[index]
    _, ran = attempted(folder)
    ok = done_cells(results, plan.machine, plan.commit)  # a failed cell is run again
    todo = [c for c in shard.cells if not (c in ran and c in ok)]
    echo(f"shard {index}: {len(shard.cells) - len(todo)} of {len(shard.cells)} cells "
         f"already done, {len(todo)} to run (results in {results})")
    neighbours = _neighbours(index, plan)
    if neighbours:
        echo(f"shard {index}: warning: {', '.join(neighbours)} also runs on this host "
             "without a device of its own: their clocks disturb each other; the times "
             "are not comparable with an unshared run")
    env = {**os.environ, "MHABENCH_GRID": plan.grid, "MHABENCH_DEVICES": plan.devices}
    try:
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            cmd = [sys.executable, "-m", "asv", "run", "--config", str(config.resolve()),
                   "--machine", plan.machine, "--record-samples", "--show-stderr",
                   *asv_args]
            cmd += ["--python=same", "--set-commit-hash", plan.commit] if python == "same" \
                else [f"{plan.commit}^!"]
            for cell in part:
                cmd += ["-b", "^" + re.escape(cell) + "$"]
            done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
            echo(done.stdout[-4000:] + done.stderr[-4000:])
            if done.returncode not in (0, 2):  # 2: asv ran, some cell failed
                raise RuntimeError(f"asv run failed (exit status {done.returncode}) on "
                                   f"shard {index}: {(done.stdout + done.stderr)[-800:]}")
            _record_progress(folder, index, plan.commit, part)
            echo(f"shard {index}: {min(start + chunk, len(todo))} of {len(todo)} cells run")
    finally:
        _unregister()
    ok = done_cells(results, plan.machine, plan.commit)
    missing = [c for c in shard.cells if c not in ok]
    if missing:
        echo(f"shard {index}: {len(missing)} cell(s) have no result (failed): e.g. "
             f"{missing[0]}")
    return results


def check_shards(plan_path: str | Path, sources: list[Path]) -> None:
    """Every cell of the plan ran in exactly one of ``sources`` (the shards' results
    folders, each beside its shard's progress file), or a MergeError names the incomplete
    shard or the two files that both measured a cell."""
    plan = load_plan(plan_path)
    expected = expected_cells(plan)
    where: dict[str, Path] = {}
    ran: dict[int, set[str]] = {}
    for source in sources:
        if not (source / BENCHMARKS).is_file() or not any(
                (source / plan.machine).glob(f"{plan.commit[:8]}-*.json")):
            raise MergeError(f"{str(source)!r} holds no asv results of machine "
                             f"{plan.machine!r} at {plan.commit[:8]}: a shard that has not "
                             "run, or not a shard's results folder")
        index, cells = attempted(source.parent)
        if index is None:
            raise MergeError(f"{str(source)!r} has no {source.parent / 'progress.json'}: "
                             "not the results of `mhabench shard run`")
        ran.setdefault(index, set()).update(cells)
        for cell in finite_cells(source, plan.machine, plan.commit):
            if cell in where:
                raise MergeError(f"{cell} is in both {where[cell]} and {source}: a cell "
                                 "belongs to one shard; nothing was merged")
            where[cell] = source
    missing: dict[int, list[str]] = {}
    for cell, index in expected.items():
        if cell not in ran.get(index, ()):
            missing.setdefault(index, []).append(cell)
    if missing:
        parts = [f"shard {k}: {len(v)} of its cells not run (e.g. {v[0]})"
                 for k, v in sorted(missing.items())]
        raise MergeError("incomplete shards, nothing was merged: " + "; ".join(parts) +
                         f" (run `mhabench shard run {plan_path} K` again)")
    extra = sorted(set(where) - set(expected))
    if extra:
        raise MergeError(f"{len(extra)} cell(s) in the sources are not in the plan (e.g. "
                         f"{extra[0]} in {where[extra[0]]}): not this plan's shards")
