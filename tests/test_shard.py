"""The grid as shards: the plan (every cell once, balanced, deterministic; the full grid's
count as the README gives it), the shard merge (cells unioned, conflicts and incomplete
shards refused before anything is written), the scheduler files, and the whole fan-out /
fan-in on a real single-node Slurm cluster (tests/support/slurm_cluster.py) against the
shared unsharded tiny asv run."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT
from support import slurm_cluster

from mhabench.asvproject.cell_time import cell_seconds
from mhabench.asvproject.cells import Cell
from mhabench.cluster.fanout import ci_matrix, k8s_job
from mhabench.cluster.merge import MergeError, merge
from mhabench.cluster.shard import Plan, Shard, balance, load_plan, make_plan
from mhabench.cluster.shard_run import attempted, check_shards, done_cells, finite_cells

FIXTURE = ROOT / "tests" / "fixtures" / "asv_results"
# The Exercise 6.4 sweep's torch time cells, the README's plug-in among them: 15 tiny
# cells (the real fixture's memory cells merge in test_shards_merge_into_what_one_run_left).
SLURM_CELLS = r"^bench_heads\.HeadsAtFixedWidth\.time_step\('torch', "
SLURM_CHUNK = 4  # shards of 8 and 7 cells: task 1 is cancelled between its two chunks


def mhabench(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mhabench.cli", *args], cwd=cwd,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


# ----- the plan -----------------------------------------------------------------------------
def test_longest_first_balances_and_is_deterministic() -> None:
    """A grid's spread of cell times (a few long, many short): the largest shard within
    1.10x of the mean, every cell in one shard, the same plan from shuffled input."""
    seconds = {f"c{i}": float(s) for i, s in enumerate(
        [300, 250, 120, 90, 60] + [7 + (i * 37) % 23 for i in range(400)])}
    shards = balance(seconds, 8)
    sizes = [s.predicted_seconds for s in shards]
    assert max(sizes) <= 1.10 * sum(sizes) / len(sizes), sizes
    assert sorted(c for s in shards for c in s.cells) == sorted(seconds)
    shuffled = dict(sorted(seconds.items(), key=lambda kv: hash(kv[0]) % 97))
    assert balance(shuffled, 8) == shards
    assert [len(s.cells) for s in balance(seconds, 1)] == [len(seconds)]


def test_a_timing_cell_costs_its_rounds_of_processes_and_samples() -> None:
    """asv's repeat (15, 60, 10 s): a fast step stops at 60 samples, a slow one runs at
    least 15; each of the 2 rounds is a process; a memory cell is one process."""
    cell = Cell("bench_heads", "HeadsAtFixedWidth", "time_step", ("'torch'",), {}, 2,
                [15, 60, 10.0], 1.0)
    extra = cell_seconds(cell, 2e-3, "cpu") - cell_seconds(cell, 1e-3, "cpu")
    assert extra == pytest.approx(2 * (60 + 10) * 1e-3)  # 60 samples + 10 warm calls a round
    assert cell_seconds(cell, 1.0, "cpu") > 2 * (15 + 10)  # 15 samples + 10 warm calls
    memory = Cell("bench_heads", "HeadsAtFixedWidth", "track_step_bytes", ("'torch'",), {}, 2,
                  [15, 60, 10.0], 1.0)
    assert cell_seconds(memory, 1e-3, "cpu") < cell_seconds(cell, 1e-3, "cpu") / 2


def test_the_full_grid_plans_into_balanced_shards(tmp_path: Path) -> None:
    """The shipped full grid (its own cell list, predicted from the real fixture's
    calibration): 8 shards within 1.10x, one line printed, every cell once."""
    out = tmp_path / "plan.json"
    done = mhabench("shard", "plan", "--grid", "full", "--shards", "8", "--machine",
                    "fixture-machine", "--results", str(FIXTURE), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.strip().splitlines()) == 1, done.stdout
    # the fixture's asv durations are the tiny grid's: they do not scale the full grid's
    assert "time model" in done.stdout and "recorded asv durations" not in done.stdout
    plan = load_plan(out)
    assert len(plan.shards) == 8 and plan.grid == "full"
    names = [c for s in plan.shards for c in s.cells]
    assert len(names) == len(set(names)) == plan.cells > 1000
    sizes = [s.predicted_seconds for s in plan.shards]
    assert max(sizes) <= 1.10 * sum(sizes) / 8, sizes
    assert all(re.fullmatch(r"bench_\w+\.\w+\.\w+\(.*\)", c) for c in names)
    again = mhabench("shard", "plan", "--grid", "full", "--shards", "8", "--machine",
                     "fixture-machine", "--results", str(FIXTURE), "--out", str(out))
    assert again.returncode == 2 and "never overwritten" in again.stderr



# What makes the grid another size than the shipped suite's (plug-ins, recorded kernels,
# other dtypes or thread counts): left out of the README's count.
GRID_VARS = ("MHABENCH_BACKENDS", "MHABENCH_KERNELS", "MHABENCH_DTYPES", "MHABENCH_THREADS",
             "ASV_PYTHONPATH")


def test_the_readme_counts_the_full_grid_as_the_planner_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's figure, rounded to hundreds, is the shard planner's count of the full
    grid's cells on the CPU."""
    text = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"The full grid \(about ([\d,]+) cells on the CPU, as `mhabench shard "
                     r"plan` counts them", text)
    assert said, "README.md: the full grid's sentence is gone or reworded"
    for var in GRID_VARS:
        monkeypatch.delenv(var, raising=False)
    counted = make_plan(ROOT, "full", 1, "cpu", "readme").cells
    written = int(said.group(1).replace(",", ""))
    assert abs(written - counted) <= 50, (
        f"README.md says about {written:,} cells; the planner counts {counted:,}: write "
        f"about {round(counted, -2):,}")

