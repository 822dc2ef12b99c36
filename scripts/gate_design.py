#!/usr/bin/env python3
"""Replay the regression gate's design on processes that real gate runs recorded.

Every ``mhabench gate`` run keeps its rounds' asv results (``.asv/gate/<time>/screen`` and
``confirm``, exactly 5 samples a process, the two commits in ``commits.txt``). This script
reads them back, one median per process in the order asv timed them, and asks what other
designs would have said on the same processes:

- ``rounds``: the first R processes a side of each stage (a shorter run of the same
  interleaved sequence), for the screen and the confirmation;
- ``factor``: the screen's and the confirmation's factor;
- ``margin``: which processes count as the machine's fast mode (``inf``: every process,
  the plain median of process medians, i.e. the slow mode not set apart).

Each run's cells are labelled with the slowdown planted in them, from the JSON lines that
``python tests/test_asv_regression.py N DIR`` prints (``--log``): 1.0 where the code is
the same at both commits. Replayed slowdowns (``--scale 1.10``) multiply the head's
processes of unchanged cells, and are labelled as replays.

    python scripts/gate_design.py --log gate-runs.log
    python scripts/gate_design.py --log gate-runs.log --screen 6 8 --confirm 8 12 \\
        --factor 1.03 1.05 1.07 --margin 1.25 inf --scale 1.10

``--dump FILE`` writes the cell-runs read (each stage's samples per side, the planted
factor) as JSON: ``tests/fixtures/gate_processes.json`` holds some for the replay test.

Prints one JSON line per design and planted factor: cell-runs, how many were flagged
slower, faster, and the per cent caught (slowed) or falsely flagged (unchanged).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mhabench.analysis.process_compare import compare, lean, two_stage  # noqa: E402
from mhabench.compare.rounds import (  # noqa: E402
    SAMPLES,
    process_medians,
    read_cells,
    result_files,
)


@dataclass
class CellRun:
    """One cell of one gate run: each stage's samples per side, in timing order
    (:data:`~mhabench.compare.rounds.SAMPLES` consecutive samples a process)."""

    run: str
    cell: str
    planted: float  # the slowdown planted at the head (1.0: the same code)
    screen: tuple[list[float], list[float]]
    confirm: tuple[list[float], list[float]] | None  # None: the screen did not pass it on


def read_stage(stage: Path) -> dict[str, tuple[list[float], list[float]]]:
    """Each cell's (base, head) samples of one recorded stage."""
    if not (stage / "commits.txt").is_file():
        return {}
    base, head = (stage / "commits.txt").read_text().split()
    files = [result_files(stage / "results", c) for c in (base, head)]
    out = {}
    for env_name, path in files[0].items():
        before, after = read_cells(path), read_cells(files[1].get(env_name))
        for cell, samples in before.items():
            if samples and after.get(cell):
                out[cell] = (samples, after[cell])
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
        folder = Path(run["folder"])
        screen, confirm = read_stage(folder / "screen"), read_stage(folder / "confirm")
        for cell, sides in screen.items():
            out.append(CellRun(f"{run['case']}#{run['run']}", cell,
                               planted_factor(cell, run.get("planted", {})), sides,
                               confirm.get(cell)))
    return out


def judge(screen: tuple[Sequence[float], Sequence[float]],
          confirm: tuple[Sequence[float], Sequence[float]] | None, rounds: tuple[int, int],
          factors: tuple[float, float], margin: float, scale: float = 1.0) -> str:
    """The gate's verdict on the first ``rounds`` processes a side of each stage: "slower",
    "faster", "cleared" (passed on, not confirmed), "unchanged", or "unknown" (the
    screen passes it on and no confirmation was recorded to replay)."""
    def cut(sides: tuple[Sequence[float], Sequence[float]], n: int) -> tuple[list, list]:
        base, head = process_medians(sides[0]), process_medians(sides[1])
        return base[:n], [x * scale for x in head[:n]]

    first = compare(*cut(screen, rounds[0]), margin=margin)
    if not lean(first, factors[0]):
        return "unchanged"
    if confirm is None or min(len(confirm[0]), len(confirm[1])) < rounds[1] * SAMPLES:
        return "unknown"
    return two_stage(first, compare(*cut(confirm, rounds[1]), margin=margin),
                     screen_factor=factors[0], factor=factors[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, action="append",
                        help="JSON lines of tests/test_asv_regression.py (repeatable)")
    parser.add_argument("--screen", type=int, nargs="+", default=[8])
    parser.add_argument("--confirm", type=int, nargs="+", default=[12])
    parser.add_argument("--factor", type=float, nargs="+", default=[1.05],
                        help="the screen's and the confirmation's factor (one value: both)")
    parser.add_argument("--margin", type=float, nargs="+", default=[1.25])
    parser.add_argument("--scale", type=float, nargs="*", default=[],
                        help="replayed slowdowns of the unchanged cells, e.g. 1.10")
    parser.add_argument("--dump", type=Path, default=None,
                        help="write the cell-runs read (samples, planted factor) as JSON")
    args = parser.parse_args(argv)
    cells = [c for log in args.log for c in recorded_runs(log)]
    if not cells:
        parser.error("the logs list no recorded gate run with results")
    if args.dump:
        args.dump.write_text(json.dumps([vars(c) for c in cells]) + "\n")
    cases = [(c.planted, 1.0, c) for c in cells]
    cases += [(s, s, c) for s in args.scale for c in cells if c.planted == 1.0]
    for screen, confirm, factor, margin in itertools.product(
            args.screen, args.confirm, args.factor, args.margin):
        seen: dict[tuple[float, bool], list[str]] = {}
        for slowdown, scale, cell in cases:
            seen.setdefault((slowdown, scale != 1.0), []).append(
                judge(cell.screen, cell.confirm, (screen, confirm), (factor, factor),
                      margin, scale))
        for (slowdown, replayed), verdicts in sorted(seen.items()):
            known = [v for v in verdicts if v != "unknown"]
            slower, faster = known.count("slower"), known.count("faster")
            rate = (slower if slowdown > 1 else slower + faster) / max(len(known), 1)
            print(json.dumps({
                "design": f"screen {screen} / confirm {confirm} at {factor}x, margin "
                          f"{'inf' if math.isinf(margin) else margin}",
                "planted": slowdown, "replayed": replayed, "cell_runs": len(known),
                "unknown": len(verdicts) - len(known), "slower": slower, "faster": faster,
                ("caught_%" if slowdown > 1 else "false_%"): round(100 * rate, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
