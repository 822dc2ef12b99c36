"""Benchmark your own repo: ``mhabench init`` in a plug-in package's git checkout, then asv
and the report on that package's commits.

Fast: every bad input is one line naming the value and what is allowed, exit status 2,
and nothing is written; what init writes is mhabench's classes narrowed to the plug-in and
its baseline; where mhabench comes from is pinned; the report's finding names the plug-in
against its baseline and the commit its cells shifted at.

Slow (``timing``): a scratch repository of the test plug-in over six commits, the fourth
writing the softmax out in float64 in five passes over the attention weights (its quick
GQA/MQA cells about 2.5x slower), timed by ``asv run`` at each commit after ``mhabench init
--grid quick``: the report lists the shift at the fourth commit on the plug-in's cells and no
other shift that holds, every timing process recorded the machine's load, and ``mhabench
confirm`` re-measures one planted cell to "confirmed" in the next report without touching
the history's load records. The gate's statistics on such a repository's commits are what
every probe of the culprit search runs (tests/test_bisect_real.py); the ``gate`` command's
verdict lines, on mhabench's own commits (tests/test_asv_regression.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest
from support.own_repo import (
    borrow_frameworks,
    mhabench_wheel,
    plugin_checkout,
    unpack_installs,
)
from support.plugin_package import MODULE, write_module
from support.scratch import ASV, ROOT, commit_all, git

from mhabench.analysis.fast_speed import SLOWDOWN, add_slowdown
from mhabench.analysis.history.regressions import CONFIRMED_VERDICTS
from mhabench.analysis.results import load_results
from mhabench.asvproject.own_repo import InitError, asv_folder_ignored, source_from
from mhabench.compare.rounds import CONFIRM_ROUNDS
from mhabench.measure.conditions.machine_load import FOLDER as LOAD_FOLDER
from mhabench.measure.conditions.machine_load import read_records

PLUGIN = "mysdpa"


def mhabench(cwd: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it in ``cwd``, with this checkout's mhabench."""
    return subprocess.run([sys.executable, "-m", "mhabench.cli", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused init (exit status 2)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0].startswith("mhabench init: error: "), lines
    return lines[0]


# ----- bad input ---------------------------------------------------------------------------
def test_init_outside_a_git_repository_is_refused(tmp_path: Path) -> None:
    line = refused(mhabench(tmp_path, "init"))
    assert f"{str(tmp_path)!r} is not a git repository" in line
    assert "root of your package's git checkout" in line
    assert list(tmp_path.iterdir()) == []


def test_init_without_a_registered_backend_is_refused(tmp_path: Path) -> None:
    repo = plugin_checkout(tmp_path)
    text = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(re.sub(r'\[project\.entry-points[^\[]*', "", text))
    line = refused(mhabench(repo, "init"))
    assert "no registered backend" in line and "'mhabench.backends'" in line
    assert '[project.entry-points."mhabench.backends"] NAME = "your_module"' in line
    # declared, but the module registers nothing
    (repo / "pyproject.toml").write_text(text)
    (repo / "mysdpa_attention.py").write_text("VALUE = 1\n")
    line = refused(mhabench(repo, "init"))
    assert "no registered backend" in line and "register none" in line
    assert not (repo / "asv.conf.json").exists() and not (repo / "benchmarks").exists()


def test_init_never_overwrites_an_existing_asv_conf(tmp_path: Path) -> None:
    repo = plugin_checkout(tmp_path)
    (repo / "asv.conf.json").write_text("{\"mine\": true}\n")
    line = refused(mhabench(repo, "init"))
    assert f"{str(repo / 'asv.conf.json')!r} exists" in line and "never overwrites" in line
    assert (repo / "asv.conf.json").read_text() == "{\"mine\": true}\n"
    assert not (repo / "benchmarks").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--grid", "huge"], "--grid 'huge' is not allowed; choose one of tiny, quick, full"),
    (["--baseline", "blockwise"], "--baseline 'blockwise' is not allowed; choose built-in "
                                  "backends of torch: loop, batched, fused"),
    (["--mhabench", "no/such/place"], "--mhabench 'no/such/place' is not allowed; give a "
                                      "git checkout of mhabench, a mhabench wheel"),
])
def test_init_names_a_bad_value_and_what_is_allowed(tmp_path: Path, args: list[str],
                                                     message: str) -> None:
    repo = plugin_checkout(tmp_path)
    assert message in refused(mhabench(repo, "init", *args))
    assert not (repo / "asv.conf.json").exists()


