"""Shared test helpers: run one config's forward pass in either framework on given weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mhabench.measure.agreement import forward_output

run_forward = forward_output  # the library's: tests and `mhabench check` share it


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not has_cuda(), reason="no CUDA GPU on this machine")


ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


# Phase 1's longest groups, longest first (seconds on 3 workers, 2 cores): the shared tiny
# run with the Slurm test (~390), the real JAX pair of the versions comparison (~300, a
# group of its own), the GPU rehearsal (~200-300), then ~120-180 each. The Makefile turns
# off xdist's own order (most tests first, --no-loadscope-reorder), which started the
# longest last: their ~400 s ran after the other workers had finished.
LONGEST_FIRST = ("tiny-asv-run",
                 "test_versions.py::test_a_real_pair_of_jax_releases_runs_into_the_report",
                 "test_device_rehearsal.py", "test_versions.py",
                 "test_attention.py", "test_asv_suite.py", "test_step_semantics.py",
                 "test_report.py", "test_browser.py", "test_allocator.py",
                 "test_report_findings.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's worker turns the marks into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``--dist loadgroup``) each file's tests run on one
    worker, so its module fixtures (a tensorboard server, a built site) are made once; the
    tests that read the shared tiny asv run (``tiny_asv_run``) share one worker, so it
    runs once; a test marked ``own_worker`` is a group of its own. Groups go out longest
    first (:data:`LONGEST_FIRST`)."""
    groups = {}
    for item in items:
        group = "tiny-asv-run" if "tiny_asv_run" in getattr(item, "fixturenames", ()) else (
            item.path.name)
        if item.get_closest_marker("own_worker"):
            group = f"{item.path.name}::{item.name}"
        item.add_marker(pytest.mark.xdist_group(group))
        groups[item] = group

    # In the tiny run's group the Slurm test first: it starts the shared run and works
    # beside it (``overlaps_tiny_run``).
    def order(item: pytest.Item) -> tuple[int, int]:
        group = groups[item]
        rank = LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)
        return rank, 0 if item.get_closest_marker("overlaps_tiny_run") else 1

    items.sort(key=order)


@pytest.fixture
def asv_home(tmp_path: Path) -> dict[str, str]:
    """A private HOME with an asv machine "pytest-machine", so ~/.asv-machine.json is
    left alone; returns the environment variables to run asv with."""
    return _machine_home(tmp_path)


def _machine_home(tmp_path: Path) -> dict[str, str]:
    env = {"HOME": str(tmp_path / "home"), "MHABENCH_THREADS": "1"}
    (tmp_path / "home").mkdir()
    done = subprocess.run([sys.executable, "-m", "asv", "machine", "--machine",
                           "pytest-machine", "--yes"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return env


class TinyRun:
    """One asv run of the whole suite on the tiny grid, started in the background: its
    exit status and log (each waits for the run to end), and its results folder (machine
    ``pytest-machine``)."""

    def __init__(self, process: subprocess.Popen, log: Path, results: Path) -> None:
        self._process, self._log, self.results = process, log, results

    def wait(self, timeout: float = 1500) -> int:
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill the run with its forkserver and cells (its own session), if still running."""
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()

    @property
    def returncode(self) -> int:
        return self.wait()

    @property
    def log(self) -> str:
        self.wait()
        return self._log.read_text()


@pytest.fixture(scope="session")
def tiny_asv_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyRun]:
    """``asv run --quick`` (one sample a cell) of every benchmark on the tiny grid, run
    once for the tests that read it (the smoke in test_asv_suite.py, the plug-in's cells
    in test_plugins.py, the Slurm shards in test_shard.py). It runs in the background:
    the Slurm test, first of the group, starts its cluster beside it and reads the
    results only at its end. The README's example backend is loaded the way the README
    says (``ASV_PYTHONPATH``, ``MHABENCH_BACKENDS``), so its cells run beside the suite's
    own. The suite's asv.conf.json with its results kept in a temporary folder."""
    from asv.util import load_json

    tmp = tmp_path_factory.mktemp("tiny-asv")
    env = {**os.environ, **_machine_home(tmp), "MHABENCH_GRID": "tiny",
           "MHABENCH_BACKENDS": "plain_attention", "ASV_PYTHONPATH": str(EXAMPLES)}
    conf = load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    conf.update(repo=str(ROOT), branches=["HEAD"], benchmark_dir=str(ROOT / "benchmarks"),
                results_dir=str(tmp / "results"), html_dir=str(tmp / "html"),
                env_dir=str(tmp / "env"))
    (tmp / "asv.conf.json").write_text(json.dumps(conf))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], text=True,
                            capture_output=True, check=True).stdout.strip()
    log = tmp / "asv.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "asv", "run", "--quick", "--python=same", "--machine",
             "pytest-machine", "--set-commit-hash", commit, "--show-stderr"], cwd=tmp,
            env=env, text=True, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    run = TinyRun(process, log, tmp / "results")
    yield run
    run.stop()  # the session ended before a test waited for it
