"""Freed memory stays in a timing process: a step reuses the memory the previous step
freed instead of page-faulting on fresh pages (mhabench.measure.allocator). Counted in minor page
faults, not time: each test runs a fresh interpreter, set up as the asv suite sets up its
processes (benchmarks.common at import, prepare with its warm-up), and once without the
allocator setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mhabench.measure.allocator import minor_faults, retain_freed_memory, warm_until_settled

PROBE = """
import json, statistics, sys
from mhabench.measure import timing
from mhabench.measure.allocator import minor_faults
from mhabench.core.config import AttentionConfig
if sys.argv[2] == "retain":
    from benchmarks.common import WARMUP  # configures the process at import, as asv runs it
else:  # glibc's defaults: the same process set-up without the allocator options
    import torch
    torch.set_num_threads(1)
    WARMUP = 1
config = AttentionConfig(framework=sys.argv[1], backend="batched", batch=2, n=512, d=256,
                         heads=16, kv_heads=4)
step = timing.prepare(config, WARMUP)
faults = []
for _ in range(9):
    before = minor_faults()
    step()
    faults.append(minor_faults() - before)
print(json.dumps(statistics.median(faults)))
"""
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAP_PAGES = 2 * 16 * 512 * 512 * 4 // 4096  # one float32 (b, h, n, m) map: 32 MiB


def faults_per_step(framework: str, mode: str) -> int:
    env = {**os.environ, "MHABENCH_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE, framework, mode], capture_output=True,
                          text=True, timeout=300, check=True, env=env, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_timed_step_reuses_freed_memory(framework: str) -> None:
    assert retain_freed_memory()
    # Median faults of a timed call. glibc's defaults map the map's buffers fresh each
    # call: at least a map's worth; kept memory, warmed until settled: (almost) none.
    assert faults_per_step(framework, "default") > MAP_PAGES
    assert faults_per_step(framework, "retain") < MAP_PAGES // 100


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
