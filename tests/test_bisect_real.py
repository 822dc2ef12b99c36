"""The culprit search end to end, on a plug-in's own repository: ``mhabench init``, then
``mhabench bisect`` as a user runs it, over 32 commits of which one changes code.

The test plug-in (tests/support/plugin_package.py) at release 1.0, committed and set up
by ``mhabench init --grid quick``, then 32 commits that change the README or a comment,
but one drawn at random (printed) that writes the softmax out (the plug-in's GQA cell
about 1.5x slower). ``bisect`` over the whole range names that commit and only it; over
the stretch before it, it reads "no change". A range with two changes is searched on the
real processes of such a history, recorded (tests/test_bisect_replay.py). The asv
environment borrows this interpreter's torch and unpacks the wheels instead of
pip-installing them (tests/support/own_repo.py), as the other real-run tests do, for CI
time.

``python tests/test_bisect_real.py N DIR [SCALE]`` repeats a single-change search N times
on held-back draws and prints one JSON line per search (culprit found, probes, rounds,
minutes): the figures docs/bisect.md quotes. ``python tests/test_bisect_real.py record
DIR [ROUNDS]`` times every commit of a history with two changes (:data:`RECORD_CHANGES`)
in ROUNDS interleaved rounds and writes the replay test's fixture.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.own_repo import borrow_frameworks, mhabench_wheel, plugin_checkout, unpack_installs
from support.plugin_package import MODULE, write_module
from support.scratch import ASV, ROOT, commit_all, git

COMMITS = 32  # after the first, as the culprit search's test asks
# The plug-in's GQA cell of the quick grid (b2 n512 d256, 16 query heads over 4 key/value
# heads; about 20 ms a step): its processes scatter a few per cent, where a tiny-grid
# cell's scatter 10-25 % and need more rounds to tell a half, and a round's cost is mostly
# asv's install and forkserver start either way.
CELLS = r"^bench_mhabench\.MhaGqaMqa\.time_step\('torch', 'mysdpa', 2, 512, 256, 16, 4, "
GRID = "quick"


def mhabench(cwd: Path, *args: str, env: dict[str, str], timeout: float = 3000
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mhabench.cli", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=timeout)


def history(tmp: Path, home: dict[str, str], changes: dict[int, dict[str, bool]],
            start: dict[str, bool] | None = None) -> tuple[Path, list[str]]:
    """The plug-in's repository: ``mhabench init``, then COMMITS commits, those in
    ``changes`` rewriting the module (write_module's keywords), the others a comment or
    the README; ``start``: the module of the first commit (default release 1.0's)."""
    repo = plugin_checkout(tmp)
    if start is not None:
        write_module(repo, "1.1", written_out=True, **start)
    wheel = mhabench_wheel(tmp)
    done = mhabench(repo, "init", "--grid", GRID, "--mhabench", str(wheel), env=home)
    assert done.returncode == 0, done.stderr
    borrow_frameworks(repo, tmp)
    unpack_installs(repo, tmp, wheel)
    (repo / ".gitignore").write_text(".asv/\n")
    commits = [commit_all(repo, "mhabench init")]
    module = repo / f"{MODULE}.py"
    for i in range(1, COMMITS + 1):
        if i in changes:
            write_module(repo, "1.1", written_out=True, **changes[i])
            message = f"attention: {', '.join(changes[i]) or 'the softmax written out'} ({i})"
        elif i % 2:
            module.write_text(module.read_text() + f"# note {i}: no code change\n")
            message = f"a comment ({i})"
        else:
            (repo / "README.md").write_text(f"mysdpa, revision {i}\n")
            message = f"README ({i})"
        commits.append(commit_all(repo, message))
    return repo, commits


def culprits(out: str) -> list[str]:
    return re.findall(r"^CULPRIT (\w{8}) ", out, re.MULTILINE)


@pytest.mark.slow
@pytest.mark.timing
def test_bisect_names_the_changed_commit_and_no_change_before_it(tmp_path: Path,
                                                                 asv_home) -> None:
    draw = random.Random(os.environ.get("MHABENCH_BISECT_SEED") or time.time_ns())
    at = draw.randint(4, COMMITS)
    print(f"change at commit {at}")
    repo, commits = history(tmp_path, asv_home, {at: {}})
    env = {**asv_home, "MHABENCH_PREIMPORT": "torch"}
    start = time.monotonic()
    found = mhabench(repo, "bisect", "--machine", "pytest-machine", "-b", CELLS,
                     commits[0], commits[-1], env=env)
    print(found.stdout, f"{time.monotonic() - start:.0f} s")
    assert found.returncode == 1, (found.stdout + found.stderr)[-3000:]
    assert culprits(found.stdout) == [commits[at][:8]], found.stdout
    assert "SLOWER" in found.stdout and "faster" not in found.stdout
    folder = Path(re.search(r"results in (\S+)", found.stdout).group(1))
    summary = json.loads((folder / "bisect.json").read_text())
    assert [c["commit"] for c in summary["culprits"]] == [commits[at]]
    assert (folder / "history" / "results" / "pytest-machine").is_dir()
    assert not (repo / ".asv" / "results").exists()  # results are only added to

    start = time.monotonic()
    none = mhabench(repo, "bisect", "--machine", "pytest-machine", "-b", CELLS,
                    commits[0], commits[at - 1], env=env)
    print(none.stdout, f"{time.monotonic() - start:.0f} s")
    assert none.returncode == 0, (none.stdout + none.stderr)[-3000:]
    assert "no change:" in none.stdout and not culprits(none.stdout)


def machine_home(keep: Path) -> dict[str, str]:
    """``keep/home`` with the asv machine "pytest-machine" (the repeats' and the recording's
    HOME, as conftest's ``asv_home`` is the test's); the environment to run asv with."""
    keep.mkdir(parents=True, exist_ok=True)
    home = keep / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "MHABENCH_THREADS": "1"}
    subprocess.run([*ASV, "machine", "--machine", "pytest-machine", "--yes"], cwd=ROOT,
                   env={**os.environ, **env}, check=True, capture_output=True)
    return env


def main(repeats: int, keep: Path, scale: str) -> None:
    """One change per history, at a drawn commit: ``written_out`` (1.0's one-pass softmax
    written out, about 1.5x) or ``mixing`` (from the float64 module, the product with v in
    float64 too: 1.15-1.35x); one JSON line per search."""
    env = machine_home(keep)
    draw = random.Random(int(os.environ.get("MHABENCH_BISECT_SEED", "1")))
    for repeat in range(repeats):
        at = draw.randint(1, COMMITS)
        tmp = keep / f"{scale}-{repeat}-{time.strftime('%H%M%S')}"
        tmp.mkdir()
        if scale == "written_out":
            repo, commits = history(tmp, env, {at: {}})
        else:
            repo, commits = history(tmp, env, {at: {"mixing_float64": True}},
                                    start={"float64": True})
        began = time.monotonic()
        done = mhabench(repo, "bisect", "--machine", "pytest-machine", "-b", CELLS,
                        commits[0], commits[-1], env={**env, "MHABENCH_PREIMPORT": "torch"})
        found = culprits(done.stdout)
        stats = re.search(r"(\d+) probe\(s\), (\d+) rounds, ([\d.]+) min", done.stdout)
        print(json.dumps({"scale": scale, "run": repeat, "planted_at": at,
                          "planted": commits[at][:8], "found": found,
                          "right": found == [commits[at][:8]], "exit": done.returncode,
                          "probes": int(stats.group(1)) if stats else None,
                          "rounds": int(stats.group(2)) if stats else None,
                          "minutes": float(stats.group(3)) if stats else None,
                          "wall_s": round(time.monotonic() - began),
                          "lines": done.stdout.splitlines()[1:6]}), flush=True)


# The recorded history: the softmax written out at 11 (about 1.5x), then in float64 at 23
# (about 1.6x more), in the two halves of the first probe.
RECORD_CHANGES = {11: {}, 23: {"float64": True}}
RECORDED = ROOT / "tests" / "fixtures" / "bisect_processes.json"


def record(keep: Path, rounds: int) -> None:
    """Every commit of a history with :data:`RECORD_CHANGES` in ``rounds`` interleaved
    rounds of fresh processes (one ``asv run``, as a search's stage runs them), each
    process's median in order: :data:`RECORDED`."""
    from mhabench.compare.rounds import commit_rounds

    env = machine_home(keep)
    os.environ.update(env)  # commit_rounds runs asv in this environment
    tmp = keep / f"record-{time.strftime('%H%M%S')}"
    tmp.mkdir()
    repo, commits = history(tmp, env, RECORD_CHANGES)
    began = time.monotonic()
    timed = commit_rounds(commits, [CELLS], rounds, tmp / "rounds", root=repo,
                          asv_args=["--machine", "pytest-machine"], echo=lambda text: None)
    (cell,) = timed
    RECORDED.write_text(json.dumps({
        "cell": cell, "rounds": rounds, "changes": sorted(RECORD_CHANGES),
        "recorded": time.strftime("%Y-%m-%d"), "seconds": round(time.monotonic() - began),
        "subjects": [git(repo, "log", "-1", "--format=%s", c) for c in commits],
        "ms": [[round(1000 * x, 3) for x in timed[cell][c]] for c in commits]}) + "\n")
    print(f"{RECORDED}: {len(commits)} commits x {rounds} processes in "
          f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    record(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 16)
elif __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2,
         Path(sys.argv[2]) if len(sys.argv) > 2 else Path("bisect-runs"),
         sys.argv[3] if len(sys.argv) > 3 else "written_out")
