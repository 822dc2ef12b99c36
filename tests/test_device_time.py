"""Device time (mhabench.measure.profiler.device_time): the union of kernel intervals, read from the
profilers' records; CUDA paths' logic on the CPU, a real JAX trace on the CPU too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhabench.core.config import AttentionConfig
from mhabench.measure.profiler.device_time import busy_seconds, device_seconds, jax_trace_intervals
from mhabench.measure.timing import prepare

ROOT = Path(__file__).resolve().parents[1]


def test_busy_time_is_the_union_of_the_intervals() -> None:
    # 0-10 and 5-15 overlap (15 us), 20-30 apart (10 us), 22-25 inside it (nothing more).
    assert busy_seconds([(20, 10), (0, 10), (5, 10), (22, 3)]) == pytest.approx(25e-6)
    assert busy_seconds([]) == 0.0


def test_jax_trace_events_of_the_module_on_the_gpu_timeline() -> None:
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 2, "ts": 100, "dur": 40,
         "args": {"hlo_module": "jit_forward", "hlo_op": "fusion.1"}},
        {"ph": "X", "pid": 2, "ts": 150, "dur": 5,
         "args": {"hlo_module": "jit_other", "hlo_op": "fusion"}},  # another program
        {"ph": "X", "pid": 1, "ts": 90, "dur": 80,
         "args": {"hlo_module": "jit_forward", "hlo_op": "fusion.1"}},  # the host's launch
        {"ph": "X", "pid": 2, "ts": 140, "dur": 10, "args": {"hlo_module": "jit_forward"}},
    ]}
    assert jax_trace_intervals(trace, "jit_forward", gpu=True) == [(100, 40)]
    assert jax_trace_intervals(trace, "jit_forward", gpu=False) == [(100, 40), (90, 80)]


def test_torch_device_time_needs_a_cuda_cell() -> None:
    config = AttentionConfig(framework="torch", batch=2, n=16, d=16, heads=2)
    with pytest.raises(ValueError, match="needs device='cuda'"):
        device_seconds(config, prepare(config))


def test_jax_device_time_from_a_real_trace_grows_with_the_work() -> None:
    def busy(heads: int) -> float:
        config = AttentionConfig(framework="jax", backend="batched", batch=2, n=256, d=256,
                                 heads=heads)
        return device_seconds(config, prepare(config), calls=3)

    small, large = busy(1), busy(64)
    assert 0 < small < large  # h=64 writes 64x the map: about 3x the time here


def test_asv_records_device_time_only_where_cuda_is_asked_for() -> None:
    code = ("import json, itertools\nfrom benchmarks.bench_heads import HeadsAtFixedWidth as H\n"
            "m = getattr(H, 'track_device_seconds', None)\n"
            "cells = list(itertools.product(*H.params))\n"
            "run = [] if m is None else [c for c in cells if c not in m.skip_params]\n"
            "print(json.dumps([m is not None, sorted({c[H.param_names.index('device')] "
            "for c in run})]))\n")
    out = {}
    for devices in ("cpu", "cpu,cuda"):
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=300,
                              env={**os.environ, "MHABENCH_GRID": "tiny",
                                   "MHABENCH_DEVICES": devices,
                                   "MHABENCH_PREIMPORT": "none"})  # reads the class only
        assert done.returncode == 0, done.stderr
        out[devices] = json.loads(done.stdout.splitlines()[-1])
    assert out == {"cpu": [False, []], "cpu,cuda": [True, ["cuda"]]}


def test_the_report_puts_host_overhead_beside_the_step() -> None:
    import pandas as pd

    from mhabench.report.sections.overview import _device_columns

    row = {"machine": "gpu", "config_id": "c", "time_ms": 1.5}
    assert _device_columns(row, pd.Series({("gpu", "c"): 0.0011})) == {
        "device (ms)": pytest.approx(1.1), "host overhead (ms)": pytest.approx(0.4)}
    assert _device_columns(row, pd.Series({("gpu", "other"): 0.001})) == {
        "device (ms)": "", "host overhead (ms)": ""}
    assert _device_columns(row, pd.Series(dtype=float)) == {}
