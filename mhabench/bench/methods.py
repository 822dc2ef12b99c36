"""What asv times or tracks of an attention class: one mixin per method.

A class in a question module (``heads``, ``gqa``, ..., or a ``bench_*`` module of
``benchmarks/``) lists in its bases the mixins whose methods asv runs on its cells, so its
text names every benchmark it has::

    class HeadsAtFixedWidth(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):

Each method runs on the class's kept cells (``keep``) that its mixin takes (its own
``skip_params``, per class: ``mhabench.bench.common.runs_on``); a class none of
whose cells a method takes has no such method, since asv would still start a process for it
(~0.6 s).
The mixins are abstract (``param_names`` and ``params`` are a concrete class's), so asv
collects their methods only through the classes that list them.
"""

from __future__ import annotations

from typing import Any

from mhabench.bench.common import (
    _UNSETTLED,
    GRID,
    RECORD_KERNELS,
    AttentionBenchmark,
    _Sampling,
    runs_on,
)
from mhabench.measure import (
    allocator,
    device_time,
    gpu_state,
    kernel_detect,
    machine_load,
    memory,
    timing,
)


def _settle(*params: Any, cold: bool = True) -> None:
    """A timing method's own setup, before every sample (asv runs it after the class's,
    with the cell's parameters). Once per process: a prepared step's heap settles, as
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


def _settle_warm(*params: Any) -> None:
    """``time_step_warm``'s setup: as ``time_step``'s, with the L2 left warm."""
    _Sampling.method = "time_step_warm"
    _settle(*params, cold=False)


def _bytes(read: Any, bench: AttentionBenchmark) -> int:
    """``read(config, step)``, bytes; its ValueError is asv's in-body skip (n/a)."""
    try:
        return read(bench.cfg, bench.step)
    except ValueError as err:
        from asv_runner.benchmarks.mark import SkipNotImplemented

        raise SkipNotImplemented(str(err)) from err


class TimeStep(AttentionBenchmark):
    """``time_step``, every kept cell: asv's clock around one synchronised step. asv
    re-runs ``setup`` before every sample, so setup is a cached lookup (build, compile and
    warm-up ran once per process in ``timing.prepare``, and the heap settles in
    ``time_step``'s own setup); ``warmup_time`` adds warm calls before the samples, and
    ``repeat`` asks for enough samples for asv compare's Mann-Whitney test to call a change
    significant (7 a side at least); the gate sets its own (``mhabench.compare.rounds``)."""

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = _settle


class StepMemory(AttentionBenchmark):
    """``track_step_bytes``: the live peak of the step's own allocations
    (``mhabench.measure.memory``), bytes, lower is better; on the kept cells
    ``keep_memory`` takes."""

    # All, unless a class narrows it (the newer backends' memory is in the Exercise 6.4
    # sweep on the quick grid; some classes measure none there, its budget).
    keep_memory = staticmethod(lambda config: True)

    @runs_on(lambda cls, c: cls.keep_memory(c))
    def track_step_bytes(self, *params: Any) -> int:
        return _bytes(memory.step_bytes, self)

    track_step_bytes.unit = "bytes"


class StepRss(AttentionBenchmark):
    """``track_step_rss_bytes``: the RSS high-water reading of a step, a cross-check of
    ``track_step_bytes`` (so a class lists ``StepMemory`` too); on its CPU cells that
    ``keep_rss`` takes, one more process each: all on the full grid, none elsewhere unless
    a class opts in (the Exercise 6.4 sweep)."""

    keep_rss = staticmethod(lambda config: GRID == "full")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if not issubclass(cls, StepMemory):
            raise TypeError(f"{cls.__name__}: StepRss cross-checks StepMemory; list both")
        super().__init_subclass__(**kwargs)

    @runs_on(lambda cls, c: cls.keep_memory(c) and cls.keep_rss(c) and c.device == "cpu")
    def track_step_rss_bytes(self, *params: Any) -> int:
        return _bytes(memory.rss_step_bytes, self)

    track_step_rss_bytes.unit = "bytes"


class KernelTrack(AttentionBenchmark):
    """``track_kernel``: the attention kernel that ran, as
    ``mhabench.core.kernel_codes.KERNEL_CODES`` (a fused cell falling back to math reads as a
    rise); on the kept library-call cells (fused, forced kernels, reference) that
    ``keep_kernel`` takes. Only where the grid records kernels (``RECORD_KERNELS``); there a
    class keeps the method even when no cell of it is a library call (all n/a), as its
    results always had it."""

    # Which kept cells get a track_kernel process (only library calls ever do:
    # mhabench.measure.kernel_detect.library_call).
    keep_kernel = staticmethod(lambda config: True)

    if RECORD_KERNELS:
        @runs_on(lambda cls, c: cls.keep_kernel(c) and kernel_detect.library_call(c),
                 when_none=True)
        def track_kernel(self, *params: Any) -> int:
            return kernel_detect.KERNEL_CODES[kernel_detect.detect_kernel(self.cfg, self.step)]

        track_kernel.unit = "kernel code"


class WarmL2(AttentionBenchmark):
    """``time_step_warm``, every kept cell: ``time_step`` with the GPU's L2 left warm
    between samples, beside the cold one: the reference for what the flush costs."""

    @runs_on(lambda cls, c: True)
    def time_step_warm(self, *params: Any) -> None:
        self.step()

    time_step_warm.setup = _settle_warm


class DeviceTime(AttentionBenchmark):
    """``track_device_seconds``: the device's busy time per step
    (``mhabench.measure.device_time``), on the kept CUDA cells (none, so no method, where
    the grid asks for no cuda); wall minus device is the host's share."""

    @runs_on(lambda cls, c: c.device == "cuda")
    def track_device_seconds(self, *params: Any) -> float:
        return device_time.device_seconds(self.cfg, self.step)

    track_device_seconds.unit = "seconds"
