"""Freed memory stays in a timing process: a step reuses the memory the previous step
freed instead of page-faulting on fresh pages (mhabench.measure.allocator). Counted in minor page
faults, not time: each test runs a fresh interpreter, set up as the asv suite sets up its
processes (mhabench.bench.common at import, prepare with its warm-up), and once without the
allocator setting."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from mhabench.measure.allocator import minor_faults, retain_freed_memory, warm_until_settled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "probes", "step_faults.py")
MAP_PAGES = 2 * 16 * 512 * 512 * 4 // 4096  # one float32 (b, h, n, m) map: 32 MiB


def faults_per_step(framework: str, mode: str) -> list[int]:
    """Minor faults of each of 9 timed calls in a fresh interpreter."""
    # the cell's framework only, as mhabench gate imports for its cells: the allocator
    # options are set at import either way (5 s less a probe than both and the compiler)
    env = {**os.environ, "MHABENCH_THREADS": "1", "MHABENCH_PREIMPORT": framework}
    done = subprocess.run([sys.executable, PROBE, framework, mode], capture_output=True,
                          text=True, timeout=300, check=True, env=env, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_timed_step_reuses_freed_memory(framework: str) -> None:
    assert retain_freed_memory()
    # glibc's defaults map the map's buffers fresh on every call: each call faults more
    # than a map's worth. Kept memory, warmed until settled: calls fault (almost) nothing.
    # Not every call: the warm-up's time cap can leave a late heap growth to the timed
    # calls on a loaded machine, and a CI run read 8,192 faults in the median of 9 (cause
    # not established here; a kernel's NUMA balancing re-faults touched pages, for one).
    default, kept = faults_per_step(framework, "default"), faults_per_step(framework, "retain")
    assert min(default) > MAP_PAGES, default
    assert min(kept) < MAP_PAGES // 100, kept
    assert statistics.median(kept) < min(default) / 2, (kept, default)


def test_warm_up_runs_until_calls_stop_faulting() -> None:
    kept: list[bytearray] = []

    def grows_three_times() -> None:  # touches 8 MiB of fresh pages on its first 3 calls
        if len(kept) < 3:
            kept.append(bytearray(8 << 20))

    calls = warm_until_settled(grows_three_times, quiet_calls=2)
    if minor_faults() == 0:
        pytest.skip("this OS does not count page faults")
    assert calls == 5  # three growing calls, then two quiet ones
    assert warm_until_settled(grows_three_times, max_calls=1) == 1
