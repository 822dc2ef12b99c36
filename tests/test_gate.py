"""The gate's own logic, without timing (the end-to-end runs: test_asv_regression.py): the
asv run it starts, the process medians it reads back from asv's results, its two stages'
verdicts, the new folder each run keeps, and its bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.scratch import commit_all, git

import mhabench.compare.gate as gate_module
from mhabench.compare import rounds as rounds_module
from mhabench.compare.gate import GATE_DIR, Evidence, rounds
from mhabench.compare.rounds import SAMPLES, cell_pattern, preimport

ROOT = Path(__file__).resolve().parents[1]
CELL = "bench_gqa.MhaGqaMqa.time_step('{fw}', '{be}', 2, 512, 256, 16, 4, 'cpu', 'float32', 1)"
BENCH = "bench_gqa.MhaGqaMqa.time_step"
PARAMS = [["'torch'"], ["'fused'", "'loop'"], ["2"], ["512"], ["256"], ["16"], ["4"],
          ["'cpu'"], ["'float32'"], ["1"]]


def project(tmp: Path) -> tuple[Path, str, str]:
    """A git repository with an asv.conf.json and two commits."""
    repo = tmp / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "asv.conf.json").write_text(
        '// comments, as asv allows\n{"version": 1, "repo": ".", '
        '"results_dir": ".asv/results", "html_dir": ".asv/html"}\n')
    base = commit_all(repo, "base")
    (repo / "README").write_text("head\n")
    return repo, base, commit_all(repo, "head")


def write_results(results: Path, commit: str, samples: list[list[float] | None]) -> None:
    """asv's results file of ``commit`` for BENCH's two cells (None: the cell failed)."""
    path = results / "m" / f"{commit[:8]}-virtualenv-py3.11.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "commit_hash": commit, "env_name": "virtualenv-py3.11", "params": {},
        "result_columns": ["result", "params", "samples"],
        "results": {BENCH: [[None if s is None else min(s) for s in samples], PARAMS,
                            samples]}}))


def test_a_cell_pattern_selects_that_cell_only() -> None:
    cell = CELL.format(fw="torch", be="fused")
    pattern = re.compile(cell_pattern(cell))
    assert pattern.search(cell)
    assert not pattern.search(cell.replace("'fused'", "'batched'"))
    assert not pattern.search(cell.replace(", 1)", ", 2)"))


def test_rounds_run_both_commits_interleaved_and_read_one_median_per_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One asv run: both commits from a hash file, interleaved rounds of exactly SAMPLES
    samples a process, results in the stage's new folder; each process's samples come back
    as one median, and a cell that failed at the head reads None."""
    repo, base, head = project(tmp_path)
    calls = []

    def run_asv(config: Path, args: list[str], env: dict[str, str], root: Path,
                echo: object) -> tuple[int, str]:
        calls.append((config, args, env))
        conf = json.loads(config.read_text())
        results = Path(conf["results_dir"])
        # three processes of fused a side; loop fails at the head
        fused = [1.0, 1.1, 0.9, 1.0, 1.0, 2.0, 2.0, 2.1, 1.9, 2.0, 1.2, 1.2, 1.2, 1.2, 1.2]
        write_results(results, base, [fused, [5.0] * 10])
        write_results(results, head, [[x * 1.5 for x in fused], None])
        return 0, ""

    monkeypatch.setattr(rounds_module, "run_asv", run_asv)
    monkeypatch.setenv("MHABENCH_LOAD_DIR", str(tmp_path / "history-load"))
    folder = repo / GATE_DIR / "stamp" / "screen"
    evidence = rounds(base, head, [cell_pattern(CELL.format(fw="torch", be="fused"))], 8,
                      folder, asv_args=["--machine", "m"], root=repo, echo=lambda t: None)
    config, args, env = calls[0]
    assert config == folder / "asv.conf.json"
    conf = json.loads(config.read_text())
    assert conf["results_dir"] == str(folder / "results")
    assert conf["repo"] == str(repo)  # asv reads paths from the config's own folder
    assert args[:6] == ["--interleave-rounds", "--record-samples", "-a", "rounds=8", "-a",
                        f"repeat={SAMPLES}"]
    assert "--machine" in args and args[-1] == f"HASHFILE:{folder / 'commits.txt'}"
    assert (folder / "commits.txt").read_text().split() == [base, head]
    # a history's load folder never gets the rounds' records; torch alone imported up front
    assert "MHABENCH_LOAD_DIR" not in env and env["MHABENCH_PREIMPORT"] == "torch"
    fused, loop = CELL.format(fw="torch", be="fused"), CELL.format(fw="torch", be="loop")
    assert evidence[fused].base == [1.0, 2.0, 1.2]
    assert evidence[fused].head == pytest.approx([1.5, 3.0, 1.8])
    assert evidence[loop].base == [5.0, 5.0] and evidence[loop].head is None
    with pytest.raises(FileExistsError):  # a stage never reuses a folder
        rounds(base, head, [], 8, folder, root=repo, echo=lambda t: None)


