"""How long asv spends on a cell: its step's predicted time, and a process's start-up,
warm-up and samples around it. The shard plan balances shards with it; the gate, the
versions comparison and the culprit search say how long they will take before they start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mhabench.asvproject.cells import Cell
from mhabench.core.grids import config_fields

# One asv process of a cell beyond its samples: fork, build, compile and warm the step,
# settle the heap. A guess: a previous run's recorded durations replace it.
PROCESS_S = {"cpu": 2.0, "cuda": 4.0}
# Where no calibration is stored: a 2-core VM's float32 matmul, an H200's.
DEFAULT_GFLOPS = {"cpu": 20.0, "cuda": 50_000.0}
WARM_CALLS = 10  # prepare's warm-up and the settle, in steps, before asv's own warm-up


def _config(cell: Cell) -> Any:
    """The AttentionConfig a cell times, or None (calibration and other non-attention
    classes)."""
    from mhabench.core.config import AttentionConfig

    try:
        return AttentionConfig.from_dict(config_fields(cell.params))
    except (TypeError, ValueError):
        return None


def step_seconds(cells: Sequence[Cell], frame: Any, machine: str) -> tuple[list[float], str]:
    """Each cell's predicted step time, and where the times came from: a stored time of the
    same cell on ``machine``; else the time model fitted to the stored results; else the
    cost model at the machine's calibrated matmul rate (or a default rate)."""
    from mhabench.core.cost import cost

    measured: dict[str, float] = {}
    models: dict = {}
    rates: dict[tuple[str, str, str], float] = {}
    if frame is not None and not frame.empty:
        from mhabench.analysis.prediction.timemodel import fit_models
        from mhabench.analysis.results import calibration_table, latest

        mine = frame[frame["machine"] == machine]
        times = latest(mine[mine["kind"] == "time"])
        measured = dict(zip(times["asv_cell"], times["value"], strict=True))
        models = fit_models(mine) if not mine.empty else {}
        for row in calibration_table(mine).itertuples():
            rates[(row.framework, row.device, row.dtype)] = float(row.peak_gflops)
    used: dict[str, int] = {}
    out = []
    for cell in cells:
        twin = f"{cell.module}.{cell.cls}.time_step({', '.join(cell.values)})"
        config = _config(cell)
        key = (machine, *(getattr(config, f) for f in ("framework", "backend", "device",
                                                        "dtype"))) if config else None
        if cell.name in measured or twin in measured:
            seconds, source = measured.get(cell.name, measured.get(twin)), "stored times"
        elif config is not None and key in models:
            seconds, source = sum(models[key].terms(config).values()), "the time model"
        elif config is not None:
            rate = rates.get((config.framework, config.device, config.dtype),
                             DEFAULT_GFLOPS[config.device])
            seconds, source = cost(config).flops_model / (rate * 1e9), "the cost model"
        else:
            seconds, source = 1e-3, "a default"
        used[source] = used.get(source, 0) + 1
        out.append(max(float(seconds), 1e-6))
    return out, ", ".join(f"{k} ({v} cells)" for k, v in sorted(used.items()))


def cell_seconds(cell: Cell, step: float, device: str) -> float:
    """What asv spends on one cell: per process (``rounds`` of them for a timing) the
    start-up, the warm-up and the samples asv's ``repeat`` asks for."""
    start = PROCESS_S.get(device, PROCESS_S["cpu"]) + WARM_CALLS * step
    if cell.kind != "time":
        return start + step
    repeat = cell.repeat
    if isinstance(repeat, list | tuple) and len(repeat) == 3:
        lo, hi, max_time = repeat
        samples = min(max(float(max_time), lo * step), hi * step)
    else:
        samples = max(int(repeat or 10), 1) * step
    return max(int(cell.rounds), 1) * (start + float(cell.warmup_time) + samples)


