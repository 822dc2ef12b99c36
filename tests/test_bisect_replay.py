"""The culprit search on a range with two changes, replayed on real processes: every
commit of the plug-in's 32-commit history (tests/test_bisect_real.py, changes at 11 and
23) timed by asv in 16 interleaved rounds of fresh processes, each process's median kept
(tests/fixtures/bisect_processes.json, ``python tests/test_bisect_real.py record DIR``).

The search runs as shipped, but each stage's rounds are the next recorded processes of the
commits it times instead of fresh ones from asv: the modes, the slow processes and the
commit-to-commit differences of layout that a live search meets, without its 10-15
minutes. The live test (one change at a random commit) is tests/test_bisect_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bisect import make_repo, stage_results

from mhabench.cli.compare.bisect import lines
from mhabench.compare.bisect import Bisect

RECORDED = Path(__file__).parent / "fixtures" / "bisect_processes.json"


class Replayed:
    """asv's rounds from the recording: a stage takes, for each commit it times, that
    commit's next recorded processes (round-robin over the recording, so a commit timed in
    many stages meets its processes again in another stage, never twice in one)."""

    def __init__(self, hashes: list[str], recording: dict) -> None:
        self.cell = recording["cell"]
        self.ms = dict(zip(hashes, recording["ms"], strict=True))
        self.taken = dict.fromkeys(hashes, 0)
        self.in_stage: dict[tuple[str, str], int] = {}  # (stage, commit) -> processes

    def __call__(self, commits, benches, count, folder, **kwargs):
        stage = folder.name.rsplit("-", 1)[0]  # "probe-03-2": a stage's second batch
        stage_results(folder, commits)
        out = {}
        for commit in commits:
            recorded = self.ms[commit]
            start = self.taken[commit]
            self.taken[commit] += count
            used = self.in_stage.get((stage, commit), 0) + count
            assert used <= len(recorded), f"{stage} asks {used} processes of {commit[:8]}"
            self.in_stage[(stage, commit)] = used
            out[commit] = [recorded[(start + i) % len(recorded)] / 1000 for i in range(count)]
        return {self.cell: out}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], dict]:
    recording = json.loads(RECORDED.read_text())
    repo, hashes = make_repo(tmp_path_factory.mktemp("replay"), len(recording["ms"]) - 1)
    return repo, hashes, recording


def test_the_recording_holds_two_steps_where_it_says(recorded) -> None:
    """The fixture is what the test takes it for: about 1.5x at 11 and 1.6x more at 23,
    nothing between (medians of each commit's processes)."""
    _, _, recording = recorded
    first, second = recording["changes"]
    level = [sorted(ms)[len(ms) // 2] for ms in recording["ms"]]
    assert 1.3 < level[first] / level[first - 1] < 1.8
    assert 1.3 < level[second] / level[second - 1] < 2.0
    for i in range(1, len(level)):
        if i not in (first, second):
            assert 0.85 < level[i] / level[i - 1] < 1.15, (i, level[i - 1], level[i])
    assert "softmax written out" in recording["subjects"][first]
    assert "float64" in recording["subjects"][second]


def test_two_changes_are_both_named_on_real_processes(recorded) -> None:
    repo, hashes, recording = recorded
    first, second = recording["changes"]
    replayed = Replayed(hashes, recording)
    found = Bisect(hashes[0], hashes[-1], root=repo, echo=lambda text: None,
                   rounds=replayed, tracks=None).run()
    said = "\n".join(lines(found))
    assert [c.commit for c in found.culprits] == [hashes[first], hashes[second]], said
    assert all(c.cells[replayed.cell].ratio > 1.3 for c in found.culprits), said
    assert not any(c.unclear for c in found.culprits), said
    # the cost of a search: every probe halves a stretch, a few more where a half misled
    assert found.probes <= 14, said


def test_the_stretch_before_the_first_change_reads_no_change(recorded) -> None:
    repo, hashes, recording = recorded
    first, _ = recording["changes"]
    found = Bisect(hashes[0], hashes[first - 1], root=repo, echo=lambda text: None,
                   rounds=Replayed(hashes, recording), tracks=None).run()
    assert not found.culprits and not found.changed, "\n".join(lines(found))
    assert "no change" in "\n".join(lines(found))
