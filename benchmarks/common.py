"""Shared machinery of the asv benchmark classes (scipy's benchmarks/common.py style).

- ``MHABENCH_GRID`` picks the grid: ``tiny`` (CI smoke and the results fixture: every
  module, seconds), ``quick`` (the main job: minutes on a 2-core machine) or ``full``
  (dedicated machines). ``grid(tiny=..., quick=..., full=...)`` returns the current one.
- ``MHABENCH_DEVICES`` and ``MHABENCH_DTYPES`` (comma lists; defaults depend on the grid)
  and ``MHABENCH_THREADS`` (default 1) become the ``device``, ``dtype`` and ``threads``
  parameters, so all three are recorded in the results.
- :class:`AttentionBenchmark` turns a parameter cell into an ``AttentionConfig``, asks
  ``mhabench.measure.timing.prepare`` for the compiled, warmed-up, synchronising step and maps
  every "cannot run here" error to ``NotImplementedError`` (asv shows n/a, not failed).

Convention that makes results self-describing: the ``param_names`` of an attention class
are ``AttentionConfig`` field names plus ``threads``, and every shape field (batch, n, d,
heads) is a parameter even when it has one value, so ``AttentionConfig.from_dict`` of a
result cell's parameters (without ``threads``) is the config that was timed.
"""

from __future__ import annotations

import abc
import functools
import itertools
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mhabench.core import backends
from mhabench.core.config import DEVICES, AttentionConfig, framework_installed
from mhabench.core.config import DTYPES as ALL_DTYPES
from mhabench.measure import (
    allocator,
    device_time,
    gpu_state,
    kernels,
    machine_load,
    memory,
    timing,
)

GRIDS = ("tiny", "quick", "full")
T = TypeVar("T")


def grid_from_env() -> str:
    name = os.environ.get("MHABENCH_GRID", "quick")
    if name not in GRIDS:
        raise ValueError(f"MHABENCH_GRID={name!r} is not allowed; choose one of "
                         f"{', '.join(GRIDS)}")
    return name


def list_from_env(var: str, default: list[str], allowed: tuple[str, ...]) -> list[str]:
    """A comma-separated list of allowed names from ``var`` (``default`` when unset)."""
    raw = os.environ.get(var, ",".join(default))
    names = [d.strip() for d in raw.split(",") if d.strip()]
    if not names or any(d not in allowed for d in names):
        raise ValueError(f"{var}={raw!r} is not allowed; give a comma-separated list of "
                         f"{', '.join(allowed)}")
    return names


GRID = grid_from_env()


def grid(*, tiny: T, quick: T, full: T) -> T:
    """The value for the grid in force (MHABENCH_GRID)."""
    return {"tiny": tiny, "quick": quick, "full": full}[GRID]


# Thread count before JAX touches a device (XLA sizes its pool from the CPU affinity).
THREADS = timing.configure_process()

# tiny and quick stay on the CPU (every skipped cuda cell still costs a process start);
# full has both; a GPU machine asks for MHABENCH_DEVICES=cuda (scripts/gpu-grid).
DEVICE_PARAMS = list_from_env("MHABENCH_DEVICES", grid(tiny=["cpu"], quick=["cpu"],
                                                       full=list(DEVICES)), DEVICES)
# cuda asked for on a machine with an NVIDIA driver: CUDA may start in the cells.
_CUDA_HERE = "cuda" in DEVICE_PARAMS and os.path.exists("/dev/nvidiactl")