@pytest.mark.parametrize(("args", "message"), [
    (["plan", "--grid", "huge", "--shards", "2", "--out", "x.json"],
     "--grid 'huge' is not allowed; choose one of tiny, quick, full"),
    (["plan", "--grid", "tiny", "--shards", "0", "--out", "x.json"],
     "--shards 0 is not allowed; give 1 or more"),
    (["run", "PLAN", "5"], "shard 5 is out of range: the plan has shards 0..1"),
    (["run", "OTHER", "0"], "the plan is for commit 000000000000"),
    (["run", "/nonexistent.json", "0"], "is not a shard plan written by mhabench shard plan"),
    (["run", "PLAN", "0", "--chunk", "0"], "--chunk 0 is not allowed; give 1 or more cells"),
    (["slurm", "PLAN", "--out", "x.sbatch", "--chunk", "-1"],
     "--chunk -1 is not allowed; give 1 or more cells"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    for name, commit in (("PLAN", head), ("OTHER", "0" * 40)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"commit": commit, "grid": "tiny", "devices": "cpu",
                                    "machine": "m", "predicted_from": "x", "version": 1,
                                    "shards": [{"index": 0, "cells": [], "predicted_seconds": 0},
                                               {"index": 1, "cells": [], "predicted_seconds": 0}]}))
    args = [str(tmp_path / f"{a}.json") if a in ("PLAN", "OTHER") else a for a in args]
    done = mhabench("shard", *args, cwd=tmp_path if args[0] == "plan" else ROOT)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "x.json").exists() and not (ROOT / "x.sbatch").exists()


