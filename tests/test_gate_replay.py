"""The gate's statistic replayed on processes that real gate runs recorded.

``tests/fixtures/gate_processes.json`` holds every sample of two real ``mhabench gate`` runs
on the quick grid's head sweep (torch loop, batched, fused and reference at h = 8 and 64;
``python tests/test_asv_regression.py N DIR``, read back by ``scripts/gate_design.py --log
LOG --dump``): identical commits, and a commit making fused 1.10x and batched 1.25x slower.
The shipped statistic, fed the gate's own reading of asv's samples, flags every planted
cell and no unchanged one; the same processes judged with its parts switched off get
verdicts wrong: asv's own comparison of the pooled samples calls an identical cell
changed, and without the slow mode set apart a 1.10x cell is missed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mhabench.analysis.process_compare import FACTOR, compare, lean, two_stage
from mhabench.compare.rounds import process_medians

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "gate_processes.json"


@pytest.fixture(scope="module")
def cell_runs() -> list[dict[str, Any]]:
    runs = json.loads(FIXTURE.read_text())
    assert {r["planted"] for r in runs} == {1.0, 1.1, 1.25} and len(runs) == 16
    return runs


def gate_verdict(run: dict[str, Any], margin: float | None = None) -> str:
    """The gate's verdict on one recorded cell-run: its screen's and confirmation's
    samples read as the gate reads them (one median per process)."""
    kwargs = {} if margin is None else {"margin": margin}
    screen = compare(*(process_medians(s) for s in run["screen"]), **kwargs)
    if not lean(screen):
        return "unchanged"
    assert run["confirm"] is not None, run["cell"]  # the gate passed it on and confirmed
    return two_stage(screen, compare(*(process_medians(s) for s in run["confirm"]),
                                     **kwargs))


def test_the_planted_cells_are_flagged_and_the_unchanged_are_not(cell_runs) -> None:
    verdicts = {(r["run"], r["cell"]): (r["planted"], gate_verdict(r)) for r in cell_runs}
    wrong = {k: v for k, v in verdicts.items()
             if (v[0] > 1) != (v[1] == "slower") or v[1] == "faster"}
    assert not wrong, wrong


def test_asv_s_pooled_samples_call_an_identical_cell_changed(cell_runs) -> None:
    """The process unit switched off: asv's comparison (its Mann-Whitney test on the pooled
    samples of the 8 rounds, as ``asv continuous -f 1.05`` reads them) flags a cell whose
    code is the same at both commits."""
    from asv.commands.compare import _is_result_better
    from asv_runner.statistics import compute_stats

    def asv_flags(base: list[float], head: list[float]) -> bool:
        (va, sa), (vb, sb) = compute_stats(base, 1), compute_stats(head, 1)
        return (_is_result_better(vb, va, (sb, head), (sa, base), FACTOR)
                or _is_result_better(va, vb, (sa, base), (sb, head), FACTOR))

    same = [r for r in cell_runs if r["planted"] == 1.0]
    flagged = [r["cell"] for r in same if asv_flags(*r["screen"])]
    assert flagged, "asv's pooled test flagged no identical cell: the fixture shows nothing"
    assert all(gate_verdict(r) == "unchanged" for r in same if r["cell"] in flagged)


def test_without_the_slow_mode_set_apart_a_slowed_cell_is_missed(cell_runs) -> None:
    """The fast-mode margin switched off (every process's median counts): a 1.10x cell the
    shipped statistic catches is missed."""
    slowed = [r for r in cell_runs if r["planted"] == 1.1]
    assert all(gate_verdict(r) == "slower" for r in slowed)
    missed = [r["cell"] for r in slowed if gate_verdict(r, margin=float("inf")) != "slower"]
    assert missed, "every 1.10x cell caught with the slow mode in: the fixture shows nothing"


def test_the_fixture_holds_the_gate_s_design(cell_runs) -> None:
    """Recorded with the shipped rounds and samples: 8 screen and 12 confirmation
    processes a side, 5 samples each, so the replay judges what the gate judged."""
    from mhabench.compare.rounds import CONFIRM_ROUNDS, SAMPLES, SCREEN_ROUNDS

    for run in cell_runs:
        assert [len(s) for s in run["screen"]] == [SCREEN_ROUNDS * SAMPLES] * 2
        if run["confirm"] is not None:
            assert [len(s) for s in run["confirm"]] == [CONFIRM_ROUNDS * SAMPLES] * 2
