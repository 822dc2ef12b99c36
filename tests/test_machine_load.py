"""The machine-load record of an asv timing process: written by the teardown after the last
sample, never between samples (asv's runner tears down and sets up again around every
timed call when a benchmark has a setup hook: a file written there ran before each timed
call and doubled sub-millisecond steps). Driven through asv_runner's own TimeBenchmark."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest
from asv_runner.benchmarks.time import TimeBenchmark

from mhabench.measure.conditions import machine_load


def test_the_record_is_written_after_the_last_sample_and_never_between(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(machine_load.LOAD_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("ASV_COMMIT", "0123456789abcdef")
    monkeypatch.setattr(machine_load, "_start", None)
    files_at_each_call: list[int] = []

    class Cell:
        def setup(self) -> None:
            machine_load.start()

        def time_step(self) -> None:
            files_at_each_call.append(len(list(tmp_path.rglob("*.json"))))

        def teardown(self) -> None:
            machine_load.record("bench_x.Cell.time_step", ())

        time_step.setup = setup  # a setup hook: asv re-runs setup before every call

    cell = Cell()
    bench = TimeBenchmark("bench_x.Cell.time_step", cell.time_step, [cell])
    bench.repeat, bench.number, bench.warmup_time = (6, 6, 0.0), 1, 0.0
    assert bench._setups, "asv_runner no longer sees the setup hook"
    assert not bench.do_setup()
    result = bench.do_run()
    assert len(result["samples"]) >= 3
    assert files_at_each_call and set(files_at_each_call) == {0}  # nothing between samples
    bench.do_teardown()  # asv's runner, after the last sample
    [path] = tmp_path.rglob("*.json")
    record = json.loads(path.read_text())
    assert record["cell"] == "bench_x.Cell.time_step" and record["commit"] == "0123456789abcdef"
    # the machine's speed before the first sample and after the last (measure.conditions.speed)
    assert len(record["probe_s"]) == 2 and all(0 < p < 0.01 for p in record["probe_s"])


BURN = str(Path(__file__).resolve().parent / "probes" / "cpu_burner.py")


@pytest.mark.parametrize(("how", "counted"), [("plain", True), ("grandchild", True),
                                              ("detach", False)])
def test_own_cpu_holds_live_descendants_and_no_stranger(tmp_path: Path, how: str,
                                                        counted: bool) -> None:
    """A compile worker (a live child, or a child's child) burning 1 s of CPU is this
    process's own work, not another job's load; a process that is not a descendant is not."""
    import subprocess
    import sys
    import time

    flag = tmp_path / "burnt"
    before = machine_load._family_cpu()
    child = subprocess.Popen([sys.executable, BURN, how, str(flag)])
    try:
        end = time.monotonic() + 120
        while not flag.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert flag.exists()
        grown = machine_load._family_cpu() - before
    finally:
        if flag.exists():  # the burner (still asleep), detached or not: by its own pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(flag.read_text()), signal.SIGKILL)
        child.kill()
        child.wait()
    if counted:
        assert grown >= 0.9, grown
    else:
        assert grown < 0.5, grown
