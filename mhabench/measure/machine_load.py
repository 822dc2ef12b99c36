"""What else the machine did while a cell was timed: the CPU time other processes took.

A timing process of the asv suite records, from its first sample to its last, the
machine's busy CPU time (``/proc/stat``) minus its own (``time.process_time``), the time
the hypervisor stole from this VM, and the load average: one small JSON file per process
(:func:`start` before the first sample, :func:`record` after each: asv ends its processes
with ``os._exit``, so nothing runs after the last one). :func:`read_records` gathers them
per asv cell; ``mhabench.analysis.regressions`` marks a run or a cell as disturbed from
them, since a second job on a 2-core machine slows every cell it shares the machine with.

Where: ``$MHABENCH_LOAD_DIR``, else ``$ASV_CONF_DIR/.asv/load`` (beside asv's default
``.asv/results``), in ``<commit[:8]>-<env>/``. Outside asv (no ``ASV_COMMIT``) nothing is
recorded. Linux only; elsewhere nothing is recorded either.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOAD_DIR_ENV = "MHABENCH_LOAD_DIR"
# Another process's share of a core (averaged over a cell's samples) from which the cell's
# timing counts as disturbed: one core-second in 4 (a second 1-thread job takes ~1).
DISTURBED_CORES = 0.25
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot, or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    busy = sum(fields[:3]) + sum(fields[5:7])
    steal = fields[7] if len(fields) > 7 else 0
    return busy / _TICK, steal / _TICK


def _load1() -> float | None:
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def load_dir() -> Path | None:
    """Where this process records, or None when it is not an asv benchmark process."""
    if os.environ.get(LOAD_DIR_ENV):
        return Path(os.environ[LOAD_DIR_ENV])
    if os.environ.get("ASV_COMMIT") and os.environ.get("ASV_CONF_DIR"):
        return Path(os.environ["ASV_CONF_DIR"]) / ".asv" / "load"
    return None


def asv_cell(benchmark: str, params: Sequence[Any]) -> str:
    """A cell's name as asv prints it in its tables: ``name(repr, repr, ...)``."""
    return f"{benchmark}({', '.join(map(repr, params))})" if params else benchmark


@dataclass(frozen=True)
class _Start:
    window: Window
    load1: float | None
    name: str


_start: _Start | None = None  # this process's window (asv times one cell per process)


def start() -> None:
    """Open this process's window (the first call; later calls do nothing)."""
    global _start
    window = Window.open() if _start is None and load_dir() is not None else None
    if window is not None:
        _start = _Start(window, _load1(), f"{time.time_ns()}-{os.getpid()}.json")


def record(benchmark: str, params: Sequence[Any]) -> None:
    """Write this process's record, from :func:`start` up to now, for the cell
    ``benchmark(params)``; nothing before :func:`start`. Never raises: recording must not
    fail a benchmark."""
    folder = load_dir()
    used = _start.window.used() if _start is not None else None
    if used is None or folder is None:
        return
    commit, env = os.environ.get("ASV_COMMIT", "unknown"), os.environ.get("ASV_ENV_NAME", "")
    seconds, other, steal = used
    data = {"version": 1, "commit": commit, "env_name": env,
            "cell": asv_cell(benchmark, params), "pid": os.getpid(),
            "start": _start.window.wall, "seconds": seconds, "cpus": os.cpu_count(),
            "other_cpu_seconds": max(0.0, other), "steal_seconds": steal,
            "load1": [_start.load1, _load1()]}
    path = folder / f"{commit[:8]}-{env}" / _start.name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


@dataclass(frozen=True)
class CellLoad:
    """What other processes did while one cell was timed (all its recorded processes)."""

    other_cores: float  # other processes' CPU seconds per second, the worst process
    steal_cores: float
    load1: float | None  # the highest 1-minute load average seen
    processes: int

    @property
    def disturbed(self) -> bool:
        return self.other_cores >= DISTURBED_CORES or self.steal_cores >= DISTURBED_CORES


def _per_second(record: dict[str, Any], field: str) -> float:
    return float(record[field]) / record["seconds"] if record["seconds"] > 0 else 0.0


def read_records(folder: str | Path) -> dict[tuple[str, str, str], CellLoad]:
    """(full commit, env name, asv cell) -> the cell's load, from every record under
    ``folder``. Unreadable files are skipped (a process killed mid-write leaves a .tmp)."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for path in sorted(Path(folder).glob("*/*.json")):
        try:
            data = json.loads(path.read_text())
            key = (str(data["commit"]), str(data["env_name"]), str(data["cell"]))
            float(data["seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.setdefault(key, []).append(data)
    loads = {}
    for key, records in out.items():
        load1 = [v for r in records for v in r.get("load1") or () if v is not None]
        loads[key] = CellLoad(max(_per_second(r, "other_cpu_seconds") for r in records),
                              max(_per_second(r, "steal_seconds") for r in records),
                              max(load1) if load1 else None, len(records))
    return loads


@dataclass(frozen=True)
class Window:
    """What other processes took from the machine since :meth:`open` (outside asv too:
    ``mhabench validate`` warns when its timings shared the machine)."""

    wall: float
    own: float
    busy: float
    steal: float

    @classmethod
    def open(cls) -> Window | None:
        """A window from now, or None off Linux (no ``/proc/stat``)."""
        stat = _proc_stat()
        return None if stat is None else cls(time.time(), time.process_time(), *stat)

    def used(self) -> tuple[float, float, float] | None:
        """Since the window opened: wall seconds, other processes' CPU seconds (this
        process's own threads excluded) and seconds the hypervisor stole; None without
        ``/proc/stat``."""
        stat = _proc_stat()
        if stat is None:
            return None
        other = stat[0] - self.busy - (time.process_time() - self.own)
        return time.time() - self.wall, other, stat[1] - self.steal

    def other_cores(self) -> float:
        """Other processes' CPU seconds per second since the window opened, plus time the
        hypervisor stole."""
        used = self.used()
        if used is None or used[0] <= 0:
            return 0.0
        seconds, other, steal = used
        return max(0.0, other + steal) / seconds
