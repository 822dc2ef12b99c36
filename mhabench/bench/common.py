"""Shared machinery of the asv benchmark classes (scipy's benchmarks/common.py style), for
mhabench's own ``benchmarks/`` and the suite ``mhabench init`` writes into a user's repository.

- ``MHABENCH_GRID`` picks the grid: ``tiny`` (CI smoke and the results fixture: every
  module, seconds), ``quick`` (the main job: minutes on a 2-core machine) or ``full``
  (dedicated machines). ``grid(tiny=..., quick=..., full=...)`` returns the current one.
- ``MHABENCH_DEVICES`` and ``MHABENCH_DTYPES`` (comma lists; defaults depend on the grid)
  and ``MHABENCH_THREADS`` (default 1) become the ``device``, ``dtype`` and ``threads``
  parameters (:data:`WHERE`), so all three are recorded in the results.
- :func:`parameters` builds a class's ``param_names`` and ``params`` from one ordered list
  of axes, so the two cannot drift apart; :data:`CHAPTER` and :data:`FEW_HEADS` are the
  shapes most classes sweep around.
- :class:`AttentionBenchmark` turns a parameter cell into an ``AttentionConfig``, asks
  ``mhabench.measure.timing.prepare`` for the compiled, warmed-up, synchronising step and maps
  every "cannot run here" error to ``NotImplementedError`` (asv shows n/a, not failed).
  What asv times or tracks of a class are the mixins its bases list
  (``mhabench.bench.methods``: ``TimeStep``, ``StepMemory``, ``StepRss``,
  ``KernelTrack``, ``WarmL2``, ``DeviceTime``).

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
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mhabench.core import backends, grids
from mhabench.core.config import DEVICES, AttentionConfig, framework_installed
from mhabench.core.config import DTYPES as ALL_DTYPES
from mhabench.measure import gpu_state, machine_load, timing

T = TypeVar("T")


def list_from_env(var: str, default: list[str], allowed: tuple[str, ...]) -> list[str]:
    """A comma-separated list of allowed names from ``var`` (``default`` when unset)."""
    raw = os.environ.get(var, ",".join(default))
    names = [d.strip() for d in raw.split(",") if d.strip()]
    if not names or any(d not in allowed for d in names):
        raise ValueError(f"{var}={raw!r} is not allowed; give a comma-separated list of "
                         f"{', '.join(allowed)}")
    return names


GRID = grids.grid_from_env()


def grid(*, tiny: T, quick: T, full: T) -> T:
    """The value for the grid in force (MHABENCH_GRID)."""
    return grids.pick(GRID, tiny=tiny, quick=quick, full=full)


# tiny and quick stay on the CPU (every skipped cuda cell still costs a process start);
# full has both; a GPU machine asks for MHABENCH_DEVICES=cuda (scripts/gpu-grid).
DEVICE_PARAMS = list_from_env("MHABENCH_DEVICES", grid(tiny=["cpu"], quick=["cpu"],
                                                       full=list(DEVICES)), DEVICES)
DTYPES = list_from_env("MHABENCH_DTYPES", grid(tiny=["float32"], quick=["float32"],
                                               full=list(ALL_DTYPES)), ALL_DTYPES)
# cuda asked for on a machine with an NVIDIA driver: CUDA may start in the cells.
_CUDA_HERE = "cuda" in DEVICE_PARAMS and os.path.exists("/dev/nvidiactl")

# ----- Side effects at import ----------------------------------------------------------------
# asv's forkserver imports this module once and forks every cell from it, so what is set
# up here is inherited by each cell instead of paid in each. There are four.

# 1. Threads: torch's count and the CPU affinity XLA sizes its pool from, set before JAX
#    touches a device (as MHABENCH_THREADS says; recorded as the ``threads`` parameter).
THREADS = timing.configure_process()

# 2. Pre-imports: a cell forked from a process that has the frameworks loaded starts in
#    ~0.1 s instead of ~1.6 s. Importing jax does not start a device. MHABENCH_PREIMPORT names
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

# 3. JAX's compilation cache on disk: each benchmark of a cell (time, memory, kernel) runs
#    in its own process and compiles the same program (compile time is never timed here).
if "jax" in sys.modules:
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ.get(
        "JAX_COMPILATION_CACHE_DIR",
        os.path.join(tempfile.gettempdir(), f"mhabench-jax-cache-{os.getuid()}")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

# 4. A memory cap (address space): the cost model's budget skips cells that would not fit;
#    this is the net under it, so a cell that still runs out fails as that cell instead of
#    the OOM killer taking the machine's work. Not where CUDA may start (it reserves far
#    more address space than memory).
MEMORY_LIMIT = None if _CUDA_HERE else timing.limit_address_space()

# ----- Backends and shapes ---------------------------------------------------------------------
FRAMEWORKS = ["torch", "jax"]
# The chapter's four backends, then every plug-in registered from outside mhabench (entry
# points, MHABENCH_BACKENDS); a plug-in's cells in a framework it does not run are skipped.
# mhabench's own newer backends join the grids class by class (the quick grid's budget).
BACKENDS = [*grids.CHAPTER_BACKENDS, *backends.plugin_names()]
# mhabench's newer backends (torch.compile, FlexAttention, JAX blockwise) join the Exercise
# 6.4 sweep, and one GQA and one cross cell (bench_gqa, bench_cross). A torch cell of
# theirs compiles for 2-3 s in every process; tiny (CI) takes only blockwise, which
# compiles in under a second (bench_compile times a compiled cell there).
NEW_BACKENDS = [b for b in grids.NEWER_BACKENDS if b in backends.names()]
GRID_NEW_BACKENDS = grid(tiny=[b for b in NEW_BACKENDS if b == "blockwise"],
                         quick=NEW_BACKENDS, full=NEW_BACKENDS)
SWEEP_BACKENDS = BACKENDS + GRID_NEW_BACKENDS


def newer_backends_where(where: Callable[[AttentionConfig], bool]
                         ) -> Callable[[AttentionConfig], bool]:
    """A class's ``keep`` or ``keep_memory``: every cell of the other backends, and the
    newer backends' cells only ``where`` (the quick grid's budget); the full grid keeps
    them all."""
    return lambda c: GRID == "full" or c.backend not in NEW_BACKENDS or where(c)


@dataclass(frozen=True)
class Shape:
    """One batch, sequence length and width."""

    batch: int
    n: int
    d: int

    def axes(self) -> dict[str, list[int]]:
        """Its three single-valued parameter axes, for :func:`parameters`."""
        return {"batch": [self.batch], "n": [self.n], "d": [self.d]}


# The chapter's shape (d = 256, n = 512, batch 8) on the full grid; the quick grid takes
# batch 2 (its budget), the tiny grid a toy shape.
CHAPTER = grid(tiny=Shape(batch=2, n=32, d=32), quick=Shape(batch=2, n=512, d=256),
               full=Shape(batch=8, n=512, d=256))
# The head counts of the classes that do not sweep h.
FEW_HEADS = grid(tiny=[4], quick=[8], full=[1, 8, 64])
# Where a cell runs, the last three parameters of every attention class.
WHERE = {"device": DEVICE_PARAMS, "dtype": DTYPES, "threads": [THREADS]}


def parameters(**axes: list[Any]) -> tuple[list[str], list[list[Any]]]:
    """asv's ``param_names`` and ``params`` from one ordered mapping of name to values
    (``param_names, params = parameters(framework=..., backend=..., **WHERE)``)."""
    return list(axes), list(axes.values())


# track_kernel: on the CPU-only quick grid the library's choice is fixed (flash, or math
# with dropout; XLA) and a forced kernel cannot fall back (its build fails), so the quick
# grid spends those 84 s of processes on samples; a GPU run and tiny/full record it.
# MHABENCH_KERNELS=1 records them on any grid (mhabench versions: a kernel changed between
# two dependency sets is what a time alone hides).
RECORD_KERNELS = (grid(tiny=True, quick="cuda" in DEVICE_PARAMS, full=True)
                  or os.environ.get("MHABENCH_KERNELS") == "1")
WARMUP = 1  # calls inside prepare(), after JAX compiled in make_step; as measure() passes it


# ----- Cells -------------------------------------------------------------------------------------
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


def _gpu_record() -> dict[str, Any]:
    """The ``gpu`` field of a CUDA cell's load record (n/a with the reason without NVML)."""
    watch = _Sampling.watch
    return {"gpu": watch.summary() if watch is not None else gpu_state.not_available()}


