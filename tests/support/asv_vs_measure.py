"""asv's timing of a cell against mhabench's steady-state ``measure`` of the same config.

asv runs each cell through asv_runner: the suite's own class, its ``setup`` before every
sample, its ``repeat``/``warmup_time``/``number`` settings. This module runs that very code
(``asv_runner.discovery.get_benchmark_from_name``, ``do_setup``/``do_run``) and
:func:`mhabench.measure.timing.measure` on the same cell in one process, alternating them over a
few rounds, so the drift of a shared machine hits both alike; the medians are compared.
A slow stretch of the VM (``mhabench.measure.conditions.speed``) can still land on one side of a
round only (a JAX fused cell once read 0.76x in a CI-clone run): each side's samples are
read between speed probes, and only the rounds whose two sides ran at the same speed (within
10 %) are compared (``ratio``; ``ratio_as_read``: all rounds). A leak into asv's clock
(setup, bookkeeping) is in every round, so it still shows.
Comparing an earlier ``asv run`` with a later ``measure`` instead mixes in 10-40 % of
machine drift per cell on these VMs.

    MHABENCH_GRID=quick python tests/support/asv_vs_measure.py [REGEX] [--rounds 3]

prints one line per cell and the geometric mean and worst ratio (the slow test in
test_asv_suite.py runs it on a module of the quick grid).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAME_SPEED = 1.10  # two sides of a round ran at the same speed: probes within 10 %


def time_benchmarks(pattern: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """(benchmark name, parameter index, value reprs) of every runnable time_ cell whose
    asv name matches ``pattern`` (the suite's one cell listing, in this process)."""
    import re

    from mhabench.asvproject.cells import cell_rows, cells_of

    sys.path.insert(0, str(ROOT))
    return [(cell.benchmark, cell.index, cell.values) for cell in cells_of(cell_rows())
            if cell.kind == "time" and re.search(pattern, cell.name)]


def compare(name: str, index: int, rounds: int) -> dict:
    """Alternate asv_runner's run of one cell and ``measure`` of its config."""
    from asv_runner.discovery import get_benchmark_from_name

    from mhabench.bench.methods import WARMUP
    from mhabench.measure.conditions.speed import probe, slowdown
    from mhabench.measure.timing import measure

    # (samples, probe before, probe after) of each side, each round
    asv_runs: list[tuple[list[float], float, float]] = []
    measure_runs: list[tuple[list[float], float, float]] = []
    config = None
    for _ in range(rounds):
        bench = get_benchmark_from_name(str(ROOT / "benchmarks"), f"{name}-{index}")
        if bench.do_setup():
            return {"name": name, "index": index, "skipped": True}
        before = probe()
        try:
            result = bench.do_run()
        finally:
            bench.do_teardown()
        if result is None or not result.get("samples"):
            return {"name": name, "index": index, "skipped": True}
        between = probe()
        asv_runs.append((result["samples"], before, between))
        config = _config_of(bench)
        measure_runs.append((list(measure(config, repeats=9, warmup=WARMUP).times_s),
                             between, probe()))
    # Rounds whose two sides ran at the same speed (probes within SAME_SPEED): a slow
    # stretch over one side only is no evidence about the clocks. At least half the
    # rounds are kept (all, where fewer agree).
    quickest = min(p for runs in (asv_runs, measure_runs) for _, *ps in runs for p in ps)

    def speed_of(before: float, after: float) -> float:
        return slowdown((before * after) ** 0.5, quickest)

    pairs = enumerate(zip(asv_runs, measure_runs, strict=True))
    same = [i for i, ((_, a0, a1), (_, m0, m1)) in pairs
            if max(speed_of(a0, a1), speed_of(m0, m1))
            <= SAME_SPEED * min(speed_of(a0, a1), speed_of(m0, m1))]
    kept = same if 2 * len(same) >= len(asv_runs) else list(range(len(asv_runs)))

    def median(runs: list[tuple[list[float], float, float]], rounds: list[int]) -> float:
        return statistics.median(t for i in rounds for t in runs[i][0])

    everything = list(range(len(asv_runs)))
    return {"name": name, "index": index, "config": config.id,
            "asv_s": median(asv_runs, kept), "measure_s": median(measure_runs, kept),
            "ratio": median(asv_runs, kept) / median(measure_runs, kept),
            "ratio_as_read": median(asv_runs, everything) / median(measure_runs, everything),
            "rounds_kept": len(kept),
            "asv_samples": sum(len(ts) for ts, _, _ in asv_runs),
            "measure_samples": sum(len(ts) for ts, _, _ in measure_runs)}


def _config_of(bench) -> object:
    from mhabench.bench.cells import config_of

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
