"""Freed memory stays in a timing process: a step reuses the memory the previous step
freed instead of page-faulting on fresh pages (mhabench.allocator). Counted in minor page
faults, not time: each test runs a fresh interpreter, with and without the setting."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mhabench.allocator import retain_freed_memory

PROBE = """
import json, resource, sys
from mhabench import timing
from mhabench.config import AttentionConfig
if sys.argv[2] == "retain":
    timing.configure_process(1)
else:  # glibc's defaults: the same process set-up without the allocator options
    import torch
    torch.set_num_threads(1)
config = AttentionConfig(framework=sys.argv[1], backend="batched", batch=2, n=512, d=256,
                         heads=16, kv_heads=4)
step = timing.prepare(config)
faults = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(sorted(faults)[2]))
"""
MAP_PAGES = 2 * 16 * 512 * 512 * 4 // 4096  # one float32 (b, h, n, m) map: 32 MiB


def faults_per_step(framework: str, mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, framework, mode], capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_timed_step_reuses_freed_memory(framework: str) -> None:
    assert retain_freed_memory()
    # glibc's defaults map the map's buffers fresh each call: at least a map's worth of
    # faults; kept memory: (almost) none.
    assert faults_per_step(framework, "default") > MAP_PAGES
    assert faults_per_step(framework, "retain") < MAP_PAGES // 100
