"""asv's timing of a cell against mhabench's steady-state ``measure`` of the same config.

asv runs each cell through asv_runner: the suite's own class, its ``setup`` before every
sample, its ``repeat``/``warmup_time``/``number`` settings. This module runs that very code
(``asv_runner.discovery.get_benchmark_from_name``, ``do_setup``/``do_run``) and
:func:`mhabench.measure.timing.measure` on the same cell in one process, alternating them over a
few rounds, so the drift of a shared machine hits both alike; the medians are compared.
Comparing an earlier ``asv run`` with a later ``measure`` instead mixes in 10-40 % of
machine drift per cell on these VMs.

    MHABENCH_GRID=quick python tests/asv_vs_measure.py [REGEX] [--rounds 3]

prints one line per cell and the geometric mean and worst ratio (the slow test in
test_asv_suite.py runs it on a module of the quick grid).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def time_benchmarks(pattern: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """(benchmark name, parameter index, value reprs) of every runnable time_ cell whose
    asv name matches ``pattern`` (the suite's one cell listing, in this process)."""
    import re

    from mhabench.suite.cells import cell_rows, cells_of

    sys.path.insert(0, str(ROOT))
    return [(cell.benchmark, cell.index, cell.values) for cell in cells_of(cell_rows())
            if cell.kind == "time" and re.search(pattern, cell.name)]


def compare(name: str, index: int, rounds: int) -> dict:
    """Alternate asv_runner's run of one cell and ``measure`` of its config."""
    from asv_runner.discovery import get_benchmark_from_name

    from benchmarks.common import WARMUP
    from mhabench.measure.timing import measure

    asv_samples: list[float] = []
    measured: list[float] = []
    config = None
    for _ in range(rounds):
        bench = get_benchmark_from_name(str(ROOT / "benchmarks"), f"{name}-{index}")
        if bench.do_setup():
            return {"name": name, "index": index, "skipped": True}
        try:
            result = bench.do_run()
        finally:
            bench.do_teardown()
        if result is None or not result.get("samples"):
            return {"name": name, "index": index, "skipped": True}
        asv_samples.extend(result["samples"])
        config = _config_of(bench)
        measured.extend(measure(config, repeats=9, warmup=WARMUP).times_s)
    asv_median, measure_median = statistics.median(asv_samples), statistics.median(measured)
    return {"name": name, "index": index, "config": config.id, "asv_s": asv_median,
            "measure_s": measure_median, "ratio": asv_median / measure_median,
            "asv_samples": len(asv_samples), "measure_samples": len(measured)}


def _config_of(bench) -> object:
    from benchmarks.common import config_of

    return config_of(bench.param_names, bench._current_params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pattern", nargs="?", default=r"\.time_step\(")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    ratios = []
    for name, index, _cell in time_benchmarks(args.pattern):
        row = compare(name, index, args.rounds)
        if row.get("skipped"):
            continue
        ratios.append(row["ratio"])
        print(json.dumps(row), flush=True)
    if ratios:
        print(json.dumps({"cells": len(ratios), "geomean": statistics.geometric_mean(ratios),
                          "min": min(ratios), "max": max(ratios)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
