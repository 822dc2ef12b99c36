"""The grid as shards of near-equal predicted time, each run by asv on a host of its own
(``mhabench.cluster.shard_run``) and merged back into one history (``mhabench.cluster.merge``).

asv has no distributed runner and no command that merges shards (asv issue #1362), so the
conventional fan-out / fan-in: a plan file lists every asv cell of the grid split into N
shards; ``shard_run.run_shard`` runs one shard's cells with asv (``-b`` selects them by
name) into a results folder of its own, restartably; a scheduler
(``mhabench.cluster.fanout``) starts one shard per node or GPU.

**Timing validity.** Shards that share cores or a memory bus disturb each other's clocks:
run one shard per node (CPU grids), per GPU (``CUDA_VISIBLE_DEVICES``), or per socket with
pinning. A shard run warns when another shard runs on this host without a device of
its own.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from mhabench.asvproject.cell_time import cell_seconds, step_seconds
from mhabench.asvproject.cells import Cell, list_cells
from mhabench.asvproject.result_files import result_rows
from mhabench.core.grids import GRIDS

PLAN_VERSION = 1
CHUNK_CELLS = 60  # cells per asv invocation of a shard: progress saved at each one's end


class ShardError(ValueError):
    """Bad input to the shard commands, named in one line."""


@dataclass(frozen=True)
class Shard:
    index: int
    cells: list[str]  # asv's cell names, as asv compare prints them
    predicted_seconds: float


@dataclass(frozen=True)
class Plan:
    commit: str
    grid: str
    devices: str
    machine: str
    predicted_from: str  # how the cells' times were predicted
    shards: list[Shard]
    version: int = PLAN_VERSION

    @property
    def cells(self) -> int:
        return sum(len(s.cells) for s in self.shards)

    def summary(self) -> str:
        sizes = [s.predicted_seconds for s in self.shards]
        mean = sum(sizes) / len(sizes)
        return (f"{len(self.shards)} shard(s), {self.cells} cells, predicted largest "
                f"{_hours(max(sizes))}, mean {_hours(mean)} (balance "
                f"{max(sizes) / mean if mean else 1:.3f}); times from {self.predicted_from}")

    def save(self, path: Path) -> None:
        path = Path(path)
        if path.exists():
            raise ShardError(f"{str(path)!r} exists: plans are never overwritten; "
                             "choose another --out")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        shards = [Shard(int(s["index"]), list(s["cells"]), float(s["predicted_seconds"]))
                  for s in data["shards"]]
        return Plan(data["commit"], data["grid"], data["devices"], data["machine"],
                    data["predicted_from"], shards, int(data["version"]))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ShardError(f"{str(path)!r} is not a shard plan written by mhabench shard "
                         f"plan ({type(exc).__name__}: {exc})") from None


def recorded_durations(results: Path, machine: str
                       ) -> dict[str, tuple[float, list[list[str]]]]:
    """benchmark -> (asv's recorded duration, the parameter grid it ran) from the newest
    results file of ``machine`` holding it."""
    out: dict[str, tuple[float, list[list[str]], float]] = {}
    for path in sorted((Path(results) / machine).glob("*.json")):
        if path.name == "machine.json":
            continue
        try:
            data = json.loads(path.read_text())
            rows, date = result_rows(data), float(data.get("date") or 0)
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        for name, row in rows.items():
            if row.get("duration") and (name not in out or out[name][2] <= date):
                out[name] = (float(row["duration"]), row.get("params") or [], date)
    return {k: (v[0], v[1]) for k, v in out.items()}


def balance(seconds: dict[str, float], shards: int) -> list[Shard]:
    """Longest processing time first: each cell, longest first (ties by name), to the
    shard with the least predicted time so far (ties by index). Deterministic."""
    heap = [(0.0, k) for k in range(shards)]
    members: list[list[str]] = [[] for _ in range(shards)]
    for name, s in sorted(seconds.items(), key=lambda item: (-item[1], item[0])):
        total, k = heapq.heappop(heap)
        members[k].append(name)
        heapq.heappush(heap, (total + s, k))
    return [Shard(k, sorted(members[k]), round(sum(seconds[c] for c in members[k]), 3))
            for k in range(shards)]


def make_plan(repo: Path, grid: str, shards: int, devices: str, machine: str,
              results: Path | None = None, python: str = sys.executable,
              bench: str | None = None) -> Plan:
    """The plan of ``grid`` for ``shards`` hosts at ``repo``'s checked-out commit
    (``bench``: only the cells whose asv name matches this regex)."""
    if grid not in GRIDS:
        raise ShardError(f"--grid {grid!r} is not allowed; choose one of {', '.join(GRIDS)}")
    if shards < 1:
        raise ShardError(f"--shards {shards} is not allowed; give 1 or more")
    if devices not in ("cpu", "cuda"):
        raise ShardError(f"--devices {devices!r} is not allowed; choose cpu or cuda")
    try:
        pattern = re.compile(bench) if bench else None
    except re.error as exc:
        raise ShardError(f"--bench {bench!r} is not a regular expression ({exc})") from None
    commit = head(repo)
    env = {**os.environ, "MHABENCH_GRID": grid, "MHABENCH_DEVICES": devices}
    cells = [c for c in list_cells(python, env, repo) if not pattern or pattern.search(c.name)]
    if not cells:
        raise ShardError(f"the {grid} grid has no cell matching --bench {bench!r}")
    frame = None
    if results is not None:
        from mhabench.analysis.results import load_results

        frame = load_results(results).frame
    steps, source = step_seconds(cells, frame, machine)
    seconds = {c.name: cell_seconds(c, s, devices) for c, s in zip(cells, steps, strict=True)}
    if results is not None:
        durations = recorded_durations(results, machine)
        by_bench: dict[str, list[Cell]] = {}
        for c in cells:
            by_bench.setdefault(c.benchmark, []).append(c)
        scaled = 0
        for name, members in by_bench.items():
            grid_now = [set(v) for v in zip(*(c.values for c in members), strict=True)]
            if name in durations and [set(p) for p in durations[name][1]] == grid_now:
                # the same benchmark over the same grid ran before: its recorded total,
                # split over its cells as predicted (another grid's total says nothing)
                factor = durations[name][0] / sum(seconds[c.name] for c in members)
                for c in members:
                    seconds[c.name] *= factor
                scaled += len(members)
        if scaled:
            source += f"; scaled to recorded asv durations ({scaled} cells)"
    return Plan(commit, grid, devices, machine, source, balance(seconds, shards))


def expected_cells(plan: Plan) -> dict[str, int]:
    """cell -> the shard it belongs to."""
    return {c: s.index for s in plan.shards for c in s.cells}


def shard_folder(plan_path: Path, index: int) -> Path:
    """Where shard ``index`` of a plan keeps its asv config, results and progress by
    default."""
    return Path(plan_path).resolve().parent / f"{Path(plan_path).stem}-shard-{index}"


def head(repo: Path) -> str:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise ShardError(f"{str(repo)!r} is not a git checkout: {done.stderr.strip()}")
    return done.stdout.strip()


__all__ = ["Plan", "Shard", "ShardError", "balance", "cell_seconds", "expected_cells",
           "head", "load_plan", "make_plan", "shard_folder", "step_seconds"]