def test_the_gate_confirms_the_way_the_screen_leaned_and_reports_new_failures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two stages' logic on process medians: the screen passes on the cells whose ratio
    leans past its factor either way; a confirmation counts only a change the way the
    screen leaned; a benchmark that fails at the head only is a regression at once."""
    repo, base, head = project(tmp_path)
    steady = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99]
    cells = {name: CELL.format(fw="torch", be=name) for name in
             ("slowed", "flip", "same", "gone")}
    screen = {cells["slowed"]: Evidence(steady, [x * 1.2 for x in steady]),
              cells["flip"]: Evidence(steady, [x * 0.9 for x in steady]),
              cells["same"]: Evidence(steady, steady[::-1]),
              cells["gone"]: Evidence(steady, None)}
    confirm = {cells["slowed"]: Evidence(steady, [x * 1.15 for x in steady]),
               cells["flip"]: Evidence(steady, [x * 1.15 for x in steady])}
    calls = []

    def fake_rounds(a: str, b: str, benches: list[str], count: int, folder: Path,
                    **kwargs: object) -> dict[str, Evidence]:
        calls.append((a, b, list(benches), count, folder))
        return screen if len(calls) == 1 else confirm

    monkeypatch.setattr(gate_module, "rounds", fake_rounds)
    verdict = gate_module.gate("HEAD~1", "HEAD", root=repo, echo=lambda text: None)
    assert calls[0][:4] == (base, head, [], gate_module.SCREEN_ROUNDS)
    assert calls[1][2] == [cell_pattern(cells["flip"]), cell_pattern(cells["slowed"])]
    assert calls[1][3] == gate_module.CONFIRM_ROUNDS
    assert calls[0][4].parent == calls[1][4].parent  # one new folder per gate run
    assert calls[0][4].parent.parent == (repo / GATE_DIR).resolve()
    assert [(c.mark, c.cell) for c in verdict.screened] == [("-", cells["flip"]),
                                                             ("+", cells["slowed"])]
    # "flip" leaned faster in the screen and slower in the confirmation: cleared
    assert [c.cell for c in verdict.confirmed] == [cells["slowed"]]
    change = verdict.confirmed[0]
    # the alignment's resolution: a tenth of a per cent
    assert change.ratio == pytest.approx(1.15, rel=1e-3)
    assert 1 < change.low <= change.ratio <= change.high
    assert [c.cell for c in verdict.failed] == [cells["gone"]]
    assert [c.cell for c in verdict.regressions] == [cells["slowed"], cells["gone"]]


def test_the_cli_names_a_folder_without_asv_conf(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mhabench.cli", "gate", "main", "HEAD"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mhabench gate: error: '.' has no asv.conf.json: run the gate from the project's root"]


def test_the_cli_names_an_unknown_commit_before_anything_runs(tmp_path: Path) -> None:
    repo, _, _ = project(tmp_path)
    done = subprocess.run([sys.executable, "-m", "mhabench.cli", "gate", "no-such", "HEAD"],
                          cwd=repo, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'no-such' names no commit of" in lines[0], lines
    assert not (repo / GATE_DIR).exists()  # nothing written


def test_rounds_import_only_the_frameworks_their_cells_name() -> None:
    """Each round of the gate starts a forkserver: the frameworks its -b patterns name as
    a cell's first parameter are imported up front, both where a pattern names neither."""
    torch_cell = "bench_gqa.MhaGqaMqa.time_step('torch', 'fused', 2, 512)"
    assert preimport([cell_pattern(torch_cell)]) == ["torch"]
    assert preimport([cell_pattern(torch_cell), cell_pattern(torch_cell.replace(
        "torch", "jax"))]) == ["torch", "jax"]
    assert preimport([r"time_step\('jax', "]) == ["jax"]
    assert preimport([r"time_step\('jax', ", "bench_heads"]) == ["torch", "jax"]
    assert preimport([]) == ["torch", "jax"]


