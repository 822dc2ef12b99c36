"""The gate's own logic, without asv runs (the end-to-end runs: test_asv_regression.py):
it reads asv's table, selects a flagged cell and only it, keeps its results in a new
folder of its own, and names a bad place to run from."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mhabench.suite.gate import (
    GATE_DIR,
    _config,
    cell_pattern,
    changed_rows,
    preimport,
    table_rows,
)

ROOT = Path(__file__).resolve().parents[1]

# asv continuous's table, as asv 0.6 prints it with --no-only-changed: two changed rows,
# one unchanged, one beyond the factor but not significant ("~"), one n/a.
CELL = "bench_gqa.MhaGqaMqa.time_step('{fw}', '{be}', 2, 512, 256, 16, 4, 'cpu', 'float32', 1)"
HEADER = "| Change | Before [8df16dc4] | After [563a65be] | Ratio | Benchmark (Parameter) |"
TABLE = "\n".join([
    HEADER, "|--------|------|------|-------|------|",
    "| +      | 12.1±0.3ms | 15.4±0.4ms | 1.27 | " + CELL.format(fw="torch", be="fused") + " |",
    "| -      | 40.2±2ms   | 35.0±1ms   | 0.87 | " + CELL.format(fw="jax", be="loop") + " |",
    "|        | 20.0±0.5ms | 20.3±0.4ms | 1.01 | " + CELL.format(fw="torch", be="loop") + " |",
    "|        | 30.1±3ms   | 36.2±5ms   | ~1.20 | " + CELL.format(fw="jax", be="fused") + " |",
    "| +      | failed     | 1.0ms      |  n/a | bench_x.X.time_y |"])


def test_changed_rows_are_the_marked_ones_with_their_ratio() -> None:
    rows = changed_rows(TABLE)
    assert [(r.mark, r.ratio) for r in rows] == [("+", 1.27), ("-", 0.87), ("+", None)]
    assert rows[0].cell.startswith("bench_gqa.MhaGqaMqa.time_step('torch', 'fused'")
    assert changed_rows("no table here\n| a | b |") == []
    every = [r for r in table_rows(TABLE) if r.cell.startswith("bench_")]  # unchanged too
    assert [(r.mark, r.ratio) for r in every] == [
        ("+", 1.27), ("-", 0.87), ("", 1.01), ("~", 1.20), ("+", None)]
    # what the gate's screen passes on: significant or not, beyond its factor either way
    assert [r.ratio for r in changed_rows(TABLE, "+-~")] == [1.27, 0.87, 1.20, None]


def test_a_cell_pattern_selects_that_cell_only() -> None:
    cell = changed_rows(TABLE)[0].cell
    pattern = re.compile(cell_pattern(cell))
    assert pattern.search(cell)
    assert not pattern.search(cell.replace("'fused'", "'batched'"))
    assert not pattern.search(cell.replace(", 1)", ", 2)"))


def test_each_stage_gets_a_new_results_folder_and_nothing_is_reused(tmp_path: Path) -> None:
    (tmp_path / "asv.conf.json").write_text(
        '// comments, as asv allows\n{"version": 1, "repo": ".", '
        '"results_dir": ".asv/results", "html_dir": ".asv/html"}\n')
    folder = tmp_path / GATE_DIR / "stamp"
    conf = json.loads(_config(tmp_path, folder, "screen").read_text())
    assert conf["results_dir"] == str((folder / "screen" / "results").resolve())
    assert conf["repo"] == str(tmp_path.resolve())  # asv reads paths from the config's folder
    assert conf["version"] == 1  # the rest as the project has it
    with pytest.raises(FileExistsError):
        _config(tmp_path, folder, "screen")


def test_the_cli_names_a_folder_without_asv_conf(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mhabench.cli", "gate", "main", "HEAD"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mhabench gate: error: '.' has no asv.conf.json: run the gate from the project's root"]


def test_the_gate_confirms_the_way_the_screen_leaned_and_reports_new_failures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two stages' logic on asv tables (asv itself: test_asv_regression.py): the screen
    passes on "+", "-" and "~" rows; a confirmation flag counts only the way the screen
    leaned; a benchmark that fails on HEAD only ("!") is a regression without confirming."""
    import mhabench.suite.gate as gate_module

    (tmp_path / "asv.conf.json").write_text('{"version": 1}')
    row = "| {mark:<6} | 20ms | 25ms | {ratio} | " + CELL + " |"
    screen = "\n".join([HEADER, row.format(mark="", ratio="~1.20", fw="torch", be="fused"),
                        row.format(mark="", ratio="~0.90", fw="torch", be="loop"),
                        row.format(mark="+", ratio="1.30", fw="jax", be="fused"),
                        row.format(mark="", ratio="1.01", fw="jax", be="loop"),
                        "| !      | 1.0ms | failed | n/a | bench_x.X.time_y |",
                        gate_module.VERDICT_LINES[1]])
    confirm = "\n".join([HEADER, row.format(mark="+", ratio="1.22", fw="torch", be="fused"),
                         row.format(mark="+", ratio="1.15", fw="torch", be="loop"),
                         gate_module.VERDICT_LINES[1]])
    calls = []

    def continuous(config: Path, options: object, factor: float, benches: list[str],
                   *args: object) -> str:
        calls.append((factor, list(benches)))
        return screen if len(calls) == 1 else confirm

    monkeypatch.setattr(gate_module, "_continuous", continuous)
    verdict = gate_module.gate("main", "HEAD", root=tmp_path, echo=lambda text: None)
    assert calls[0] == (gate_module.SCREEN_FACTOR, [])
    assert calls[1][0] == gate_module.FACTOR and len(calls[1][1]) == 3  # +, ~ and ~ rows
    assert [(c.mark, c.lean) for c in verdict.screened] == [("~", "+"), ("~", "-"), ("+", "+")]
    # torch loop leaned faster in the screen and slower in the confirmation: cleared
    assert [c.cell for c in verdict.confirmed] == [CELL.format(fw="torch", be="fused")]
    assert [c.cell for c in verdict.failed] == ["bench_x.X.time_y"]
    assert [c.cell for c in verdict.regressions] == [CELL.format(fw="torch", be="fused"),
                                                     "bench_x.X.time_y"]


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


def test_rounds_never_record_load_into_a_history_load_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A history's MHABENCH_LOAD_DIR in the caller's environment does not reach the
    rounds: their records are keyed by commit and cell, so ``mhabench confirm``'s rounds
    there recast the confirmed cell's load in the history (a second verdict for the cell
    in the next report, seen in CI)."""
    import mhabench.suite.gate as gate_module

    seen = []

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, gate_module.VERDICT_LINES[0], "")

    monkeypatch.setenv("MHABENCH_LOAD_DIR", str(tmp_path / "history-load"))
    monkeypatch.setattr(gate_module.subprocess, "run", run)
    gate_module._continuous(tmp_path / "stage" / "asv.conf.json", (), 1.1, [CELL], "a", "b",
                            (), tmp_path, lambda text: None)
    assert len(seen) == 1 and "MHABENCH_LOAD_DIR" not in seen[0]
    assert seen[0]["MHABENCH_PREIMPORT"] == "torch,jax"
