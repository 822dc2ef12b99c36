"""Device time of a step: how long the accelerator was busy, beside asv's wall time.

Wall time minus device time is the host's share of a step: Python, dispatch and kernel
launches, the part of the per-head overhead that grows with h on a GPU. CUDA events
recorded around a synchronising step would not separate it: the events sit on the GPU's
timeline, which idles while the host launches the next kernel, so a launch-bound step
would read device time = wall time. So the kernels' own intervals are collected instead
and their union is summed (overlapping streams count once):

- torch: CUPTI's kernel and memcpy records through ``torch.profiler`` (CUDA activity);
- JAX: the XLA executable's ops in ``jax.profiler``'s trace (``hlo_module`` events on the
  GPU's timeline; on a CPU, the executable's thunks).
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mhabench.core.config import AttentionConfig


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start_us, duration_us)`` intervals."""
    total, end = 0.0, float("-inf")
    for start, dur in sorted(intervals):
        stop = start + dur
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total * 1e-6


def hlo_module_name(step: Callable[[], Any]) -> str:
    """The XLA module name of a prepared JAX step (the first line of its compiled HLO)."""
    return step.compiled.as_text().split(None, 2)[1].rstrip(",")


def device_seconds(config: AttentionConfig, step: Callable[[], Any], calls: int = 5) -> float:
    """Device busy seconds per call of the prepared ``step`` (see the module docstring)."""
    if calls < 1:
        raise ValueError(f"calls={calls} is not allowed; it must be at least 1")
    if config.framework == "torch":
        if config.device != "cuda":
            raise ValueError(f"{config.id}: torch device time needs device='cuda' (CUPTI's "
                             "kernel records); a CPU step's wall time is its device time")
        intervals = _torch_intervals(step, calls)
    else:
        intervals = _jax_intervals(config, step, calls)
    if not intervals:
        raise ValueError(f"{config.id}: the profiler recorded no kernels of the step")
    return busy_seconds(intervals) / calls


def _torch_intervals(step: Callable[[], Any], calls: int) -> list[tuple[float, float]]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step()  # outside the record: the profiler's own start-up lands on no call
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
    return [(e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
            if e.device_type == DeviceType.CUDA]


def jax_trace_intervals(trace: dict[str, Any], module: str, gpu: bool
                        ) -> list[tuple[float, float]]:
    """``(start_us, duration_us)`` of ``module``'s op events in a jax.profiler trace; with
    ``gpu``, only those on a GPU's timeline (a process named ``/device:GPU:n``)."""
    events = trace.get("traceEvents", [])
    gpu_pids = {e.get("pid") for e in events if e.get("ph") == "M"
                and e.get("name") == "process_name"
                and "/device:GPU" in str((e.get("args") or {}).get("name", ""))}
    return [(e["ts"], e["dur"]) for e in events
            if e.get("ph") == "X" and (e.get("args") or {}).get("hlo_module") == module
            and "hlo_op" in (e.get("args") or {}) and (not gpu or e.get("pid") in gpu_pids)]


def _jax_intervals(config: AttentionConfig, step: Callable[[], Any], calls: int
                   ) -> list[tuple[float, float]]:
    import jax

    module = hlo_module_name(step)
    with tempfile.TemporaryDirectory(prefix="mhabench-device-time-") as logdir:
        with jax.profiler.trace(logdir):
            for _ in range(calls):
                step()
        files = sorted(Path(logdir).rglob("*.trace.json.gz"))
        if not files:
            raise ValueError(f"{config.id}: jax.profiler wrote no trace")
        with gzip.open(files[-1], "rt") as f:
            trace = json.load(f)
    return jax_trace_intervals(trace, module, gpu=config.device == "cuda")