# ----- the merge ----------------------------------------------------------------------------
def _split_fixture(tmp: Path, shards: int) -> tuple[list[Path], Plan, set[str]]:
    """The real fixture's results cut into ``shards`` shard folders (``shard-k/results``
    and the progress file ``mhabench shard run`` keeps), each holding every k-th cell; the
    others read n/a (NaN), as asv writes the cells ``-b`` did not select. And their plan."""
    [src] = [p for p in FIXTURE.glob("*/*.json") if p.name != "machine.json"]
    data = json.loads(src.read_text())
    commit, machine = data["commit_hash"], src.parent.name
    whole = done_cells(FIXTURE, machine, commit)
    order = sorted(whole)
    owner = {c: i % shards for i, c in enumerate(order)}
    columns = data["result_columns"]
    folders = []
    for k in range(shards):
        part = json.loads(src.read_text())
        for name, values in part["results"].items():
            row = dict(zip(columns, values, strict=False))
            if not row.get("params"):
                continue
            cells = [f"{name}({', '.join(c)})" for c in itertools.product(*row["params"])]
            for column in columns:
                if column in ("result", "samples") or column.startswith("stats_"):
                    if isinstance(row.get(column), list):
                        blank = float("nan") if column == "result" else None
                        row[column] = [v if owner.get(c) == k else blank
                                       for c, v in zip(cells, row[column], strict=True)]
            part["results"][name] = [row.get(c) for c in columns]
        folder = tmp / f"shard-{k}" / "results"
        (folder / machine).mkdir(parents=True)
        shutil.copy(FIXTURE / "benchmarks.json", folder / "benchmarks.json")
        shutil.copy(src.parent / "machine.json", folder / machine / "machine.json")
        (folder / machine / src.name).write_text(json.dumps(part))
        (folder.parent / "progress.json").write_text(json.dumps({
            "index": k, "commit": commit, "cells": [c for c in order if owner[c] == k]}))
        folders.append(folder)
    plan = Plan(commit, "tiny", "cpu", machine, "test", [
        Shard(k, sorted(c for c in order if owner[c] == k), 1.0) for k in range(shards)])
    return folders, plan, whole


def test_shards_merge_into_what_one_run_left(tmp_path: Path) -> None:
    """Three shards of the real fixture merge into one results file holding every cell
    once, with the values, samples and stats the unsharded run recorded; the report reads
    it like the unsharded results."""
    folders, plan, whole = _split_fixture(tmp_path, 3)
    (tmp_path / "plan.json").write_text(json.dumps({
        "commit": plan.commit, "grid": "tiny", "devices": "cpu", "machine": plan.machine,
        "predicted_from": "test", "version": 1,
        "shards": [{"index": s.index, "cells": s.cells, "predicted_seconds": 1.0}
                   for s in plan.shards]}))
    dest = tmp_path / "merged"
    done = mhabench("merge", "--plan", str(tmp_path / "plan.json"), "--into", str(dest),
                    *map(str, folders))
    assert done.returncode == 0, done.stderr
    assert "extended" in done.stdout and "cell(s) added" in done.stdout
    assert done_cells(dest, plan.machine, plan.commit) == whole
    assert finite_cells(dest, plan.machine, plan.commit) == finite_cells(
        FIXTURE, plan.machine, plan.commit)
    [src] = [p for p in FIXTURE.glob("*/*.json") if p.name != "machine.json"]
    [out] = [p for p in dest.glob("*/*.json") if p.name != "machine.json"]
    a, b = json.loads(src.read_text()), json.loads(out.read_text())
    columns = a["result_columns"]
    for name, values in a["results"].items():
        row_a = dict(zip(columns, values, strict=False))
        row_b = dict(zip(columns, b["results"][name], strict=False))
        for column in ("result", "samples", "stats_q_25", "params", "version"):
            assert row_a.get(column) == row_b.get(column), (name, column)
    from mhabench.analysis.results import load_results

    frame_a, frame_b = load_results(FIXTURE).frame, load_results(dest).frame
    assert len(frame_a) == len(frame_b) and set(frame_a["asv_cell"]) == set(frame_b["asv_cell"])
    # merged again: nothing new, nothing changed
    before = out.read_bytes()
    assert mhabench("merge", "--into", str(dest), str(folders[0])).returncode == 0
    assert out.read_bytes() == before