# ----- what init writes ----------------------------------------------------------------------
def test_init_writes_mhabench_classes_narrowed_to_the_plugin(tmp_path: Path) -> None:
    from asv.util import load_json

    repo = plugin_checkout(tmp_path)
    done = mhabench(repo, "init", "--grid", "tiny", "--mhabench", str(ROOT))
    assert done.returncode == 0, done.stderr
    assert f"{PLUGIN} (torch) beside fused, grid tiny" in done.stdout
    conf = load_json(str(repo / "asv.conf.json"), js_comments=True)
    commit = git(ROOT, "rev-parse", "HEAD")
    assert conf["matrix"]["req"] == {"torch": metadata.version("torch"),
                                     "numpy": metadata.version("numpy")}  # no JAX: torch only
    assert conf["matrix"]["env"] == {"MHABENCH_PIN": commit[:10]}
    assert conf["install_command"][-1].endswith(f"'mhabench @ git+file://{ROOT}@{commit}'")
    assert conf["project"] == "mysdpa-attention" and conf["branches"] == ["main"]
    module = (repo / "benchmarks" / "bench_mhabench.py").read_text()
    assert 'os.environ.setdefault("MHABENCH_GRID", "tiny")' in module
    assert (repo / "benchmarks" / "__init__.py").is_file()  # asv discovers a package only
    # asv's own discovery of the written module, the plug-in loaded as asv's env loads it
    code = ("import itertools, json\nfrom asv_runner._aux import update_sys_path\n"
            "from asv_runner.discovery import disc_benchmarks\nupdate_sys_path('benchmarks')\n"
            "print(json.dumps({b.name: [c[:2] for c in itertools.product(*b._params)\n"
            "                           if c not in set(b._skip_tuples)]\n"
            "                  for b in disc_benchmarks('benchmarks')}))")
    found = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True,
                           text=True, timeout=120, env={
                               **os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{repo}",
                               "MHABENCH_BACKENDS": "mysdpa_attention",
                               "MHABENCH_PREIMPORT": "none"})
    assert found.returncode == 0, found.stderr[-2000:]
    cells = json.loads(found.stdout.splitlines()[-1])
    assert {name.split(".")[0] for name in cells} == {"bench_mhabench"}
    heads = cells["bench_mhabench.HeadsAtFixedWidth.time_step"]
    assert sorted(map(tuple, heads)) == sorted([("torch", PLUGIN)] * 3 + [("torch", "fused")] * 3)
    timed = {tuple(c) for name, found in cells.items() if name.endswith(".time_step")
             for c in found}
    assert timed == {("torch", PLUGIN), ("torch", "fused")}
    assert {name.split(".")[1] for name in cells} == {
        "HeadsAtFixedWidth", "MhaGqaMqa", "ForwardVsTrain", "KVCacheDecode"}


def test_the_pin_names_one_source_and_its_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    url = source_from(f"mhabench @ git+https://example.invalid/mhabench.git@{commit}")
    assert url.requirement == f"mhabench @ git+https://example.invalid/mhabench.git@{commit}"
    assert url.warnings == ()
    assert "not a full commit hash" in source_from(
        "mhabench @ git+https://example.invalid/mhabench.git@main").warnings[0]
    wheel = tmp_path / "mhabench-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"one")
    first = source_from(str(wheel))
    wheel.write_bytes(b"two")
    assert first.requirement == str(wheel) and source_from(str(wheel)).digest != first.digest
    checkout = source_from(str(ROOT))
    head = git(ROOT, "rev-parse", "HEAD")
    assert checkout.requirement == f"mhabench @ git+file://{ROOT}@{head}"
    assert checkout.digest == head[:10]
    with pytest.raises(InitError, match="a URL names a commit"):
        source_from("mhabench @ https://example.invalid/x.whl")



# ----- the .gitignore hint -----------------------------------------------------------------
HINT = "add .asv/ to .gitignore"


def hermetic(repo: Path) -> Path:
    """``repo`` with git's global excludes file turned off: only its .gitignore decides."""
    git(repo, "config", "core.excludesFile", os.devnull)
    return repo


@pytest.mark.parametrize(("entry", "ignored"), [
    (".asv", True), (".asv/", True), ("/.asv/", True), ("*.asv", True), (".as*/", True),
    ("", False), (".asv/results", False), ("asv/", False)])
@pytest.mark.parametrize("made", [False, True], ids=["before-asv-run", "after-asv-run"])
def test_git_ignores_the_asv_folder_as_gitignore_says(tmp_path: Path, entry: str,
                                                      ignored: bool, made: bool) -> None:
    """Asked before asv made the folder (as init asks) and after: the same answer, from git
    itself. ``.asv/results`` alone leaves asv's environments in the checkout."""
    repo = hermetic(plugin_checkout(tmp_path))
    (repo / ".gitignore").write_text(f"{entry}\n")
    if made:
        (repo / ".asv" / "results").mkdir(parents=True)
    assert asv_folder_ignored(repo) is ignored