# Import the frameworks once here: asv's forkserver then forks every cell from a process
# that has them loaded. Importing jax does not start a device. MHABENCH_PREIMPORT names
# what to import up front (default: both frameworks and, where CUDA cannot start, torch's
# compiler machinery); a framework left out is imported by its first cell. torch.compile's
# and FlexAttention's machinery ("compiler") otherwise imports on the first compile: 4 s of
# every compiled cell's process, paid once here instead (importing starts no compile
# worker, so forking after it is safe on the CPU). Each costs seconds per forkserver
# start, so mhabench gate, whose rounds each start one for a few cells, names only its
# cells' frameworks.
# asv's discovery process (``benchmark.py discover``) only lists the classes and forks
# nothing: the default imports none there (10-15 s of every asv run and gate round).
_DISCOVERY = sys.argv[1:2] == ["discover"] and Path(sys.argv[0]).name == "benchmark.py"
# Where CUDA may start, the compiler machinery stays out: importing it with a CUDA build
# of torch starts the CUDA driver in the forkserver, and no forked cell could use the GPU
# (every cuda cell fails "Cannot re-initialize CUDA in forked subprocess", and JAX's cuInit
# fails in the cells). tests/test_cuda_fork.py checks it.
_DEFAULT_PREIMPORT = ["torch", "jax"] if _CUDA_HERE else ["torch", "jax", "compiler"]
PREIMPORT = list_from_env("MHABENCH_PREIMPORT",
                          ["none"] if _DISCOVERY else _DEFAULT_PREIMPORT,
                          ("torch", "jax", "compiler", "none"))
for _framework, _modules in (("torch", ("torch",)), ("jax", ("jax", "flax.nnx"))):
    if _framework in PREIMPORT and framework_installed(_framework):
        for _module in _modules:
            __import__(_module)
if "torch" in sys.modules and "compiler" in PREIMPORT:
    for _module in ("torch._dynamo", "torch._inductor.compile_fx",
                    "torch.nn.attention.flex_attention"):
        __import__(_module)
