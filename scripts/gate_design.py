#!/usr/bin/env python3
"""How many rounds and samples a regression gate needs here, from asv's own statistics.

asv times a cell in one process per round and pools every sample of a side in its
Mann-Whitney test, which assumes independent samples. Samples of one process share that
process's memory layout and drift, so they are not independent: a few processes with many
samples each can make two identical commits look different. This script measures that on
the real suite: it runs chosen ``time_`` cells through asv_runner (the suite's own classes
and settings) in ``--processes`` fresh processes, ``--samples`` samples each. Then it
replays ``asv continuous`` designs (rounds x samples per round) on random disjoint sets of
those processes, using asv's own ``compute_stats`` and ``compare._is_result_better``:

- false flags: identical code (both sides drawn from the same pool) flagged + or -;
- misses: side B's samples scaled by 1.25 and 1.5, not flagged.

    MHABENCH_GRID=quick MHABENCH_THREADS=1 python scripts/gate_design.py \\
        "bench_gqa\\.MhaGqaMqa\\.time_step\\('torch', 'loop', 2, 512, 256, 16, 4, " \\
        --processes 36 --samples 7 --designs 8x3 8x7 12x3 16x2 --factor 1.12

Prints one JSON line per cell and design. ``--save FILE`` keeps the samples, ``--load
FILE`` replays saved ones. ``--gate 8x3 1.07 16x3`` replays mhabench gate's two stages
instead (screen design, screen factor, confirmation design): how often it passes an
unchanged cell on, flags it, and misses a 1.25x and a 1.5x slowdown.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLER = """
import json, sys
sys.path.insert(0, {root!r})
from asv_runner.discovery import get_benchmark_from_name
bench = get_benchmark_from_name({bench_dir!r}, {name!r})
bench.repeat = ({samples}, {samples}, 1e9)  # exactly this many samples, as asv's -a repeat
if bench.do_setup():
    print(json.dumps(None))
else:
    result = bench.do_run()
    bench.do_teardown()
    print(json.dumps(result["samples"]))
