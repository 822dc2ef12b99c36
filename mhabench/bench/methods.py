"""What an attention class's methods delegate to, and the base class whose attributes asv
reads.

Every attention class (``heads``, ``gqa``, ... or a ``bench_*`` module of ``benchmarks/``)
writes out its ``setup``, ``teardown`` and each ``time_``/``track_`` method in its body,
each one line that calls a function here:

- ``setup``: :func:`prepare`, a cached lookup (asv re-runs setup before every sample): the
  build, compile and warm-up ran once per process in ``timing.prepare``; a cell this
  machine cannot run is n/a (``NotImplementedError``).
- ``teardown``: :func:`record_load`, after every sample of a time method, what other
  processes took from the machine (``mhabench.measure.conditions.machine_load``).
- ``time_step`` (its own setup :func:`settle`), ``time_step_warm`` (:func:`settle_warm`),
  ``track_step_bytes`` (:func:`step_bytes`), ``track_step_rss_bytes`` (:func:`rss_bytes`),
  ``track_kernel`` (:func:`kernel_code`), ``track_device_seconds`` (:func:`device_seconds`).

FLOPs, map bytes and seconds per GFLOP are pure functions of the config the parameters
name, so the report computes them from ``time_step``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mhabench.bench.axes import grid
from mhabench.bench.cells import config_of, unsupported_as_skip
from mhabench.core.config import AttentionConfig
from mhabench.measure import allocator, memory, timing
from mhabench.measure.conditions import gpu_state, machine_load
from mhabench.measure.profiler import device_time, kernel_detect

WARMUP = 1  # calls inside prepare(), after JAX compiled in make_step; as measure() passes it


class AttentionBenchmark:
    """What asv reads of every attention class besides its parameters and methods."""

    number = 1  # one synchronised step per sample (asv forces it when setup exists)
    rounds = grid(tiny=1, quick=1, full=2)
    # (min samples, max samples, seconds): at least 8 (asv compare's Mann-Whitney test at
    # p < 0.002 can call nothing below 7 a side), more where a step is fast. The regression
    # gate sets its own rounds and repeat (-a).
    repeat = grid(tiny=(8, 30, 0.3), quick=(8, 30, 0.3), full=(15, 60, 10.0))
    # asv's own warm-up calls, after prepare's and the settle: without them the first
    # samples of a process still ran slow in asv's timer; the quick grid's is the shortest
    # that reads the same medians.
    warmup_time = grid(tiny=0.1, quick=0.03, full=1.0)
    timeout = grid(tiny=120, quick=300, full=900)


class _Sampling:
    """What this timing process knows between asv's calls: the cell (set by the class's
    setup), the timed method (for its record) and, on a GPU, the watch on its state."""

    config: AttentionConfig | None = None
    method = "time_step"
    watch: gpu_state.Watch | None = None
    watching = False


_UNSETTLED: list[Callable[[], Any]] = []  # prepared steps whose heap has not settled yet


@functools.lru_cache(maxsize=8)
def _prepared(config: AttentionConfig) -> Callable[[], Any]:
    step = unsupported_as_skip(lambda: timing.prepare(config, WARMUP, settle=False))
    _UNSETTLED.append(step)
    return step


@functools.lru_cache(maxsize=8)
def _config(names: tuple[str, ...], params: tuple[Any, ...]) -> AttentionConfig:
    return unsupported_as_skip(lambda: config_of(names, params))


def prepare(bench: Any, params: tuple[Any, ...]) -> None:
    """A class's setup: ``bench.cfg`` (the cell's config) and ``bench.step`` (the compiled,
    warmed-up, synchronising step); n/a where the cell cannot run here."""
    bench.cfg = _config(tuple(bench.param_names), params)
    bench.step = _prepared(bench.cfg)
    _Sampling.config = bench.cfg


def _gpu_record() -> dict[str, Any]:
    """The ``gpu`` field of a CUDA cell's load record (n/a with the reason without NVML)."""
    watch = _Sampling.watch
    return {"gpu": watch.summary() if watch is not None else gpu_state.not_available()}


def record_load(bench: Any, params: tuple[Any, ...]) -> None:
    """A class's teardown, after every sample (asv re-runs setup and teardown around each):
    the machine's load so far, only in a time process (time_step's setup opened the window),
    with the GPU's state for a CUDA cell."""
    # asv tears down after a setup that skipped the cell too (n/a): no config then.
    config = getattr(bench, "cfg", None)
    # asv's name: the module relative to the benchmark folder (benchmarks/bench_*.py and a
    # user's module subclass the question classes, so __module__ is that module)
    cls = bench.__class__
    module = cls.__module__.partition(".")[2] or cls.__module__
    gpu = _gpu_record if config is not None and config.device == "cuda" else None
    machine_load.record(f"{module}.{cls.__name__}.{_Sampling.method}", params, gpu)


def settle(*params: Any, cold: bool = True) -> None:
    """``time_step``'s own setup, before every sample (asv runs it after the class's, with
    the cell's parameters). Once per process: a prepared step's heap settles, as
    ``timing.prepare(settle=True)`` has it for ``measure`` (the memory and kernel processes
    skip it), the load window opens and, on a GPU, the watch on its clocks. Every sample:
    ``timing.before_sample`` (a cold L2 on a GPU unless ``cold`` is False) and the GPU's
    clock and throttle reasons, outside the clock."""
    while _UNSETTLED:
        allocator.warm_until_settled(_UNSETTLED.pop())
    config = _Sampling.config
    if config is not None and config.device == "cuda":
        if not _Sampling.watching:
            _Sampling.watch, _Sampling.watching = gpu_state.open_watch(), True
        timing.before_sample(config, cold=cold)
        if _Sampling.watch is not None:
            _Sampling.watch.sample()
    machine_load.start()  # what other processes take from here to the last sample


def settle_warm(*params: Any) -> None:
    """``time_step_warm``'s setup: as ``time_step``'s, with the L2 left warm."""
    _Sampling.method = "time_step_warm"
    settle(*params, cold=False)


def _bytes(read: Any, bench: Any) -> int:
    """``read(config, step)``, bytes; its ValueError is asv's in-body skip (n/a)."""
    try:
        return read(bench.cfg, bench.step)
    except ValueError as err:
        from asv_runner.benchmarks.mark import SkipNotImplemented

        raise SkipNotImplemented(str(err)) from err


def step_bytes(bench: Any) -> int:
    """``track_step_bytes``: the live peak of the step's own allocations
    (``mhabench.measure.memory``), bytes, lower is better."""
    return _bytes(memory.step_bytes, bench)


def rss_bytes(bench: Any) -> int:
    """``track_step_rss_bytes``: the RSS high-water reading of a step, a cross-check of
    ``track_step_bytes`` on CPU cells."""
    return _bytes(memory.rss_step_bytes, bench)


def kernel_code(bench: Any) -> int:
    """``track_kernel``: the attention kernel that ran, as
    ``mhabench.core.kernel_codes.KERNEL_CODES`` (a fused cell falling back to math reads as
    a rise); library calls only (``kernel_detect.library_call``)."""
    return kernel_detect.KERNEL_CODES[kernel_detect.detect_kernel(bench.cfg, bench.step)]


def device_seconds(bench: Any) -> float:
    """``track_device_seconds``: the device's busy time per step
    (``mhabench.measure.profiler.device_time``), CUDA cells; wall minus device is the host's
    share."""
    return device_time.device_seconds(bench.cfg, bench.step)