def test_a_conflict_or_a_missing_shard_stops_the_merge_before_writing(tmp_path: Path) -> None:
    folders, plan, _ = _split_fixture(tmp_path, 2)
    [f1] = [p for p in folders[1].glob("*/*.json") if p.name != "machine.json"]
    data = json.loads(f1.read_text())
    name = next(n for n, v in data["results"].items() if isinstance(v[0], list)
                and any(x is not None for x in v[0]))
    values = data["results"][name][0]
    i = next(j for j, x in enumerate(values) if x is not None)
    [f0] = [p for p in folders[0].glob("*/*.json") if p.name != "machine.json"]
    other = json.loads(f0.read_text())
    other["results"][name][0][i] = values[i] * 2  # the same cell, another value, shard 0
    f0.write_text(json.dumps(other))
    dest = tmp_path / "merged"
    assert merge(folders[1], dest)
    snapshot = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    with pytest.raises(MergeError, match=r"is in both .*merged.* and .*shard-0"):
        merge(folders[0], dest)
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == snapshot
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps({
        "commit": plan.commit, "grid": "tiny", "devices": "cpu", "machine": plan.machine,
        "predicted_from": "test", "version": 1,
        "shards": [{"index": s.index, "cells": s.cells, "predicted_seconds": 1.0}
                   for s in plan.shards]}))
    with pytest.raises(MergeError, match=r"is in both .*shard-0/results and .*shard-1/results"):
        check_shards(plan_path, folders)
    with pytest.raises(MergeError, match="shard 1: .* not run"):
        check_shards(plan_path, [folders[0]])
    with pytest.raises(MergeError, match="holds no asv results"):
        check_shards(plan_path, [folders[0], tmp_path / "empty"])
    (folders[1].parent / "progress.json").unlink()
    with pytest.raises(MergeError, match="has no .*progress.json"):
        check_shards(plan_path, [folders[1]])
    machine = folders[1] / plan.machine / "machine.json"
    facts = json.loads(machine.read_text())
    machine.write_text(json.dumps({**facts, "ram": "1"}))
    with pytest.raises(MergeError, match=r"describe the machine differently \(ram: "):
        merge(folders[1], dest)
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == snapshot


