"""The culprit search's logic (``mhabench bisect``), on simulated processes: a git
repository of real commits, and rounds whose process medians are drawn around each
commit's level of each cell with the scatter of real processes (a few per cent, and a slow
mode in some processes). The real-run test is tests/test_bisect_real.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mhabench.cli.compare.bisect import lines
from mhabench.compare.bisect import (
    BISECT_DIR,
    FIRST_ROUNDS,
    MAX_ROUNDS,
    MORE_ROUNDS,
    Bisect,
    BisectError,
    middles,
)

CELL = "bench_x.Attention.time_step('torch', '{}', 2, 32)"


def make_repo(tmp: Path, commits: int) -> tuple[Path, list[str]]:
    """A git repository with an asv.conf.json and ``commits`` commits after the first."""
    repo = tmp / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    git("init", "-q")
    (repo / "asv.conf.json").write_text("{}")
    hashes = []
    for i in range(commits + 1):
        (repo / "file.txt").write_text(f"{i}\n")
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm",
            f"commit {i}")
        hashes.append(git("rev-parse", "HEAD"))
    return repo, hashes


def stage_results(folder: Path, commits: list[str]) -> None:
    """A stage's asv results folder (new), a file per commit: what the search copies into
    its history."""
    results = folder / "results" / "machine"
    results.mkdir(parents=True)
    for commit in commits:
        (results / f"{commit[:8]}-env.json").write_text(json.dumps({"commit": commit}))


class Simulated:
    """asv's rounds, simulated: each process's median is the commit's level of the cell
    times lognormal scatter, a slow process (1.3-1.6x) now and then; commits in ``failing``
    fail to run."""

    def __init__(self, hashes: list[str], levels: dict[str, list[float]], *,
                 failing: set[str] = frozenset(), scatter: float = 0.03, seed: int = 0):
        self.index = {h: i for i, h in enumerate(hashes)}
        self.levels, self.failing, self.scatter = levels, failing, scatter
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple[list[str], list[str], int]] = []

    def __call__(self, commits, benches, count, folder, **kwargs):
        stage_results(folder, commits)
        self.calls.append((list(commits), list(benches), count))
        cells = [c for c in self.levels if not benches
                 or any(re.search(b, c) for b in benches)]
        out = {}
        for commit in commits:
            for cell in cells:
                if commit in self.failing:
                    out.setdefault(cell, {})[commit] = None
                    continue
                level = self.levels[cell][self.index[commit]]
                medians = level * np.exp(self.rng.normal(0, self.scatter, count))
                slow = self.rng.random(count) < 0.15
                medians[slow] *= self.rng.uniform(1.3, 1.6, slow.sum())
                out.setdefault(cell, {})[commit] = [float(x) for x in medians]
        return out


def step(n: int, at: int, factor: float, base: float = 0.02) -> list[float]:
    return [base * (factor if i >= at else 1.0) for i in range(n)]


@pytest.fixture(scope="module")
def repo33(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    return make_repo(tmp_path_factory.mktemp("bisect"), 32)


def search(repo: Path, hashes: list[str], levels: dict, **kwargs) -> tuple:
    simulated = Simulated(hashes, levels, **{k: v for k, v in kwargs.items()
                                             if k != "tracks"})
    found = Bisect(hashes[0], hashes[-1], root=repo, echo=lambda text: None,
                   rounds=simulated, tracks=kwargs.pop("tracks", None)).run()
    return found, simulated


@pytest.mark.parametrize(("at", "factor"), [(7, 1.5), (20, 1.5), (29, 0.7), (12, 1.15)])
def test_one_step_names_its_commit_and_only_its_cells(repo33, at, factor) -> None:
    repo, hashes = repo33
    levels = {CELL.format("mine"): step(33, at, factor), CELL.format("other"): step(33, 0, 1),
              CELL.format("mine2"): step(33, at, factor, base=0.004)}
    found, simulated = search(repo, hashes, levels, seed=at)
    assert [c.commit for c in found.culprits] == [hashes[at]], lines(found)
    culprit = found.culprits[0]
    assert culprit.before == hashes[at - 1] and culprit.subject == f"commit {at}"
    assert sorted(culprit.cells) == [CELL.format("mine"), CELL.format("mine2")]
    for result in culprit.cells.values():
        assert result.ratio == pytest.approx(factor, rel=0.06)
    assert found.probes <= 7  # about log2(32) halvings, a commit more where one fails
    # the culprit's cells are confirmed by fresh rounds of it and the commit before it
    confirm = next(s for s in found.stages if s.name == f"culprit-{hashes[at][:8]}")
    assert confirm.commits == [hashes[at - 1], hashes[at]] and confirm.rounds >= 8
    assert not culprit.unconfirmed
    assert all(r.base_processes >= 8 for r in culprit.cells.values())
    # a large step is clear after a batch or two of rounds a probe; a small one takes more
    probes = [s.rounds for s in found.stages if s.name.startswith("probe")]
    if factor != 1.15:
        assert max(probes) <= FIRST_ROUNDS + 2 * MORE_ROUNDS and sum(probes) <= 8 * len(probes)
    assert all(s.rounds <= MAX_ROUNDS for s in found.stages)
    # every probe times three commits, the middle between the ends
    for commits, _, _ in simulated.calls:
        assert len(commits) in (2, 3)


def test_a_batch_of_three_rounds_sizes_every_stage(repo33) -> None:
    repo, hashes = repo33
    levels = {CELL.format("a"): step(33, 11, 1.5), CELL.format("b"): step(33, 0, 1)}
    simulated = Simulated(hashes, levels, seed=3)
    found = Bisect(hashes[0], hashes[-1], root=repo, echo=lambda text: None,
                   rounds=simulated, tracks=None, batch=3).run()
    assert [c.commit for c in found.culprits] == [hashes[11]], lines(found)
    # every asv run is a batch of 3 rounds, but a culprit's first confirmation (6)
    assert {count for _, _, count in simulated.calls} <= {3, 6}
    assert all(s.rounds <= 12 for s in found.stages)
    confirm = next(s for s in found.stages if s.name.startswith("culprit-"))
    assert confirm.rounds >= 6


def test_two_steps_are_both_named(repo33) -> None:
    repo, hashes = repo33
    levels = {CELL.format("a"): step(33, 9, 1.5),  # a step in one cell
              CELL.format("b"): step(33, 23, 1.4),  # another cell's later
              # and one cell that steps up and back down
              CELL.format("c"): [0.01 * (1.5 if 9 <= i < 23 else 1.0) for i in range(33)]}
    found, _ = search(repo, hashes, {k: v for k, v in levels.items() if k != CELL.format("c")})
    assert [c.commit for c in found.culprits] == [hashes[9], hashes[23]], lines(found)
    assert list(found.culprits[0].cells) == [CELL.format("a")]
    assert list(found.culprits[1].cells) == [CELL.format("b")]
    # a cell whose ends do not differ is not followed: up at 9 and back at 23
    found, _ = search(repo, hashes, {CELL.format("c"): levels[CELL.format("c")]})
    assert not found.changed and not found.culprits
    # two steps of one cell, the same way
    both = [0.02 * (1.3 if i >= 6 else 1.0) * (1.3 if i >= 26 else 1.0) for i in range(33)]
    found, _ = search(repo, hashes, {CELL.format("a"): both})
    assert [c.commit for c in found.culprits] == [hashes[6], hashes[26]], lines(found)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_large_step_and_a_smaller_one_in_one_cell_are_both_named(repo33, seed) -> None:
    """The real-run test's two changes: the plug-in's float64 softmax (2.5x) at 11, its
    float64 mixing (1.35x more) at 21, in the two halves of the first probe, with the
    scatter of that cell's processes (6 %): the larger half must not be taken before the
    smaller one has been looked at, and a commit a probe points at by chance is cleared
    by its own fresh rounds."""
    repo, hashes = repo33
    both = [0.02 * (2.5 if i >= 11 else 1.0) * (1.35 if i >= 21 else 1.0) for i in range(33)]
    found, _ = search(repo, hashes, {CELL.format("a"): both}, scatter=0.06, seed=seed)
    assert [c.commit for c in found.culprits] == [hashes[11], hashes[21]], lines(found)
    assert all(c.commit not in (hashes[11], hashes[21]) for c in found.cleared)


def test_no_change_ends_after_the_ends(repo33) -> None:
    repo, hashes = repo33
    found, simulated = search(repo, hashes, {CELL.format("a"): step(33, 0, 1.0),
                                             CELL.format("b"): step(33, 0, 1.0, base=0.1)})
    assert not found.changed and not found.culprits and found.probes == 0
    assert "no change" in "\n".join(lines(found))
    assert all(len(commits) == 2 for commits, _, _ in simulated.calls)


def test_a_commit_that_fails_is_skipped_and_said(repo33) -> None:
    repo, hashes = repo33
    levels = {CELL.format("a"): step(33, 11, 1.6)}
    found, _ = search(repo, hashes, levels, failing={hashes[16], hashes[8]})
    assert [c.commit for c in found.culprits] == [hashes[11]]
    assert {hashes[16]} <= found.skipped
    text = "\n".join(lines(found))
    assert f"skipped {hashes[16][:8]}" in text
    # the culprit's neighbour fails: the answer names both
    found, _ = search(repo, hashes, levels, failing={hashes[10]})
    culprit = found.culprits[0]
    assert culprit.commit == hashes[11] and culprit.before == hashes[9]
    assert culprit.skipped == [hashes[10]]
    assert f"or one of {hashes[10][:8]}" in "\n".join(lines(found))


def test_the_search_keeps_its_rounds_and_a_history(repo33) -> None:
    repo, hashes = repo33
    found, _ = search(repo, hashes, {CELL.format("a"): step(33, 5, 1.5)})
    assert found.folder.parent == (repo / BISECT_DIR).resolve()
    summary = json.loads((found.folder / "bisect.json").read_text())
    assert summary["culprits"][0]["commit"] == hashes[5]
    assert summary["probes"] == found.probes and summary["rounds"] == found.rounds
    history = {p.name for p in (found.folder / "history" / "results" / "machine").glob("*")}
    probed = {c for s in found.stages for c in s.commits}
    assert history == {f"{c[:8]}-env.json" for c in probed}
    assert not (repo / ".asv" / "results").exists()


def test_the_kernel_each_side_ran_is_read_where_it_changed(repo33) -> None:
    repo, hashes = repo33
    fused, other = CELL.format("fused"), CELL.format("plain")
    asked = []

    def tracks(commits, benches, folder, **kwargs):
        asked.append((commits, benches))
        kernel = {hashes[13]: "math", hashes[12]: "flash"}
        return {fused.replace(".time_step(", ".track_kernel("): {c: kernel[c] for c in commits},
                other.replace(".time_step(", ".track_kernel("): {c: None for c in commits}}

    found, _ = search(repo, hashes, {fused: step(33, 13, 1.8), other: step(33, 13, 1.5)},
                      tracks=tracks)
    culprit = found.culprits[0]
    assert culprit.commit == hashes[13] and asked[0][0] == [hashes[12], hashes[13]]
    assert culprit.kernels == {fused: ("flash", "math")}
    assert "kernel flash -> math" in "\n".join(lines(found))


def test_middles_start_in_the_middle_and_cover_the_stretch() -> None:
    assert middles(0, 8) == [4, 5, 3, 6, 2, 7, 1]
    assert sorted(middles(3, 6)) == [4, 5]


def test_bad_input_is_one_clear_line(repo33, tmp_path) -> None:
    repo, hashes = repo33
    with pytest.raises(BisectError, match="names no commit"):
        Bisect("nosuchcommit", hashes[-1], root=repo)
    with pytest.raises(BisectError, match="not an ancestor"):
        Bisect(hashes[5], hashes[2], root=repo)
    with pytest.raises(BisectError, match="no commit between"):
        Bisect(hashes[5], hashes[6], root=repo)
    with pytest.raises(BisectError, match="no asv.conf.json"):
        Bisect(hashes[0], hashes[5], root=tmp_path)
    with pytest.raises(BisectError, match="--rounds 1 is too few"):
        Bisect(hashes[0], hashes[5], root=repo, batch=1)
    # a cell that fails at an end: nothing to compare, and nothing is searched
    simulated = Simulated(hashes, {CELL.format("a"): step(33, 3, 1.5)}, failing={hashes[-1]})
    with pytest.raises(BisectError, match="fail at GOOD or BAD"):
        Bisect(hashes[0], hashes[-1], root=repo, echo=lambda t: None,
               rounds=simulated).run()
    # through the command: one line on stderr, exit status 2
    done = subprocess.run([sys.executable, "-m", "mhabench.cli", "bisect", hashes[5],
                           hashes[2]], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "not an ancestor" in done.stderr


def test_a_dry_run_says_the_range_cells_and_time_and_runs_nothing() -> None:
    root = Path(__file__).resolve().parents[1]
    before = set((root / BISECT_DIR).glob("*"))
    done = subprocess.run([sys.executable, "-m", "mhabench.cli", "bisect", "HEAD~4", "HEAD",
                           "-b", r"^bench_gqa\.MhaGqaMqa\.time_step\('torch', 'batched'",
                           "--dry-run"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.search(r"bisect: 4 commits, 3 time cell\(s\); the ends take about \d+ min, "
                     r"and each of about 2 probes", done.stderr), done.stderr
    assert set((root / BISECT_DIR).glob("*")) == before
