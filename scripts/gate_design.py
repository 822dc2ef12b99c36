#!/usr/bin/env python3
"""Replay the regression gate's design on processes that real runs recorded.

Two kinds of recorded run, both listed as JSON lines by ``python
tests/test_asv_regression.py N DIR [CASE ...]`` (``--log``):

- a gate run (``mhabench gate``): its folder holds ``screen`` and ``confirm`` stages, each
  asv results with exactly 5 samples a process; a cell the screen did not pass on has no
  confirmation to replay ("unknown" where a design would pass it on);
- a rounds run (case ``rounds-identical``, ``rounds-fused``): one asv run of 20 interleaved
  rounds of both commits on every cell, split into a screen (its first 8 rounds) and a
  confirmation (the next 12), so every cell can be replayed both ways.

Each cell-run is labelled with the slowdown planted in it (1.0: the same code at both
commits). Designs vary the rounds of each stage and the factors; ``--statistic fast``
replays the earlier statistic (each side's fast processes, within 1.25x of its fastest)
beside the shipped one (the modes lined up, :mod:`mhabench.analysis.comparisons.modes`). Replayed
slowdowns (``--scale 1.10``) multiply the head's processes of unchanged cells and are
labelled as replays.

    python scripts/gate_design.py --log runs.log
    python scripts/gate_design.py --log runs.log --screen 6 8 --confirm 8 12 --statistic modes fast

``--dump FILE`` writes the cell-runs read (each side's process medians in ms, screen and
confirmation) as JSON: ``tests/fixtures/gate_processes.json`` holds such cell-runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mhabench.analysis.comparisons.process_compare import (  # noqa: E402
    Comparison,
    compare,
    lean,
    two_stage,
)
from mhabench.compare.rounds import (  # noqa: E402
    CONFIRM_ROUNDS,
    SCREEN_ROUNDS,
    process_medians,
    read_cells,
    result_files,
)

Sides = tuple[list[float], list[float]]  # each side's process medians, seconds


@dataclass
class CellRun:
    """One cell of one recorded run: each stage's process medians per side, in timing
    order."""

    run: str
    cell: str
    planted: float  # the slowdown planted at the head (1.0: the same code)
    screen: Sides
    confirm: Sides | None  # None: a gate's screen did not pass it on

    def as_fixture(self) -> dict:
        def ms(sides: Sides | None) -> list[list[float]] | None:
            return None if sides is None else [[round(x * 1e3, 4) for x in s] for s in sides]

        return {"run": self.run, "cell": self.cell, "planted": self.planted,
                "screen": ms(self.screen), "confirm": ms(self.confirm)}


def read_stage(stage: Path) -> dict[str, Sides]:
    """Each cell's (base, head) process medians of one recorded asv run."""
    if not (stage / "commits.txt").is_file():
        return {}
    base, head = (stage / "commits.txt").read_text().split()
    files = [result_files(stage / "results", c) for c in (base, head)]
    out = {}
    for env_name, path in files[0].items():
        before, after = read_cells(path), read_cells(files[1].get(env_name))
        for cell, samples in before.items():
            if samples and after.get(cell):
                out[cell] = (process_medians(samples), process_medians(after[cell]))
    return out


def planted_factor(cell: str, planted: dict[str, float]) -> float:
    """The slowdown planted in ``cell`` ("torch/fused" -> 1.10 in ``planted``)."""
    for key, factor in planted.items():
        framework, backend = key.split("/")
        if f"('{framework}', '{backend}'," in cell:
            return factor
    return 1.0


def recorded_runs(log: Path) -> list[CellRun]:
    """Every cell-run of the runs a ``tests/test_asv_regression.py`` log lists."""
    out = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        run = json.loads(line)
        folder, name = Path(run["folder"]), f"{run['case']}#{run['run']}"
        if run["case"].startswith("rounds"):
            for cell, (a, b) in read_stage(folder).items():
                out.append(CellRun(name, cell, planted_factor(cell, run.get("planted", {})),
                                   (a[:SCREEN_ROUNDS], b[:SCREEN_ROUNDS]),
                                   (a[SCREEN_ROUNDS:], b[SCREEN_ROUNDS:])))
            continue
        screen, confirm = read_stage(folder / "screen"), read_stage(folder / "confirm")
        for cell, sides in screen.items():
            out.append(CellRun(name, cell, planted_factor(cell, run.get("planted", {})),
                               sides, confirm.get(cell)))
    return out