def test_kubernetes_job_and_ci_matrix_have_one_entry_per_shard() -> None:
    """Structural checks only (no kubectl here): an Indexed Job of N completions whose
    container runs shard $(JOB_COMPLETION_INDEX), a GPU per pod for cuda plans; a matrix
    include: list of N shards."""
    plan = Plan("a" * 40, "full", "cuda", "m", "x", [Shard(k, [f"c{k}"], 60.0 * k)
                                                      for k in range(4)])
    job = k8s_job(plan, "/plan.json", "img")
    spec = job["spec"]
    assert (job["apiVersion"], job["kind"], spec["completionMode"]) == (
        "batch/v1", "Job", "Indexed")
    assert spec["completions"] == spec["parallelism"] == 4
    [container] = spec["template"]["spec"]["containers"]
    assert container["command"][-3:] == ["run", "/plan.json", "$(JOB_COMPLETION_INDEX)"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert [e["shard"] for e in ci_matrix(plan)["include"]] == [0, 1, 2, 3]


# ----- Slurm, end to end --------------------------------------------------------------------
def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.overlaps_tiny_run
def test_the_tiny_grid_through_slurm_equals_the_unsharded_run(
        tmp_path: Path, asv_home: dict[str, str], tiny_asv_run) -> None:
    """Part of the tiny grid (the Exercise 6.4 sweep's torch time cells with the
    README's plug-in: 15 of its 310 cells, for CI time) as a 2-task Slurm job array on a real
    single-node cluster: one task cancelled after its first chunk and submitted again completes its
    shard without touching the other's files; the fan-in merges the shards into exactly
    those cells of the shared unsharded tiny run, with samples, and asv publish and
    mhabench report read them."""
    why = slurm_cluster.missing()
    if why and not os.environ.get("CI"):
        pytest.skip(why)
    assert why is None, why  # CI installs Slurm (.ci/run): never skipped there
    cluster = slurm_cluster.start(tmp_path / "slurm")
    try:
        env = {**cluster.env, **asv_home, "MHABENCH_BACKENDS": "plain_attention",
               "ASV_PYTHONPATH": str(EXAMPLES), "MHABENCH_GRID": "tiny",
               "MHABENCH_PREIMPORT": "torch"}  # the cells' framework: 3 s less a chunk
        cluster.env = env  # sbatch passes the submitter's environment to the tasks
        plan = tmp_path / "plan.json"
        done = mhabench("shard", "plan", "--grid", "tiny", "--shards", "2", "--machine",
                        "pytest-machine", "--bench", SLURM_CELLS, "--out", str(plan), env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        done = mhabench("shard", "slurm", str(plan), "--out", str(tmp_path / "array.sbatch"),
                        "--python", "same", "--quick", "--chunk", str(SLURM_CHUNK),
                        "--results", str(tmp_path / "merged"),
                        "--html", str(tmp_path / "html"), "--reports",
                        str(tmp_path / "reports"), "--submit", env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        job, fanin = re.search(r"array job (\d+), fan-in job (\d+)", done.stdout).groups()
        logs = tmp_path / "slurm-logs"
        # Cancel task 1 once it has saved a chunk: the node runs one task at a time.
        end = time.monotonic() + 900
        while time.monotonic() < end:
            log = next(iter(logs.glob(f"shard-{job}-1.log")), None)
            if log and "cells run" in log.read_text():
                break
            time.sleep(2)
        assert cluster.run("scancel", f"{job}_1").returncode == 0
        cluster.run("scancel", fanin)  # its afterok can no longer be met
        cluster.wait_idle(job, 120)
        shard0 = _digest(tmp_path / "plan-shard-0")
        index, partial = attempted(tmp_path / "plan-shard-1")
        assert index == 1 and 0 < len(partial) < len(load_plan(plan).shards[1].cells)
        again = cluster.run("sbatch", "--parsable", "--array=1", str(tmp_path / "array.sbatch"))
        assert again.returncode == 0, again.stderr
        states = cluster.wait_idle(again.stdout.strip(), 900)
        assert set(states.values()) == {"COMPLETED"}, (
            states, *(p.read_text()[-3000:] for p in logs.glob(f"shard-{again.stdout.strip()}-*")))
        merge_job = cluster.run("sbatch", "--parsable", str(tmp_path / "array-merge.sbatch"))
        states = cluster.wait_idle(merge_job.stdout.strip(), 600)
        assert set(states.values()) == {"COMPLETED"}, (
            states, *(p.read_text()[-2000:] for p in logs.glob("merge-*.log")))
        assert _digest(tmp_path / "plan-shard-0") == shard0  # the other shard: untouched
        rerun = (logs / f"shard-{again.stdout.strip()}-1.log").read_text()
        assert f"{len(partial)} of" in rerun and "already done" in rerun
    finally:
        cluster.stop()
    assert tiny_asv_run.returncode == 0, tiny_asv_run.log[-3000:]  # waits for the run
    commit = load_plan(plan).commit
    for cells in (done_cells, finite_cells):  # every cell; the measured ones
        merged = cells(tmp_path / "merged", "pytest-machine", commit)
        if cells is done_cells:  # the benchmarks' unplanned cells read n/a, as asv writes
            merged = {c for c in merged if re.search(SLURM_CELLS, c)}
        unsharded = {c for c in cells(tiny_asv_run.results, "pytest-machine", commit)
                     if re.search(SLURM_CELLS, c)}
        assert merged == unsharded, (sorted(merged ^ unsharded)[:5], len(merged),
                                     len(unsharded))
    [out] = [p for p in (tmp_path / "merged" / "pytest-machine").glob("*.json")
             if p.name != "machine.json"]
    data = json.loads(out.read_text())
    rows = [dict(zip(data["result_columns"], v, strict=False)) for v in data["results"].values()]
    timed = [r for r in rows if isinstance(r.get("result"), list) and r.get("samples")]
    assert timed and all(s for r in timed for v, s in zip(r["result"], r["samples"],
                                                         strict=True)
                         if v is not None and v == v), "a timed cell lost its samples"
    assert (tmp_path / "html" / "index.html").is_file()
    [report] = list((tmp_path / "reports").glob("report-*-sharded-*.html"))
    assert "torch/plain" in report.read_text()
