"""``mhabench confirm`` without asv (its listing and its errors) and the confirmations
files it writes; the real re-measurement runs in tests/test_own_repo.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.synthetic_asv import grid, synthetic_time, write_results

from mhabench.analysis.history.confirmations import (
    Confirmation,
    load_confirmations,
    save_confirmations,
)
from mhabench.cli import main

COMMITS = [f"{i:x}" * 40 for i in range(1, 7)]


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """6 commits, 10 samples a cell at 5 % noise; from the newest commit every h=64 cell
    runs 1.5x slower: two candidates at the newest commit."""
    return write_results(
        tmp_path / "results", params=grid()[:2] + [[2], [128, 256], [64]] + [[1, 8, 64]]
        + grid()[6:], commits=COMMITS, samples=10, noise=0.05, seed=3,
        time_of=lambda c, i: synthetic_time(c) * (1.5 if i == 5 and c.heads == 64 else 1))


def test_dry_run_lists_the_candidates_by_commit_pair(history: Path, capsys) -> None:
    code = main(["confirm", "--results", str(history), "--repo", str(history),
                 "--dry-run", "--at", COMMITS[5][:8]])
    out = capsys.readouterr().out
    assert code == 0
    assert f"2 cell(s) on synth, {COMMITS[4][:8]} -> {COMMITS[5][:8]}" in out, out
    assert out.count("time_step(") == 2 and out.count("64,") >= 2
    assert not (history.parent / "confirm").exists()  # a dry run writes nothing


@pytest.mark.parametrize("args, message", [
    (["--at", "zzzz"], "--at 'zzzz' names no commit of the results"),
    (["--cell", "("], "--cell '(' is not a regular expression"),
    (["--threshold", "0.9"], "--threshold 0.9 is not allowed"),
    (["--load", "/nonexistent"], "--load '/nonexistent' is not a folder"),
])
def test_bad_input_is_one_line_naming_it(history: Path, capsys, args: list[str],
                                         message: str) -> None:
    assert main(["confirm", "--results", str(history), "--dry-run", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def _record(verdict: str, date: str) -> Confirmation:
    return Confirmation("m", "b.C.time_step(1)", "a" * 40, "b" * 40, verdict, 1.3, 16, 1.12,
                        date, "/x")


def test_confirmations_are_added_never_replaced(tmp_path: Path) -> None:
    save_confirmations(tmp_path / "1", [_record("cleared", "2026-01-01T00:00:00")])
    with pytest.raises(FileExistsError):
        save_confirmations(tmp_path / "1", [_record("confirmed", "2026-01-02T00:00:00")])
    save_confirmations(tmp_path / "2", [_record("confirmed", "2026-01-02T00:00:00")])
    found = load_confirmations(tmp_path)
    assert [r.verdict for r in found.values()] == ["confirmed"]  # the newest wins
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "confirmations.json").write_text(json.dumps({"confirmations": [
        {**_record("maybe", "2026-01-03").__dict__}]}))
    with pytest.raises(ValueError, match="verdict 'maybe' is not one of confirmed, cleared"):
        load_confirmations(tmp_path)