@pytest.mark.parametrize("entry", ["", ".asv/"])
def test_init_asks_for_the_gitignore_entry_only_where_it_is_missing(tmp_path: Path,
                                                                     entry: str) -> None:
    repo = hermetic(plugin_checkout(tmp_path))
    (repo / ".gitignore").write_text(f"{entry}\n")
    done = mhabench(repo, "init", "--grid", "tiny", "--mhabench", str(ROOT))
    assert done.returncode == 0, done.stderr
    assert (HINT in done.stdout) is (entry == ""), done.stdout

# ----- the report's finding ------------------------------------------------------------------
def test_the_report_names_the_plugin_against_its_baseline(tmp_path: Path) -> None:
    """Synthetic results of the plug-in and torch fused over six commits, the plug-in 1.3x
    the baseline's time and 1.5x slower from the fourth commit; the report, run in the
    plug-in's checkout where the package is not installed, loads its cells and says so."""
    repo = plugin_checkout(tmp_path)
    commits = [f"{i}" * 40 for i in range(1, 7)]
    results = tmp_path / "results"
    # Written where the plug-in is registered (the writer builds each cell's config),
    # not in this process, whose registry other tests share.
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from fixtures.synthetic_asv import synthetic_time, write_results\n"
        "write_results(Path(sys.argv[1]), commits=sys.argv[2:], noise=0.01, samples=10,\n"
        f"    params=[['torch'], ['fused', {PLUGIN!r}], [2], [32], [32], [1, 4, 16],\n"
        "            ['cpu'], ['float32'], ['forward']],\n"
        "    time_of=lambda c, i: synthetic_time(c) * (\n"
        f"        1.3 * (1.5 if i >= 3 else 1.0) if c.backend == {PLUGIN!r} else 1.0))\n")
    done = subprocess.run([sys.executable, "-c", script, str(results), *commits],
                          capture_output=True, text=True, timeout=120, env={
                              **os.environ, "MHABENCH_BACKENDS": "mysdpa_attention",
                              "PYTHONPATH": os.pathsep.join(map(str, (ROOT, ROOT / "tests",
                                                                      repo)))})
    assert done.returncode == 0, done.stderr[-2000:]
    done = mhabench(repo, "report", "--results", str(results), "--out",
                    str(tmp_path / "report.html"), env={"MHABENCH_BACKENDS": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "report.md").read_text()
    line = next(x for x in text.splitlines() if "Your backends against the baselines" in x)
    assert f"{PLUGIN} (PyTorch) at {commits[-1][:8]} against PyTorch fused: 1.9" in line
    assert "(3 cells" in line
    assert "Regressions: 1.5" in line and f"x at {commits[3][:8]} (3 cells: 3 holds)" in line
    assert "baseline PyTorch fused: no shift over 6 commits" in line


# ----- end to end ----------------------------------------------------------------------------
# The plug-in's and the baseline's GQA/MQA time cells of the quick grid (b2 n512 d256, 16
# query heads over 16, 4 and 1 key/value heads; 20-70 ms a step), and the baseline's head
# sweep beside them: one process a commit in asv run, so a cell must scatter well under the
# plant (float64: about 2.5x here). With the plug-in's cells a third of the run and three
# commits either side of the plant, a whole run that moves (up to 1.5x from one asv run to
# the next on this VM) is told from the plug-in's shift; with half the cells planted and
# two commits a side, it once was not.
BENCHES = (r"^bench_mhabench\.(MhaGqaMqa\.time_step"
           r"|HeadsAtFixedWidth\.time_step\('torch', 'fused')")
MINE = 3
PLANTED_AT = 3  # the fourth of six commits


@pytest.mark.slow
@pytest.mark.timing
def test_a_plugin_repo_is_timed_and_reported_across_its_own_commits(tmp_path: Path,
                                                                    asv_home) -> None:
    repo = plugin_checkout(tmp_path)
    wheel = mhabench_wheel(tmp_path)
    seconds = {}  # each user command's time here, printed for the docs
    start = time.monotonic()
    done = mhabench(repo, "init", "--grid", "quick", "--mhabench", str(wheel))
    seconds["init"] = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    borrow_frameworks(repo, tmp_path)
    (repo / ".gitignore").write_text(".asv/\n")
    commits = [commit_all(repo, "mhabench init")]
    (repo / "README.md").write_text("mysdpa\n")
    commits.append(commit_all(repo, "a README: no code change"))
    module = repo / f"{MODULE}.py"
    module.write_text(module.read_text() + "# a comment: no code change\n")
    commits.append(commit_all(repo, "a comment: no code change"))
    write_module(repo, "1.1", written_out=True, float64=True)
    commits.append(commit_all(repo, "the softmax written out in float64, masked rows guarded"))
    for text in ("mysdpa, scaled dot-product attention\n", "mysdpa: attention\n"):
        (repo / "README.md").write_text(text)
        commits.append(commit_all(repo, "README: no code change"))
    assert len(commits) == 6 and PLANTED_AT == 3
    (tmp_path / "commits.txt").write_text("\n".join(commits) + "\n")
    env = {**asv_home, "MHABENCH_PREIMPORT": "torch"}
    start = time.monotonic()
    run = subprocess.run([*ASV, "run", "--record-samples", "--machine", "pytest-machine",
                          "--show-stderr", "-b", BENCHES, f"HASHFILE:{tmp_path / 'commits.txt'}"],
                         cwd=repo, env={**os.environ, **env, "PYTHONPATH": ""},
                         capture_output=True, text=True, timeout=1800)
    seconds["asv run (6 commits)"] = time.monotonic() - start
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    at = commits[PLANTED_AT]

    start = time.monotonic()
    report = mhabench(repo, "report", "--results", ".asv/results", "--out",
                      str(tmp_path / "history.html"), env=env, timeout=600)
    seconds["report"] = time.monotonic() - start
    assert report.returncode == 0, report.stderr[-3000:]
    shifts = pd.read_csv(tmp_path / "history_tables" / "regressions--shifts.csv",
                        dtype={"shift at commit": str, "previous commit": str})
    print(shifts[["verdict", "cell", "shift at commit", "shift (after/before)"]].to_string())
    mine = shifts["cell"].str.contains(f"backend={PLUGIN},", regex=False)
    planted = mine & (shifts["shift at commit"] == at[:8])
    listed = shifts[planted & shifts["verdict"].isin([*CONFIRMED_VERDICTS, "candidate"])]
    # one asv process a cell and commit: a burst of the machine may hide one shift
    assert len(listed) >= MINE - 1, listed.to_string()
    elsewhere = shifts[~planted & shifts["verdict"].isin(CONFIRMED_VERDICTS)]
    assert elsewhere.empty, elsewhere.to_string()
    finding = next(x for x in (tmp_path / "history.md").read_text().splitlines()
                   if "Your backends against the baselines" in x)
    assert f"{PLUGIN} (PyTorch) at {commits[-1][:8]} against PyTorch fused" in finding
    assert f"x at {at[:8]} (" in finding, finding
    load = repo / ".asv" / LOAD_FOLDER  # where a benchmark process records, beside results
    loads_are_recorded(repo / ".asv" / "results", load, tmp_path / "history.html")

    # Re-measure one planted cell as a user does: mhabench confirm, then the report again.
    cell = listed["asv cell"].iloc[0]
    records = sorted(load.rglob("*.json"))
    unpack_installs(repo, tmp_path, wheel)  # 24 installs: unpacked, not pip's start-up each
    start = time.monotonic()
    done = mhabench(repo, "confirm", "--results", ".asv/results", "--cell",
                    "^" + re.escape(cell) + "$", "--at", at, env=env, timeout=900)
    seconds["confirm (1 cell)"] = time.monotonic() - start
    print(done.stdout, done.stderr[-2000:])
    assert done.returncode == 1 and "1 of 1 shift(s) confirmed" in done.stdout, done.stdout
    # The confirmation's rounds record their load beside their own results, not in the
    # history's: the history's records, and so its verdicts on other shifts, stay as they were.
    assert sorted(load.rglob("*.json")) == records
    again = mhabench(repo, "report", "--results", ".asv/results", "--out",
                     str(tmp_path / "again.html"), env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    shifts = pd.read_csv(tmp_path / "again_tables" / "regressions--shifts.csv",
                        dtype={"shift at commit": str, "previous commit": str})
    row = shifts[(shifts["asv cell"] == cell) & (shifts["shift at commit"] == at[:8])]
    assert row["verdict"].tolist() == ["confirmed"], row.to_string()
    assert f"confirmed by {CONFIRM_ROUNDS} interleaved rounds" in row["why"].iloc[0]
    print("seconds:", json.dumps({k: round(v, 1) for k, v in seconds.items()}))


def loads_are_recorded(results: Path, load: Path, html: Path) -> None:
    """Every timing process of the run recorded the machine's speed before and after its
    samples, the report says so, and the results as the CLI loads them carry each time
    cell's slowdown."""
    assert "Machine load while cells timed: recorded" in html.read_text()
    loads = read_records(load)
    assert loads and all(v.probe_s is not None and v.probe_s > 0 for v in loads.values())
    frame, references = add_slowdown(load_results(results).frame, loads)
    assert set(references) == {"pytest-machine"}
    timed = frame[frame["benchmark"].str.endswith(".time_step")]
    probed = timed["asv_cell"].isin({cell for _, _, cell in loads})
    assert probed.mean() > 0.9, timed.loc[~probed, "asv_cell"].tolist()[:5]
    assert (timed[SLOWDOWN] >= 1).all() and (timed.loc[probed, SLOWDOWN] < 3).all()