# ----- Methods a class has on some of its cells ---------------------------------------------------
def runs_on(cells: Callable[[Any, AttentionConfig], bool], *, when_none: bool = False
            ) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Marks a mixin's asv method as run on the kept cells of a class that
    ``cells(cls, config)`` takes: each class gets its own copy of the method, with the
    other cells in its ``skip_params``. A class none of whose cells it takes has no such
    method (asv starts a process even for a benchmark whose every cell it skips, ~0.6 s),
    unless ``when_none``."""
    def mark(method: Callable[..., T]) -> Callable[..., T]:
        # Underscored: asv copies a method's other plain attributes into benchmarks.json.
        method._runs_on, method._when_none = cells, when_none
        return method

    return mark


class _Absent:
    """Stands in for a mixin's method on a class that runs it on no cell: reading it raises
    AttributeError, so ``hasattr`` is False and asv's discovery, which collects functions
    only, leaves it out."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        raise AttributeError(f"{getattr(owner, '__name__', owner)} runs {self.name} on no cell")


def _per_class(method: Callable[..., Any], skip: list[tuple[Any, ...]]) -> Callable[..., Any]:
    """A copy of ``method`` (same code, so the same source for asv's version hash) with
    this class's ``skip_params``."""
    copy = types.FunctionType(method.__code__, method.__globals__, method.__name__,
                              method.__defaults__, method.__closure__)
    copy.__dict__.update(method.__dict__)
    copy.__qualname__, copy.__module__ = method.__qualname__, method.__module__
    copy.skip_params = skip
    return copy


