"""What else the machine did while a cell was timed: the CPU time other processes took.

A timing process of the asv suite records, from its first sample to its last, the
machine's busy CPU time (``/proc/stat``) minus its own and its descendants' (compile
workers are subprocesses), the time the hypervisor stole from this VM, and the load
average: one small JSON file per process (:func:`start` before the first sample,
:func:`record` from the benchmark's teardown: asv ends its processes with ``os._exit``, so
nothing runs after the last one). asv's runner calls teardown between samples too, to
re-run setup; writing the file there would put file-system work before every timed call,
which a sub-millisecond step reads as its own time. So between samples nothing is written;
the teardown after the last sample writes the record, covering the same window.
:func:`read_records` gathers them per asv cell; ``mhabench.analysis.history.regressions`` marks a
run or a cell as disturbed from them, since a second job on a 2-core machine slows every
cell it shares the machine with. Each record also keeps the machine's speed
(:func:`mhabench.measure.conditions.speed.probe`, 2 ms) read before the first sample, ahead of asv's
warm-up calls, and after the last: the time model takes the moment's slowness out of the
cell (``mhabench.analysis.prediction.timemodel``).

Where: ``$MHABENCH_LOAD_DIR``, else ``$ASV_CONF_DIR/.asv/load`` (beside asv's default
``.asv/results``), in ``<commit[:8]>-<env>/``. Outside asv (no ``ASV_COMMIT``) nothing is
recorded. Linux only; elsewhere nothing is recorded either.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mhabench.measure.conditions import speed

LOAD_DIR_ENV = "MHABENCH_LOAD_DIR"
FOLDER = "load"  # the records' folder beside asv's results folder (.asv/load)
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


def _family_cpu() -> float:
    """CPU seconds of this process, its children that ended, and its live descendants
    (torch.compile's and XLA's compile workers run as subprocesses: their work is this
    cell's, not another job's)."""
    import resource

    total = time.process_time()
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    total += ended.ru_utime + ended.ru_stime
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return total
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parents[pid] = int(fields[1])  # after "pid (comm)": state, ppid, ..., utime, stime
        ticks[pid] = int(fields[11]) + int(fields[12])
    family, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - family
        family |= frontier
    return total + sum(ticks[pid] for pid in family) / _TICK


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
        return Path(os.environ["ASV_CONF_DIR"]) / ".asv" / FOLDER
    return None


def asv_cell(benchmark: str, params: Sequence[Any]) -> str:
    """A cell's name as asv prints it in its tables: ``name(repr, repr, ...)``."""
    return f"{benchmark}({', '.join(map(repr, params))})" if params else benchmark


@dataclass(frozen=True)
class _Start:
    window: Window
    load1: float | None
    name: str
    probe_s: float  # the machine's speed just before the first sample (measure.conditions.speed)


_start: _Start | None = None  # this process's window (asv times one cell per process)


def start() -> None:
    """Open this process's window (the first call; later calls do nothing)."""
    global _start
    if _start is not None or load_dir() is None:
        return
    probe_s = speed.probe()  # before the window: its 2 ms are this process's, not others'
    window = Window.open()
    if window is not None:
        _start = _Start(window, _load1(), f"{time.time_ns()}-{os.getpid()}.json", probe_s)


def record(benchmark: str, params: Sequence[Any],
           extra: Callable[[], dict[str, Any]] | None = None) -> None:
    """Write this process's record, from :func:`start` up to now, for the cell
    ``benchmark(params)``; nothing before :func:`start`, nor between two samples (see the
    module docstring). ``extra`` returns more fields for the record (the GPU's state), read
    only when it is written. Never raises: recording must not fail a benchmark."""
    if _between_samples():
        return
    folder = load_dir()
    used = _start.window.used() if _start is not None else None
    if used is None or folder is None:
        return
    probe_s = [_start.probe_s, speed.probe()]
    commit, env = os.environ.get("ASV_COMMIT", "unknown"), os.environ.get("ASV_ENV_NAME", "")
    seconds, other, steal = used
    data = {"version": 1, "commit": commit, "env_name": env,
            "cell": asv_cell(benchmark, params), "pid": os.getpid(),
            "start": _start.window.wall, "seconds": seconds, "cpus": os.cpu_count(),
            "other_cpu_seconds": max(0.0, other), "steal_seconds": steal,
            "load1": [_start.load1, _load1()], "probe_s": probe_s}
    if extra is not None:
        try:
            data.update(extra())
        except Exception as err:  # noqa: BLE001 - a reading must not fail the benchmark
            data["extra_error"] = f"{type(err).__name__}: {err}"
    path = folder / f"{commit[:8]}-{env}" / _start.name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


def _between_samples() -> bool:
    """True when asv's runner tears the benchmark down only to set it up again before the
    next sample (its ``Benchmark.redo_setup``), not after the last one."""
    frame = sys._getframe(2)
    for _ in range(4):  # record <- teardown <- do_teardown <- redo_setup
        if frame is None:
            return False
        if frame.f_code.co_name == "redo_setup" and "asv_runner" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


@dataclass(frozen=True)
class CellLoad:
    """What other processes did while one cell was timed (all its recorded processes)."""

    other_cores: float  # other processes' CPU seconds per second, the worst process
    steal_cores: float
    load1: float | None  # the highest 1-minute load average seen
    processes: int
    start: float | None = None  # when its first process began sampling (epoch seconds)
    # the machine's speed probe (mhabench.measure.conditions.speed) before and after the samples,
    # geometric mean over them and over the cell's processes; None in older records
    probe_s: float | None = None
    # a CUDA cell's GPU state per process (mhabench.measure.conditions.gpu_state: clocks,
    # throttling)
    gpu: tuple[dict[str, Any], ...] = ()

    @property
    def disturbed(self) -> bool:
        return self.other_cores >= DISTURBED_CORES or self.steal_cores >= DISTURBED_CORES


def _per_second(record: dict[str, Any], field: str) -> float:
    return float(record[field]) / record["seconds"] if record["seconds"] > 0 else 0.0


def _probe(records: Sequence[dict[str, Any]]) -> float | None:
    """The geometric mean of every speed probe of ``records``; None unless each has its
    two positive probes."""
    probes = [r.get("probe_s") for r in records]
    if not all(isinstance(p, list) and len(p) == 2 and all(
            isinstance(v, (int, float)) and v > 0 for v in p) for p in probes):
        return None
    logs = [math.log(v) for p in probes for v in p]  # type: ignore[union-attr]
    return math.exp(sum(logs) / len(logs))


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
                              max(load1) if load1 else None, len(records),
                              min(float(r["start"]) for r in records) if all(
                                  isinstance(r.get("start"), (int, float)) for r in records)
                              else None, _probe(records),
                              tuple(r["gpu"] for r in records if isinstance(r.get("gpu"), dict)))
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
        return None if stat is None else cls(time.time(), _family_cpu(), *stat)

    def used(self) -> tuple[float, float, float] | None:
        """Since the window opened: wall seconds, other processes' CPU seconds (this
        process's own threads and its descendants excluded) and seconds the hypervisor
        stole; None without ``/proc/stat``."""
        stat = _proc_stat()
        if stat is None:
            return None
        other = stat[0] - self.busy - (_family_cpu() - self.own)
        return time.time() - self.wall, other, stat[1] - self.steal

    def other_cores(self) -> float:
        """Other processes' CPU seconds per second since the window opened, plus time the
        hypervisor stole."""
        used = self.used()
        if used is None or used[0] <= 0:
            return 0.0
        seconds, other, steal = used
        return max(0.0, other + steal) / seconds