def test_the_gate_says_one_commit_and_its_time_before_it_starts() -> None:
    """``mhabench gate HEAD HEAD`` without -b would time the whole grid against itself:
    it says both sides are one commit and how long the selection takes; ``--dry-run``
    stops there, having run nothing."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "mhabench.cli", "gate", "HEAD", "HEAD",
                           "--dry-run"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "MHABENCH_GRID": "quick"})
    assert done.returncode == 0, done.stderr
    assert "are one commit" in done.stderr and "measures only the noise" in done.stderr
    every = int(re.search(r"gate: (\d+) time cell\(s\)", done.stderr).group(1))
    narrow = subprocess.run([sys.executable, "-m", "mhabench.cli", "gate", "HEAD", "HEAD",
                             "-b", r"^bench_heads\.HeadsAtFixedWidth\.time_step\('torch', "
                             r"'fused'", "--dry-run"], cwd=root, capture_output=True,
                            text=True, env={**os.environ, "MHABENCH_GRID": "quick"})
    assert re.search(r"gate: 3 time cell\(s\); the screen \(8 rounds of both commits\) "
                     r"takes about \d+ min", narrow.stderr), narrow.stderr
    assert every > 100  # the quick grid's time cells, all of them
    assert "h, and confirming" in done.stderr  # hours, said before any of them start


def test_a_cell_whose_modes_mix_moved_is_said_not_flagged(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """torch batched's GQA cell as CI recorded it: about a third of the head's processes in
    a 23 ms mode the base never showed, the rest at 29 ms on both sides. Its fast processes
    lean, so the screen passes it on; the confirmation clears it, and the mix of its modes,
    judged on all 20 processes a side, gets a ``modes`` line, not a verdict."""
    repo, base, head = project(tmp_path)
    recorded = json.loads((Path(__file__).parent / "fixtures" / "gate_processes.json")
                          .read_text())["two_modes"]
    screen, confirm = ([[x / 1e3 for x in side] for side in recorded[s]]
                       for s in ("screen", "confirm"))
    cell = CELL.format(fw="torch", be="batched")
    calls = []

    def fake_rounds(a, b, benches, count, folder, **kwargs):
        calls.append(count)
        sides = screen if len(calls) == 1 else confirm
        return {cell: Evidence(*sides)}

    monkeypatch.setattr(gate_module, "rounds", fake_rounds)
    verdict = gate_module.gate("HEAD~1", "HEAD", root=repo, echo=lambda text: None)
    assert calls == [gate_module.SCREEN_ROUNDS, gate_module.CONFIRM_ROUNDS]
    assert [c.cell for c in verdict.screened] == [cell] and not verdict.confirmed
    assert not verdict.regressions
    [mixed] = verdict.mixed
    assert mixed.mark == "~" and mixed.ratio == pytest.approx(1.0, abs=0.03)
    assert mixed.modes.startswith("two modes, 23") and "of 20 processes" in mixed.modes