"""


def sample_processes(name: str, processes: int, samples: int) -> list[list[float]]:
    """``processes`` fresh processes of one asv cell, ``samples`` samples each."""
    code = SAMPLER.format(root=str(ROOT), bench_dir=str(ROOT / "benchmarks"), name=name,
                          samples=samples)
    out = []
    for _ in range(processes):
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=600, env=os.environ.copy())
        if done.returncode != 0:
            raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if got is None:
            return []
        out.append(got)
    return out


def mark(a: list[float], b: list[float], factor: float) -> str:
    """asv compare's mark for before ``a`` and after ``b`` at ``factor``: "+" (slower),
    "-" (faster) or ""."""
    from asv.commands.compare import _is_result_better
    from asv_runner.statistics import compute_stats

    va, sa = compute_stats(a, 1)
    vb, sb = compute_stats(b, 1)
    if _is_result_better(vb, va, (sb, b), (sa, a), factor):
        return "-"
    return "+" if _is_result_better(va, vb, (sa, a), (sb, b), factor) else ""


def flagged(a: list[float], b: list[float], factor: float) -> bool:
    """asv compare's verdict between two sides' samples: + or - at ``factor``."""
    return mark(a, b, factor) != ""


def draw(pool: list[list[float]], rounds: int, per_round: int,
         rng: random.Random) -> tuple[list[float], list[float]]:
    """Two sides of ``rounds`` disjoint random processes from ``pool``, ``per_round``
    samples of each."""
    chosen = rng.sample(range(len(pool)), 2 * rounds)
    return ([s for i in chosen[:rounds] for s in pool[i][:per_round]],
            [s for i in chosen[rounds:] for s in pool[i][:per_round]])


def replay(pool: list[list[float]], rounds: int, per_round: int, factor: float,
           trials: int, rng: random.Random) -> dict[str, float]:
    """Flag rates of a design over ``trials`` random disjoint draws from ``pool``."""
    counts = {"false": 0, "miss_1.25": 0, "miss_1.5": 0}
    for _ in range(trials):
        a, b = draw(pool, rounds, per_round, rng)
        counts["false"] += flagged(a, b, factor)
        for slow in (1.25, 1.5):
            counts[f"miss_{slow}"] += not flagged(a, [x * slow for x in b], factor)
    return {k: v / trials for k, v in counts.items()}


def lean(a: list[float], b: list[float], factor: float) -> str:
    """The gate's screen: the way a cell asv marks at ``factor`` leans ("+" slower, "-"
    faster; marks "+", "-" and "~", the ratio of medians beyond it either way, significant
    or not), or "" for a cell it does not pass on. asv's value is the median, so within
    the factor it marks nothing."""
    ratio = statistics.median(b) / statistics.median(a)
    if 1 / factor <= ratio <= factor:
        return ""
    return "+" if ratio > 1 else "-"


def replay_gate(pool: list[list[float]], screen: tuple[int, int], screen_factor: float,
                confirm: tuple[int, int], factor: float, trials: int,
                rng: random.Random) -> dict[str, float]:
    """Rates of the two-stage gate: the screen passes a cell on (``lean``), a fresh
    confirmation must flag it the same way. Each stage draws its own processes (disjoint
    within the stage; the pool is too small for both stages to be disjoint from each
    other)."""
    counts = {"passed_on": 0, "false": 0, "miss_1.25": 0, "miss_1.5": 0}
    for _ in range(trials):
        a, b = draw(pool, *screen, rng)
        ca, cb = draw(pool, *confirm, rng)
        way = lean(a, b, screen_factor)
        counts["passed_on"] += way != ""
        counts["false"] += way != "" and mark(ca, cb, factor) == way
        for slow in (1.25, 1.5):
            caught = (lean(a, [x * slow for x in b], screen_factor) == "+"
                      and mark(ca, [x * slow for x in cb], factor) == "+")
            counts[f"miss_{slow}"] += not caught
    return {k: v / trials for k, v in counts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pattern", nargs="?", default=r"bench_gqa\.MhaGqaMqa\.time_step\(")
    parser.add_argument("--processes", type=int, default=24)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--designs", nargs="+", default=["8x3", "8x8", "12x3", "16x2"],
                        help="ROUNDSxSAMPLES per round")
    parser.add_argument("--factor", type=float, default=1.12)
    parser.add_argument("--gate", nargs=3, metavar=("SCREEN", "SCREEN_FACTOR", "CONFIRM"),
                        default=None, help="replay the two-stage gate instead, e.g. "
                        "8x3 1.07 16x3 (mhabench.suite.gate's settings)")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--save", default=None)
    parser.add_argument("--load", default=None)
    args = parser.parse_args(argv)
    designs = []
    for text in args.designs:
        rounds, per_round = (int(x) for x in text.split("x"))
        if 2 * rounds > args.processes or per_round > args.samples:
            parser.error(f"design {text} needs {2 * rounds} processes of {per_round} "
                         f"samples; have --processes {args.processes} --samples {args.samples}")
        designs.append((rounds, per_round))
    if args.load:
        pools = json.loads(Path(args.load).read_text())
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.asv_vs_measure import time_benchmarks

        pools = {}
        for name, index, _cell in time_benchmarks(args.pattern):
            pool = sample_processes(f"{name}-{index}", args.processes, args.samples)
            if pool:
                pools[f"{name}-{index}"] = pool
        if args.save:
            Path(args.save).write_text(json.dumps(pools))
    rng = random.Random(0)
    if args.gate:
        screen, confirm = (tuple(int(x) for x in t.split("x")) for t in args.gate[::2])
        for cell, pool in pools.items():
            rates = replay_gate(pool, screen, float(args.gate[1]), confirm, args.factor,
                                args.trials, rng)
            print(json.dumps({"cell": cell, "gate": " ".join(args.gate),
                              **{k: round(v, 4) for k, v in rates.items()}}), flush=True)
        return 0
    for cell, pool in pools.items():
        medians = sorted(sorted(p)[len(p) // 2] for p in pool)
        spread = medians[-1] / medians[0]
        for rounds, per_round in designs:
            rates = replay(pool, rounds, per_round, args.factor, args.trials, rng)
            print(json.dumps({"cell": cell, "design": f"{rounds}x{per_round}",
                              "process_median_spread": round(spread, 3),
                              **{k: round(v, 4) for k, v in rates.items()}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
