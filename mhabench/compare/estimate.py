"""How long a comparison will take, said before it starts: the gate, the versions
comparison and the culprit search each time every selected cell in fresh processes, round
after round, and a wide ``-b`` (or none) can mean hours.

The cells come from asv's own discovery of the project's benchmarks under the grid in
force (:func:`mhabench.asvproject.cells.list_cells`), selected as asv's ``-b`` selects
them; each step's time from the cost model at a default rate
(:func:`mhabench.asvproject.cell_time.step_seconds`). A round costs each side asv's
install of the commit and a forkserver start, then per cell a process's start-up, a few
warm calls and its samples.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mhabench.compare.rounds import SAMPLES

ROUND_S = 3.0  # per side and round: asv installs the commit and starts its forkserver
PROCESS_S = 0.3  # per cell and round: fork, a cached setup, asv's bookkeeping
WARM_CALLS = 3  # warm calls beside the samples


@dataclass(frozen=True)
class Estimate:
    """The selected time cells and what one round of one side takes."""

    cells: int
    round_seconds: float  # one side's round of every selected cell

    def seconds(self, rounds: int, sides: int) -> float:
        return rounds * sides * self.round_seconds

    def say(self, rounds: int, sides: int) -> str:
        return f"about {_minutes(self.seconds(rounds, sides))}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def estimate(benches: Sequence[str], root: Path = Path("."), grid: str | None = None
             ) -> Estimate | None:
    """The time cells that ``asv run -b`` with ``benches`` runs in ``root``'s benchmarks
    (under ``grid``, else the environment's) and one side's round of them; None where the
    benchmarks do not import here (a user's package not installed in this interpreter)."""
    from mhabench.asvproject.cell_time import step_seconds
    from mhabench.asvproject.cells import CellListError, list_cells

    try:
        env = {**os.environ, **({"MHABENCH_GRID": grid} if grid else {})}
        cells = [c for c in list_cells(sys.executable, env, Path(root))
                 if c.kind == "time"
                 and (not benches or any(re.search(b, c.name) for b in benches))]
    except (CellListError, OSError, ValueError):
        return None
    steps, _ = step_seconds(cells, None, "")
    per_side = ROUND_S + sum(PROCESS_S + (WARM_CALLS + SAMPLES) * s for s in steps)
    return Estimate(len(cells), per_side if cells else 0.0)