if "jax" in sys.modules:
    # Each benchmark of a cell (time, memory, kernel) runs in its own process and compiles
    # the same program: keep compiled programs on disk (compile time is never timed here).
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ.get(
        "JAX_COMPILATION_CACHE_DIR",
        os.path.join(tempfile.gettempdir(), f"mhabench-jax-cache-{os.getuid()}")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

FRAMEWORKS = ["torch", "jax"]
# The chapter's four backends, then every plug-in registered from outside mhabench (entry
# points, MHABENCH_BACKENDS); a plug-in's cells in a framework it does not run are skipped.
# mhabench's own newer backends join the grids class by class (the quick grid's budget).
BACKENDS = [*backends.CHAPTER, *backends.plugin_names()]
# mhabench's newer backends (torch.compile, FlexAttention, JAX blockwise) join the Exercise
# 6.4 sweep, and one GQA and one cross cell (bench_gqa, bench_cross). A torch cell of
# theirs compiles for 2-3 s in every process; tiny (CI) takes only blockwise, which
# compiles in under a second (bench_compile times a compiled cell there).
NEW_BACKENDS = [b for b in ("compiled", "flex", "blockwise") if b in backends.names()]
GRID_NEW_BACKENDS = grid(tiny=[b for b in NEW_BACKENDS if b == "blockwise"],
                         quick=NEW_BACKENDS, full=NEW_BACKENDS)
SWEEP_BACKENDS = BACKENDS + GRID_NEW_BACKENDS


def newer_backends_where(where: Callable[[AttentionConfig], bool]
                         ) -> Callable[[AttentionConfig], bool]:
    """A class's ``keep`` or ``keep_memory``: every cell of the other backends, and the
    newer backends' cells only ``where`` (the quick grid's budget); the full grid keeps
    them all."""
    return lambda c: GRID == "full" or c.backend not in NEW_BACKENDS or where(c)


DTYPES = list_from_env("MHABENCH_DTYPES", grid(tiny=["float32"], quick=["float32"],
                                               full=list(ALL_DTYPES)), ALL_DTYPES)
# track_kernel: on the CPU-only quick grid the library's choice is fixed (flash, or math
# with dropout; XLA) and a forced kernel cannot fall back (its build fails), so the quick
# grid spends those 84 s of processes on samples; a GPU run and tiny/full record it.
# MHABENCH_KERNELS=1 records them on any grid (mhabench versions: a kernel changed between
# two dependency sets is what a time alone hides).
RECORD_KERNELS = (grid(tiny=True, quick="cuda" in DEVICE_PARAMS, full=True)
                  or os.environ.get("MHABENCH_KERNELS") == "1")
WARMUP = 1  # calls inside prepare(), after JAX compiled in make_step; as measure() passes it
# The cost model's budget skips cells that would not fit; this cap is the net under it: a
# cell that still runs out fails as that cell. Not where CUDA may start (it reserves far
# more address space than memory).
MEMORY_LIMIT = None if _CUDA_HERE else timing.limit_address_space()


def unsupported_as_skip(build: Callable[[], T]) -> T:
    """Run ``build``; a ValueError (UnavailableError included: no GPU, framework missing,
    over the memory budget, or a variant the backend lacks) becomes NotImplementedError,
    which asv reports as n/a for that cell instead of a failure."""
    try:
        return build()
    except ValueError as err:
        raise NotImplementedError(str(err)) from err


def config_of(names: list[str], values: tuple[Any, ...]) -> AttentionConfig:
    """The config of one parameter cell (raises ValueError for an invalid combination)."""
    fields = dict(zip(names, values, strict=True))
    fields.pop("threads", None)  # in force since import; a parameter only to record it
    return AttentionConfig.from_dict(fields)


def _valid(names: list[str], values: tuple[Any, ...]) -> bool:
    try:
        config_of(names, values)
    except ValueError:
        return False
    return True


def skip_cells(names: list[str], params: list[list[Any]],
               keep: Callable[[AttentionConfig], bool] = lambda config: True
               ) -> list[tuple[Any, ...]]:
    """Parameter cells asv skips before any setup (n/a at the cost of a fork): the ones
    that are no valid config (reference with GQA, self-attention with n != m) and the
    ones ``keep`` rejects."""
    return [cell for cell in itertools.product(*params)
            if not _valid(names, cell) or not keep(config_of(names, cell))]


_UNSETTLED: list[Callable[[], Any]] = []  # prepared steps whose heap has not settled yet


@functools.lru_cache(maxsize=8)
def _prepared(names: tuple[str, ...], values: tuple[Any, ...]
              ) -> tuple[AttentionConfig, Callable[[], Any]]:
    config = unsupported_as_skip(lambda: config_of(list(names), values))
    step = unsupported_as_skip(lambda: timing.prepare(config, WARMUP, settle=False))
    _UNSETTLED.append(step)
    return config, step


class _Sampling:
    """What this timing process knows between asv's calls: the cell (set by the class's
    setup), the timed method (for its record) and, on a GPU, the watch on its state."""

    config: AttentionConfig | None = None
    method = "time_step"
    watch: gpu_state.Watch | None = None
    watching = False


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


def _gpu_record() -> dict[str, Any]:
    """The ``gpu`` field of a CUDA cell's load record (n/a with the reason without NVML)."""
    watch = _Sampling.watch
    return {"gpu": watch.summary() if watch is not None else gpu_state.not_available()}


class AttentionBenchmark(abc.ABC):
    """Base of the timed classes: a subclass only sets ``param_names`` (config fields and
    ``threads``) and ``params`` (abstract here, so asv does not collect the base itself).

    Each cell gets:

    - ``time_step``: asv's clock around one synchronised step. asv re-runs ``setup``
      before every sample, so setup is a cached lookup (build, compile and warm-up ran
      once per process in ``timing.prepare``, and the heap settled in ``time_step``'s own
      setup); ``warmup_time`` adds warm calls before the samples, and ``repeat`` asks for
      enough samples for asv's Mann-Whitney test (``asv continuous``/``compare``) to call
      a change significant (7 a side at least).
    - after every sample, what other processes took from the machine
      (``mhabench.measure.machine_load``), kept beside the results for the regression section.
    - ``track_step_bytes``: the live peak of the step's own allocations
      (``mhabench.measure.memory``), bytes, lower is better; CPU cells ``keep_rss`` takes
      also get ``track_step_rss_bytes``, the RSS high-water reading, as a cross-check.
    - ``track_kernel`` (fused and reference cells only): the attention kernel that ran, as
      ``mhabench.core.kernels.KERNEL_CODES`` (a fused cell falling back to math reads as a rise).
    - ``track_device_seconds`` (CUDA cells, when the grid asks for cuda): the device's busy
      time per step (``mhabench.measure.device_time``); wall minus device is the host's share.

    FLOPs, map bytes and seconds per GFLOP are pure functions of the config the parameters
    name, so the report computes them from ``time_step``.
    """

    number = 1  # one synchronised step per sample (asv forces it when setup exists)
    rounds = grid(tiny=1, quick=1, full=2)
    # (min samples, max samples, seconds): at least 8 a side (asv's Mann-Whitney test at
    # p < 0.002 can call nothing below 7 a side), more where a step is fast. The README's
    # regression gate sets its own rounds and repeat (-a): 8 rounds of 3-8 samples.
    repeat = grid(tiny=(8, 30, 0.3), quick=(8, 30, 0.3), full=(15, 60, 10.0))
    # asv's own warm-up calls, after prepare's and the settle: without them the first
    # sample or two of a process still ran up to 2x slow in asv's timer, though the same
    # calls made directly after the settle did not. On the quick grid 0.03 s reads the
    # same medians as 0.1 s (0.99x over the head and GQA sweeps) and saves ~0.05 s a cell.
    warmup_time = grid(tiny=0.1, quick=0.03, full=1.0)
    records_kernel = True  # False where the kernel cannot change along the class's grid
    # Which kept cells of a class that records kernels get a track_kernel process (only
    # library calls ever do: mhabench.measure.kernels.library_call).
    keep_kernel: Callable[[AttentionConfig], bool] = staticmethod(lambda config: True)
    records_memory = True  # False: no track_step_bytes at all (a class timed for time only)
    # False: no track_device_seconds process (the GPU peak classes: their steps are long
    # enough that wall time is the device's; a process per cell is budget on a lent GPU)
    records_device_time = True
    # A cell also timed with the L2 left warm (``time_step_warm``), beside its cold
    # ``time_step``: the reference for what the flush costs (None: no such method).
    warm_reference: Callable[[AttentionConfig], bool] | None = None
    # Which valid cells a class runs (the rest are skipped before any setup): the newer
    # backends take only some cells of the GQA and cross classes on the quick grid.
    keep: Callable[[AttentionConfig], bool] = staticmethod(lambda config: True)
    # Which kept cells also get a memory process (track_step_bytes): all, unless a class
    # narrows it (the newer backends' memory is in the Exercise 6.4 sweep on the quick grid).
    keep_memory: Callable[[AttentionConfig], bool] = staticmethod(lambda config: True)
    # Which CPU memory cells also get the RSS cross-check (track_step_rss_bytes), one more
    # process each: on the full grid all; elsewhere a class opts in (the Exercise 6.4 sweep).
    keep_rss: Callable[[AttentionConfig], bool] = staticmethod(lambda config: GRID == "full")
    timeout = grid(tiny=120, quick=300, full=900)

    @property
    @abc.abstractmethod
    def param_names(self) -> list[str]:
        """AttentionConfig field names, then ``threads``."""

    @property
    @abc.abstractmethod
    def params(self) -> list[list[Any]]:
        """One list of values per name in ``param_names``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("params"), list):
            names, params = cls.__dict__["param_names"], cls.__dict__["params"]
            cls.skip_params = skip_cells(names, params, cls.keep)

            def memory_cell(c: AttentionConfig) -> bool:
                # records_memory False: no memory process of either kind (nor the RSS one)
                return cls.records_memory and cls.keep(c) and cls.keep_memory(c)

            if cls.records_memory:  # none: no method (an all-skipped one still costs ~0.6 s)
                cls.track_step_bytes = _track_memory_method(
                    "track_step_bytes", memory.step_bytes, skip_cells(names, params,
                                                                      memory_cell))
            rss_skip = skip_cells(names, params, lambda c: memory_cell(c) and cls.keep_rss(c)
                                  and c.device == "cpu")
            if len(rss_skip) < len(list(itertools.product(*params))):  # none: no method
                cls.track_step_rss_bytes = _track_memory_method(
                    "track_step_rss_bytes", memory.rss_step_bytes, rss_skip)
            # A per-class copy, so each class carries its own skip list; none where the grid
            # records no kernels (a benchmark whose every cell is skipped still costs asv
            # about 0.6 s).
            if cls.records_kernel and RECORD_KERNELS:
                cls.track_kernel = _track_kernel_method(skip_cells(
                    names, params, lambda c: cls.keep(c) and cls.keep_kernel(c)
                    and kernels.library_call(c)))
            if cls.warm_reference is not None:
                cls.time_step_warm = _warm_method(skip_cells(
                    names, params, lambda c: cls.keep(c) and cls.warm_reference(c)))
            if "cuda" in DEVICE_PARAMS and cls.records_device_time:  # not on a CPU grid
                cls.track_device_seconds = _track_device_method(skip_cells(
                    names, params, lambda c: cls.keep(c) and c.device == "cuda"))

    def setup(self, *params: Any) -> None:
        self.cfg, self.step = _prepared(tuple(self.param_names), params)
        _Sampling.config = self.cfg

    def time_step(self, *params: Any) -> None:
        self.step()

    def teardown(self, *params: Any) -> None:
        # After every sample (asv re-runs setup and teardown around each): the machine's
        # load so far, only in a time process (time_step's setup opened the window), with
        # the GPU's state for a CUDA cell.
        # asv tears down after a setup that skipped the cell too (n/a): no config then.
        config = getattr(self, "cfg", None)
        module = type(self).__module__.partition(".")[2] or type(self).__module__
        gpu = _gpu_record if config is not None and config.device == "cuda" else None
        machine_load.record(f"{module}.{type(self).__name__}.{_Sampling.method}", params,
                            gpu)

    time_step.setup = _settle


def _track_memory_method(name: str, read: Callable[[AttentionConfig, Callable[[], Any]], int],
                         skip: list[tuple[Any, ...]]) -> Callable[..., int]:
    """A ``track_`` method called ``name`` that returns ``read(config, step)``, bytes."""
    def track(self: AttentionBenchmark, *params: Any) -> int:
        try:
            return read(self.cfg, self.step)
        except ValueError as err:  # raised inside the benchmark: asv's in-body skip
            from asv_runner.benchmarks.mark import SkipNotImplemented

            raise SkipNotImplemented(str(err)) from err

    track.__name__ = track.__qualname__ = name
    track.unit = "bytes"
    track.skip_params = skip
    return track


def _warm_method(skip: list[tuple[Any, ...]]) -> Callable[..., None]:
    def time_step_warm(self: AttentionBenchmark, *params: Any) -> None:
        self.step()

    time_step_warm.setup = _settle_warm
    time_step_warm.skip_params = skip
    return time_step_warm


def _track_device_method(skip: list[tuple[Any, ...]]) -> Callable[..., float]:
    def track_device_seconds(self: AttentionBenchmark, *params: Any) -> float:
        return device_time.device_seconds(self.cfg, self.step)

    track_device_seconds.unit = "seconds"
    track_device_seconds.skip_params = skip
    return track_device_seconds


def _track_kernel_method(skip: list[tuple[Any, ...]]) -> Callable[..., int]:
    def track_kernel(self: AttentionBenchmark, *params: Any) -> int:
        return kernels.KERNEL_CODES[kernels.detect_kernel(self.cfg, self.step)]

    track_kernel.unit = "kernel code"
    track_kernel.skip_params = skip
    return track_kernel