class AttentionBenchmark(abc.ABC):
    """Base of the attention classes: a subclass sets ``param_names`` (config fields and
    ``threads``) and ``params`` (abstract here, so asv collects neither this base nor a
    mixin of ``mhabench.bench.methods``) and lists in its bases the mixins whose methods asv
    runs on its cells. ``keep`` says which valid cells the class runs at all (the others
    are in ``skip_params``, skipped before any setup); each mixin's method runs on the kept
    cells it takes (its own ``skip_params``: :func:`runs_on`).

    ``setup`` is a cached lookup (asv re-runs it before every sample): the build, compile
    and warm-up ran once per process in ``timing.prepare``. ``teardown`` records, after
    every sample of a time method, what other processes took from the machine
    (``mhabench.measure.machine_load``), kept beside the results for the regression section.

    FLOPs, map bytes and seconds per GFLOP are pure functions of the config the parameters
    name, so the report computes them from ``time_step``.
    """

    number = 1  # one synchronised step per sample (asv forces it when setup exists)
    rounds = grid(tiny=1, quick=1, full=2)
    # (min samples, max samples, seconds): at least 8 (asv compare's Mann-Whitney test at
    # p < 0.002 can call nothing below 7 a side), more where a step is fast. The regression
    # gate sets its own rounds and repeat (-a): 8 and 12 rounds of exactly 5 samples.
    repeat = grid(tiny=(8, 30, 0.3), quick=(8, 30, 0.3), full=(15, 60, 10.0))
    # asv's own warm-up calls, after prepare's and the settle: without them the first
    # sample or two of a process still ran up to 2x slow in asv's timer, though the same
    # calls made directly after the settle did not. On the quick grid 0.03 s reads the
    # same medians as 0.1 s (0.99x over the head and GQA sweeps) and saves ~0.05 s a cell.
    warmup_time = grid(tiny=0.1, quick=0.03, full=1.0)
    # Which valid cells a class runs (the rest are skipped before any setup): the newer
    # backends take only some cells of the GQA and cross classes on the quick grid.
    keep: Callable[[AttentionConfig], bool] = staticmethod(lambda config: True)
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
        if not isinstance(cls.__dict__.get("params"), list):
            return  # a mixin or an abstract base: no cells
        names, params = cls.__dict__["param_names"], cls.__dict__["params"]
        cls.skip_params = skip_cells(names, params, cls.keep)
        every = len(list(itertools.product(*params)))
        marked = {name: method for base in reversed(cls.__mro__)  # the nearest base's wins
                  for name, method in vars(base).items()
                  if getattr(method, "_runs_on", None) is not None}
        for name, method in marked.items():
            skip = skip_cells(names, params, lambda c, m=method: cls.keep(c)
                              and m._runs_on(cls, c))
            setattr(cls, name, _per_class(method, skip)
                    if len(skip) < every or method._when_none else _Absent(name))

    def setup(self, *params: Any) -> None:
        self.cfg, self.step = _prepared(tuple(self.param_names), params)
        _Sampling.config = self.cfg

    def teardown(self, *params: Any) -> None:
        # After every sample (asv re-runs setup and teardown around each): the machine's
        # load so far, only in a time process (time_step's setup opened the window), with
        # the GPU's state for a CUDA cell.
        # asv tears down after a setup that skipped the cell too (n/a): no config then.
        config = getattr(self, "cfg", None)
        # asv's name: the module relative to the benchmark folder (a class exported there
        # says that module: mhabench.bench.reuse)
        module = type(self).__module__.partition(".")[2] or type(self).__module__
        gpu = _gpu_record if config is not None and config.device == "cuda" else None
        machine_load.record(f"{module}.{type(self).__name__}.{_Sampling.method}", params,
                            gpu)
