"""The gate's statistic replayed on processes that real runs recorded.

``tests/fixtures/gate_processes.json`` (``scripts/gate_design.py --dump``) holds, as each
process's median in ms:

- cell-runs of 20 interleaved rounds on the quick grid's head sweep and GQA cells, torch
  alone (``python tests/test_asv_regression.py N DIR rounds-identical rounds-fused``),
  replayed as the gate's screen (the first 8 rounds) and confirmation (the next 12):
  identical commits, and a commit making torch fused 1.10x slower;
- the cell-runs of two real ``mhabench gate`` runs (identical commits; fused 1.10x and
  batched 1.25x slower), whose unpassed cells have no confirmation to replay;
- ``two_modes``: torch batched's GQA cell from the CI run where the gate called an
  unchanged cell 0.80x faster: about a third of one side's processes ran in a fast mode
  (23 ms against 29 ms) and none of the other's.

The shipped statistic (the modes lined up, ``mhabench.analysis.comparisons.modes``) reads that cell
unchanged and names its modes and their shares; the earlier one (each side's fast
processes) reads it faster. On the recorded cell-runs it flags no unchanged cell and
catches the planted ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mhabench.analysis.comparisons.process_compare import compare, lean, two_stage, verdict
from mhabench.compare.rounds import CONFIRM_ROUNDS, SCREEN_ROUNDS

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "gate_processes.json"
sys.path.insert(0, str(ROOT / "scripts"))
from gate_design import CellRun, fast_rule, judge  # noqa: E402


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def cell_runs(recorded: dict[str, Any]) -> list[CellRun]:
    def seconds(sides: list[list[float]] | None) -> tuple | None:
        return None if sides is None else tuple([x / 1e3 for x in s] for s in sides)

    return [CellRun(r["run"], r["cell"], r["planted"], seconds(r["screen"]),
                    seconds(r["confirm"])) for r in recorded["cell_runs"]]


def verdicts(runs: list[CellRun], statistic: str = "modes") -> dict[float, list[str]]:
    out: dict[float, list[str]] = {}
    for run in runs:
        out.setdefault(run.planted, []).append(
            judge(run, (SCREEN_ROUNDS, CONFIRM_ROUNDS), (1.05, 1.05), statistic))
    return out


def test_the_two_mode_cell_reads_unchanged_with_its_modes_named(recorded) -> None:
    cell = recorded["two_modes"]
    screen = [[x / 1e3 for x in side] for side in cell["screen"]]
    confirm = [[x / 1e3 for x in side] for side in cell["confirm"]]
    # the shipped statistic: its levels line up at 1.0, so neither stage leans; the fast
    # processes alone would
    first, again = compare(*screen), compare(*confirm)
    assert first.ratio == pytest.approx(1.0, abs=0.03) and first.fast_ratio < 0.85
    assert not lean(first) and not lean(again) and verdict(again) == "unchanged"
    # all 20 processes a side: two modes, the fast one on the new side far more often
    both = compare(screen[0] + confirm[0], screen[1] + confirm[1])
    assert [round(m.level * 1e3) for m in both.modes] == [24, 29]
    fast = both.modes[0]
    assert fast.new >= 6 and fast.base <= 1 and both.mix_p < 0.05
    text = both.describe_modes()
    assert text.startswith("two modes, 23.") and f"{fast.new} of 20 processes" in text
    assert f"{fast.base} of 20 at base" in text
    # the earlier statistic keeps each side's fastest: the new side's fast mode against
    # the base's only one reads 0.80x faster, in the screen and the confirmation
    old_screen, old_confirm = fast_rule(*screen), fast_rule(*confirm)
    assert old_screen.ratio < 0.85 and two_stage(old_screen, old_confirm) == "faster"


def test_no_unchanged_cell_is_flagged_and_the_planted_are_caught(recorded) -> None:
    runs = [r for r in cell_runs(recorded) if r.run.startswith("rounds-")]
    said = verdicts(runs)
    unchanged, slowed = said[1.0], said[1.1]
    assert len(unchanged) >= 60 and len(slowed) >= 20
    assert "slower" not in unchanged and "faster" not in unchanged
    # 1.10x on a machine two other jobs shared: most caught, none read faster
    assert slowed.count("slower") >= 0.6 * len(slowed) and "faster" not in slowed


def test_the_recorded_gate_runs_replay_the_same_way(recorded) -> None:
    runs = [r for r in cell_runs(recorded) if r.run.startswith("gate-")]
    said = verdicts(runs)
    assert set(said) == {1.0, 1.1, 1.25}
    assert all(v in ("unchanged", "cleared", "unknown") for v in said[1.0])
    assert said[1.1] == ["slower"] * len(said[1.1]) and said[1.25] == ["slower"] * 2


def test_the_earlier_statistic_flags_unchanged_cells_here(recorded) -> None:
    """The part switched off: on the same recorded rounds, each side's fast processes
    call some unchanged cells changed, which the modes lined up do not."""
    runs = [r for r in cell_runs(recorded) if r.run.startswith("rounds-")
            and r.planted == 1.0]
    old = verdicts(runs, "fast")[1.0]
    assert old.count("slower") + old.count("faster") >= 1
