"""The one way mhabench times a config, shared by the asv benchmarks and the CLI.

:func:`prepare` builds the model and inputs, compiles (JAX) and warms up, and returns a
step that synchronises with the device before returning; it is cached per process, so
asv's per-sample ``setup`` stays cheap and no compile time leaks into a timing.
:func:`measure` times that same step with ``perf_counter`` and returns a
:class:`Measurement` (median and quartiles of several repeats).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mhabench.core.config import AttentionConfig, UnavailableError, framework_installed
from mhabench.core.cost import cost
from mhabench.measure import cache_flush
from mhabench.measure.allocator import retain_freed_memory, warm_until_settled
from mhabench.measure.conditions.speed import slowdown

DEFAULT_THREADS = 1  # the stable regression baseline on shared 2-core machines
# Default working-set budget: this share of the device's memory (16 GiB of a 24 GiB CPU
# box, about 93 GiB of an H200); MHABENCH_MEMORY_BUDGET_GB sets an absolute one.
BUDGET_FRACTION = 2 / 3
# float32 matmuls run in true float32 in both frameworks (no TF32): torch's default on
# CUDA, set explicitly; JAX would otherwise use TF32 on GPUs that have it.
FLOAT32_MATMUL = "ieee"
# The CPUs this process may use when mhabench was imported (widening back is allowed).
_START_CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def threads_from_env() -> int:
    raw = os.environ.get("MHABENCH_THREADS", str(DEFAULT_THREADS))
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"MHABENCH_THREADS={raw!r} is not allowed; it must be a positive integer")
    return threads


def configure_process(threads: int | None = None) -> int:
    """Set up this process for timing; returns the thread count in force.

    Freed memory stays in the process (:mod:`mhabench.measure.allocator`), so no step pays for
    page faults on memory the previous step gave back. torch and JAX use ``threads`` CPU
    threads: torch takes ``set_num_threads``. XLA:CPU sizes its thread pool from the process's CPU
    affinity when JAX first touches a device, so the affinity is narrowed here; call this
    before any JAX computation (asv benchmark modules do it at import).
    """
    threads = threads_from_env() if threads is None else threads
    retain_freed_memory()  # before the frameworks start threads (one arena)
    if threads < 1:
        raise ValueError(f"threads={threads} is not allowed; it must be a positive integer")
    if _START_CPUS:
        os.sched_setaffinity(0, _START_CPUS[:threads])
    try:
        import torch
    except ImportError:
        return threads
    torch.set_num_threads(threads)
    return threads


@functools.lru_cache(maxsize=2)
def device_memory_bytes(device: str = "cpu") -> int:
    """Total memory of ``device``: this machine's RAM, or the first GPU's memory."""
    if device == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory)
    except ImportError:
        pass
    import jax

    stats = jax.devices("gpu")[0].memory_stats() or {}
    return int(stats.get("bytes_limit", 0))


def budget_bytes(device: str = "cpu") -> float:
    """The working-set budget of one cell on ``device`` (MHABENCH_MEMORY_BUDGET_GB, else
    ``BUDGET_FRACTION`` of the device's memory)."""
    raw = os.environ.get("MHABENCH_MEMORY_BUDGET_GB")
    if raw is None:
        return BUDGET_FRACTION * device_memory_bytes(device)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ValueError(f"MHABENCH_MEMORY_BUDGET_GB={raw!r} is not allowed; "
                         "it must be a positive number of GiB")
    return value * 2**30


def check_available(config: AttentionConfig) -> None:
    """Raise :class:`UnavailableError` naming what this machine lacks to run ``config``."""
    if not framework_installed(config.framework):
        extra = "torch" if config.framework == "torch" else "jax"
        raise UnavailableError(
            f"framework={config.framework!r} is not installed here; "
            f"install the '{extra}' extra (pip install 'mhabench[{extra}]')")
    if config.device == "cuda":
        if config.framework == "torch":
            import torch

            ok = torch.cuda.is_available()
        else:
            ok = _jax_has_gpu()
        if not ok:
            raise UnavailableError(
                f"device='cuda' is not available to {config.framework} on this machine "
                "(no GPU found); use device='cpu'")


def _jax_has_gpu() -> bool:
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def check_runnable(config: AttentionConfig) -> None:
    """Raise :class:`UnavailableError` if this machine cannot or should not run ``config``:
    framework or device missing, or the cost model's working set over the budget."""
    check_available(config)
    need = cost(config).peak_bytes_estimate
    budget = budget_bytes(config.device)
    if need > budget:
        raise UnavailableError(
            f"{config.id} needs about {need / 2**30:.1f} GiB by the cost model, over the "
            f"{config.device} budget of {budget / 2**30:.1f} GiB (MHABENCH_MEMORY_BUDGET_GB)")


# The net under the budget: a process may map this share of the machine's memory, so a
# cell the cost model underestimates fails as that cell (MemoryError, RESOURCE_EXHAUSTED)
# instead of the kernel's OOM killer taking the machine's work with it (as scipy's suite).
ADDRESS_SPACE_FRACTION = 0.8


def limit_address_space() -> int | None:
    """Cap this process's (and its children's) address space: MHABENCH_MEMORY_LIMIT_GB, or
    ``ADDRESS_SPACE_FRACTION`` of the machine's memory; never raises an existing lower cap.
    Returns the cap in bytes, or None where it cannot be set. CPU only: CUDA reserves far
    more address space than memory, so GPU runs leave it unset."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    raw = os.environ.get("MHABENCH_MEMORY_LIMIT_GB")
    if raw is None:
        limit = int(ADDRESS_SPACE_FRACTION * device_memory_bytes("cpu"))
    else:
        try:
            limit = int(float(raw) * 2**30)
        except ValueError:
            limit = -1
        if limit <= 0:
            raise ValueError(f"MHABENCH_MEMORY_LIMIT_GB={raw!r} is not allowed; it must be a "
                             "positive number of GiB")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def float32_matmul_precision(framework: str) -> Any:
    """Make float32 matmuls true float32 (:data:`FLOAT32_MATMUL`) in ``framework``; for
    JAX, returns the context manager to trace and compile under."""
    if framework == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        return contextlib.nullcontext()
    import jax

    return jax.default_matmul_precision("float32")


@functools.lru_cache(maxsize=4)
def prepare(config: AttentionConfig, warmup: int = 2, settle: bool = True
            ) -> Callable[[], Any]:
    """A warmed-up, compiled, synchronising step for ``config`` (cached per process):
    ``warmup`` calls, then (``settle``) more until the heap has stopped growing (page
    faults). Only timing needs the settled heap: asv's memory and kernel processes skip it
    and the time benchmark settles in its own setup (``mhabench.bench.methods.settle``)."""
    check_runnable(config)
    if config.framework == "torch":
        from mhabench.layers.torch.steps import make_step
    else:
        from mhabench.layers.jax.steps import make_step
    with float32_matmul_precision(config.framework):
        step = make_step(config)
    for _ in range(warmup):
        step()
    if settle:
        warm_until_settled(step)
    return step


@dataclass(frozen=True)
class Measurement:
    """Repeated timings of one config's step, in seconds."""

    config: AttentionConfig
    times_s: tuple[float, ...]
    threads: int
    # the machine's speed probe (mhabench.measure.conditions.speed) read beside each timing, where
    # the timer read one (measure_interleaved's ``probe``); empty otherwise
    probes_s: tuple[float, ...] = ()

    @property
    def repeats(self) -> int:
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def _quartiles(self) -> tuple[float, float]:
        if len(self.times_s) < 2:
            return self.times_s[0], self.times_s[0]
        q = statistics.quantiles(self.times_s, n=4, method="inclusive")
        return q[0], q[2]

    @property
    def q25_s(self) -> float:
        return self._quartiles()[0]

    @property
    def q75_s(self) -> float:
        return self._quartiles()[1]

    def at_fast_speed(self, reference_s: float) -> Measurement:
        """Each timing divided by the slowdown its probe read against the machine's quick
        reading ``reference_s`` (:func:`mhabench.measure.conditions.speed.slowdown`); the same
        measurement where no probe was read."""
        if not self.probes_s:
            return self
        return dataclasses.replace(self, times_s=tuple(
            t / slowdown(p, reference_s)
            for t, p in zip(self.times_s, self.probes_s, strict=True)))

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "id": self.config.id,
                "median_s": self.median_s, "q25_s": self.q25_s, "q75_s": self.q75_s,
                "repeats": self.repeats, "threads": self.threads,
                "times_s": list(self.times_s),
                **({"probes_s": list(self.probes_s)} if self.probes_s else {})}


def timed_call(step: Callable[[], Any]) -> float:
    """Seconds of one call of ``step``, with Python's garbage collector paused during the
    call, as asv's timer (timeit) does."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        step()
        return time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


def measure(config: AttentionConfig, repeats: int = 7, warmup: int = 2,
            threads: int | None = None) -> Measurement:
    """Time ``repeats`` calls of the prepared step for ``config``, one call per sample with
    Python's garbage collector paused during the call, as asv's timer (timeit) does."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats} is not allowed; it must be at least 1")
    used = configure_process(threads)
    step = prepare(config, warmup)
    times = []
    for _ in range(repeats):
        before_sample(config)
        times.append(timed_call(step))
    return Measurement(config, tuple(times), used)


def before_sample(config: AttentionConfig, cold: bool = True) -> None:
    """What precedes every timed sample, outside the clock (here and in the asv suite): on
    a GPU, a cold L2 (:mod:`mhabench.measure.cache_flush`) unless ``cold`` is False (the
    warm-cache reference cell). A CPU's caches are left as the previous call left them."""
    if cold and config.device == "cuda":
        cache_flush.flush(config.framework)
