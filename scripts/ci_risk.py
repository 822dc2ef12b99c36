#!/usr/bin/env python3
"""How often would a real-run test of the gate fail by chance? Worked out from processes
that real runs recorded.

A real-run test asserts a verdict per cell: a planted slowdown flagged ``SLOWER``, an
unchanged cell not flagged, nothing ``faster``. Its chance of failing is the chance that
one of those verdicts comes out otherwise. This script simulates the gate on the
recorded processes of each cell: a recorded run of 20 interleaved rounds drawn at random,
its rounds split at random into a screen of 8 and a confirmation of 12, each round's base
and head processes kept together, the head's scaled by the slowdown a test plants; the
share of simulated runs that would fail each assertion estimates its probability.

    python scripts/ci_risk.py --log runs.log --cell "'batched', 2, 512, 256, 16, 4," \\
        --cell "'fused', 2, 512, 256, 16, 4,=1.25" --runs 2000

``--cell PATTERN[=FACTOR]``: a cell (a substring of its name) and the slowdown the test
plants in it (none: the test asserts it is not flagged). Processes come from the logs'
cell-runs in which nothing was planted in that cell (``--log``: JSON lines of
``tests/test_asv_regression.py``, as ``scripts/gate_design.py`` reads them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gate_design import recorded_runs  # noqa: E402

from mhabench.analysis.comparisons.process_compare import compare, lean, two_stage  # noqa: E402
from mhabench.compare.rounds import SCREEN_ROUNDS  # noqa: E402


def recorded(logs: list[Path], pattern: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The unchanged cell-runs of the cell matching ``pattern``: each run's process medians
    per side, round by round (a round's base and head process were timed side by side)."""
    out = []
    for log in logs:
        for run in recorded_runs(log):
            if pattern not in run.cell or run.planted != 1.0 or run.confirm is None:
                continue
            a, b = (np.asarray(run.screen[i] + run.confirm[i]) for i in (0, 1))
            n = min(len(a), len(b))
            out.append((a[:n], b[:n]))
    return out


def simulate(runs: list[tuple[np.ndarray, np.ndarray]], factor: float, count: int,
             seed: int = 0, draws: int = 300) -> dict[str, int]:
    """The gate's verdicts on ``count`` simulated gate runs. Each takes one recorded run of
    20 rounds at random and splits its rounds at random into a screen of 8 and a
    confirmation of 12, each round's two processes kept together (the machine's state a
    round shares between the sides stays shared, as the gate's interleaved rounds share
    it), the head's scaled by ``factor``."""
    rng = np.random.default_rng(seed)
    said: dict[str, int] = {}
    for i in range(count):
        base, head = runs[rng.integers(len(runs))]
        order = rng.permutation(len(base))
        first, then = order[:SCREEN_ROUNDS], order[SCREEN_ROUNDS:]
        screen = compare(base[first], factor * head[first], draws=draws, seed=i)
        verdict = "unchanged"
        if lean(screen):
            verdict = two_stage(screen, compare(base[then], factor * head[then],
                                                draws=draws, seed=i))
        said[verdict] = said.get(verdict, 0) + 1
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, action="append", required=True)
    parser.add_argument("--cell", action="append", required=True,
                        help="PATTERN[=FACTOR]: a cell the test asserts on, and its slowdown")
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args(argv)
    total = 0.0
    for item in args.cell:
        pattern, _, factor = item.partition("=")
        planted = float(factor) if factor else 1.0
        runs = recorded(args.log, pattern)
        if not runs:
            parser.error(f"{pattern!r}: no recorded unchanged cell-run matches")
        said = simulate(runs, planted, args.runs)
        wrong = (args.runs - said.get("slower", 0) if planted > 1
                 else said.get("slower", 0) + said.get("faster", 0))
        total += wrong / args.runs
        print(json.dumps({"cell": pattern, "planted": planted, "recorded_runs": len(runs),
                          "runs": args.runs, "verdicts": said,
                          "fails_%": round(100 * wrong / args.runs, 3)}))
    print(json.dumps({"any_fails_%_at_most": round(100 * total, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