def fast_rule(base: Sequence[float], new: Sequence[float], draws: int = 1000,
              seed: int = 0) -> Comparison:
    """The earlier statistic, for replays beside the shipped one: the median of each
    side's fast processes (within 1.25x of its fastest), new over base, with a percentile
    bootstrap over processes."""
    a, b = np.asarray(base, dtype=float), np.asarray(new, dtype=float)

    def fast(x: np.ndarray) -> float:
        return float(np.median(x[x <= x.min() * 1.25]))

    rng = np.random.default_rng(seed)
    boot = [fast(b[rng.integers(0, len(b), len(b))]) / fast(a[rng.integers(0, len(a), len(a))])
            for _ in range(draws)]
    low, high = np.percentile(boot, [2.5, 97.5])
    return Comparison(fast(b) / fast(a), float(low), float(high), len(a), len(b))


STATISTICS: dict[str, Callable[[Sequence[float], Sequence[float]], Comparison]] = {
    "modes": compare, "fast": fast_rule}


def judge(run: CellRun, rounds: tuple[int, int], factors: tuple[float, float],
          statistic: str = "modes", scale: float = 1.0) -> str:
    """The gate's verdict on the first ``rounds`` processes a side of each stage: "slower",
    "faster", "cleared" (passed on, not confirmed), "unchanged", or "unknown" (the
    screen passes it on and no confirmation was recorded to replay)."""
    stat = STATISTICS[statistic]

    def cut(sides: Sides, n: int) -> tuple[list[float], list[float]]:
        return list(sides[0][:n]), [x * scale for x in sides[1][:n]]

    first = stat(*cut(run.screen, rounds[0]))
    if not lean(first, factors[0]):
        return "unchanged"
    if run.confirm is None or min(len(run.confirm[0]), len(run.confirm[1])) < rounds[1]:
        return "unknown"
    return two_stage(first, stat(*cut(run.confirm, rounds[1])), screen_factor=factors[0],
                     factor=factors[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, action="append",
                        help="JSON lines of tests/test_asv_regression.py (repeatable)")
    parser.add_argument("--screen", type=int, nargs="+", default=[SCREEN_ROUNDS])
    parser.add_argument("--confirm", type=int, nargs="+", default=[CONFIRM_ROUNDS])
    parser.add_argument("--factor", type=float, nargs="+", default=[1.05],
                        help="the screen's and the confirmation's factor (one value: both)")
    parser.add_argument("--statistic", nargs="+", default=["modes"], choices=STATISTICS)
    parser.add_argument("--scale", type=float, nargs="*", default=[],
                        help="replayed slowdowns of the unchanged cells, e.g. 1.10")
    parser.add_argument("--dump", type=Path, default=None,
                        help="write the cell-runs read (process medians, ms) as JSON")
    args = parser.parse_args(argv)
    cells = [c for log in args.log for c in recorded_runs(log)]
    if not cells:
        parser.error("the logs list no recorded run with results")
    if args.dump:
        args.dump.write_text(json.dumps([c.as_fixture() for c in cells]) + "\n")
    cases = [(c.planted, 1.0, c) for c in cells]
    cases += [(s, s, c) for s in args.scale for c in cells if c.planted == 1.0]
    for screen, confirm, factor, statistic in itertools.product(
            args.screen, args.confirm, args.factor, args.statistic):
        seen: dict[tuple[float, bool], list[str]] = {}
        for slowdown, scale, cell in cases:
            seen.setdefault((slowdown, scale != 1.0), []).append(
                judge(cell, (screen, confirm), (factor, factor), statistic, scale))
        for (slowdown, replayed), verdicts in sorted(seen.items()):
            known = [v for v in verdicts if v != "unknown"]
            slower, faster = known.count("slower"), known.count("faster")
            rate = (slower if slowdown > 1 else slower + faster) / max(len(known), 1)
            print(json.dumps({
                "design": f"{statistic}: screen {screen} / confirm {confirm} at {factor}x",
                "planted": slowdown, "replayed": replayed, "cell_runs": len(known),
                "unknown": len(verdicts) - len(known), "slower": slower, "faster": faster,
                ("caught_%" if slowdown > 1 else "false_%"): round(100 * rate, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
