"""The GPU's recorded state (NVML) and the cold L2 before each sample.

On a machine without a GPU: the state is n/a with NVML's own reason, and the suite's GPU
classes enumerate and skip cleanly. With one (``-m cuda`` on a lent machine): the flush
really evicts L2 (a read of data that fits in L2 is slower after it), from either framework,
and a watch reads clocks and throttle reasons.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT, has_cuda, requires_cuda

from mhabench.measure import cache_flush
from mhabench.measure.conditions import gpu_state


@pytest.mark.skipif(has_cuda(), reason="checks the no-GPU path")
def test_without_a_gpu_the_state_is_n_a_with_nvmls_reason():
    assert gpu_state.open_watch() is None
    record = gpu_state.not_available()
    assert record["available"] is False
    # nvidia-ml-py is a requirement: the reason is NVML's own (no driver here), not a
    # missing package.
    assert record["reason"].startswith("NVML did not start"), record


def test_flush_buffer_is_at_least_twice_l2():
    assert cache_flush.flush_bytes(None) == cache_flush.MIN_BYTES
    assert cache_flush.flush_bytes(60 * 2**20) >= 2 * 60 * 2**20
    assert cache_flush.flush_bytes(200 * 2**20) == 400 * 2**20
    with pytest.raises(ValueError, match="framework='numpy' has no L2 flush"):
        cache_flush.flusher("numpy")


def test_gpu_classes_enumerate_and_skip_cleanly_without_a_gpu(tmp_path):
    """``MHABENCH_DEVICES=cuda`` on a CPU box: the peak classes list their cells, and a
    cell set up through asv's own runner is n/a (skipped), not failed."""
    if has_cuda():
        pytest.skip("checks the no-GPU path")
    env = {**os.environ, "MHABENCH_GRID": "quick", "MHABENCH_DEVICES": "cuda",
           "MHABENCH_DTYPES": "bfloat16", "MHABENCH_PREIMPORT": "none",
           "PYTHONPATH": str(ROOT)}
    code = """
import itertools, json
from benchmarks import bench_gpu
from asv_runner.benchmarks.time import TimeBenchmark
cls = bench_gpu.PeakPrefill
cells = [c for c in itertools.product(*cls.params) if c not in cls.skip_params]
inst = cls()
bench = TimeBenchmark("bench_gpu.PeakPrefill.time_step", inst.time_step, [inst.time_step, inst])
bench.set_param_idx(list(itertools.product(*cls.params)).index(cells[0]))
skipped = bench.do_setup()
bench.do_teardown()  # asv_runner's run() tears down after a skipping setup too
print(json.dumps({"cells": len(cells), "skipped": skipped,
                  "warm": hasattr(bench_gpu.L2Reference, "time_step_warm")}))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cells"] == 44  # 11 kernels and backends x 4 lengths at 16k tokens
    assert result["skipped"] is True
    assert "device='cuda' is not available" in done.stdout, done.stdout
    assert result["warm"] is True


def _read_time_ms(read, x, events) -> float:
    start, end = events
    start.record()
    read(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_flush_evicts_l2_so_a_small_read_is_slower_cold(framework):
    """16 MiB fit in any recent GPU's L2: read warm (read twice) and cold (the framework's
    flush between), interleaved, CUDA events around the read; the cold read takes longer.

    Each timed read carries a fixed cost (the launch between the events, ~15 us on the
    H200, against ~3 us for 16 MiB from HBM), measured by the same read of 4 KiB; the
    comparison is of what each read takes beyond it."""
    import torch

    if framework == "jax":
        pytest.importorskip("jax")
    x = torch.ones(4 * 2**20, dtype=torch.float32, device="cuda")  # 16 MiB
    tiny = x[:1024]
    events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    flush = cache_flush.flusher(framework)
    read = torch.sum
    cold, warm, fixed = [], [], []
    for _ in range(60):
        flush()
        cold.append(_read_time_ms(read, x, events))
        read(x)
        torch.cuda.synchronize()
        warm.append(_read_time_ms(read, x, events))
        fixed.append(_read_time_ms(read, tiny, events))
    base = statistics.median(fixed)
    cold_us, warm_us = (1e3 * (statistics.median(t) - base) for t in (cold, warm))
    print(f"{framework}: cold {cold_us:.1f} us, warm {warm_us:.1f} us beyond the "
          f"{base * 1e3:.1f} us of a 4 KiB read")
    assert cold_us > 1.15 * max(warm_us, 0.0) and cold_us > 0.5


@requires_cuda
@pytest.mark.cuda
def test_a_watch_reads_clocks_and_throttle_state():
    import torch

    watch = gpu_state.open_watch()
    assert watch is not None, gpu_state.unavailable_reason()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        watch.sample()
        (a @ a).sum().item()
    state = watch.summary()
    print(state)
    assert state["available"] and state["samples"] == 5
    low, high = state["sm_mhz"]
    assert 0 < low <= high <= state["max_sm_mhz"]
    assert isinstance(state["throttled"], bool) and state["locked"] is False


@pytest.mark.slow
def test_asv_reports_the_gpu_cells_n_a_not_failed_without_a_gpu(asv_home):
    """The real ``asv run`` of the cold/warm reference class under MHABENCH_DEVICES=cuda
    on a machine without a GPU: each method's cell is n/a (asv tears a skipped cell
    down too, and the teardown must not fail it)."""
    if has_cuda():
        pytest.skip("checks the no-GPU path")
    env = {**os.environ, **asv_home, "MHABENCH_GRID": "quick", "MHABENCH_DEVICES": "cuda",
           "MHABENCH_DTYPES": "bfloat16"}
    done = subprocess.run([sys.executable, "-m", "asv", "run", "--python=same", "--quick",
                           "-n", "-b", "L2Reference", "--machine", "pytest-machine",
                           "--show-stderr"], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert " failed" not in log, log[-3000:]
    for method in ("time_step", "time_step_warm"):
        assert f"bench_gpu.L2Reference.{method}" in log
    assert log.count("n/a") >= 2, log[-3000:]
