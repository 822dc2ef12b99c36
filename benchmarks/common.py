"""Shared machinery of the asv benchmark classes (scipy's benchmarks/common.py style).

- ``MHABENCH_GRID`` picks the grid: ``tiny`` (CI smoke and the results fixture: every
  module, seconds), ``quick`` (the main job: minutes on a 2-core machine) or ``full``
  (dedicated machines). ``grid(tiny=..., quick=..., full=...)`` returns the current one.
- ``MHABENCH_DEVICES`` and ``MHABENCH_DTYPES`` (comma lists; defaults depend on the grid)
  and ``MHABENCH_THREADS`` (default 1) become the ``device``, ``dtype`` and ``threads``
  parameters, so all three are recorded in the results.
- :class:`AttentionBenchmark` turns a parameter cell into an ``AttentionConfig``, asks
  ``mhabench.timing.prepare`` for the compiled, warmed-up, synchronising step and maps
  every "cannot run here" error to ``NotImplementedError`` (asv shows n/a, not failed).

Convention that makes results self-describing: the ``param_names`` of an attention class
are ``AttentionConfig`` field names plus ``threads``, and every shape field (batch, n, d,
heads) is a parameter even when it has one value, so ``AttentionConfig.from_dict`` of a
result cell's parameters (without ``threads``) is the config that was timed.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from typing import Any, TypeVar

from mhabench import timing
from mhabench.config import DEVICES, AttentionConfig, framework_installed
from mhabench.config import DTYPES as ALL_DTYPES
from mhabench.cost import cost

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
THREADS = timing.configure_threads()

# Import the frameworks once here: asv's forkserver then forks every cell from a process
# that has them loaded. Importing jax does not start a device.
for _module in ("torch", "jax", "flax.nnx"):
    if framework_installed("torch" if _module == "torch" else "jax"):
        __import__(_module)

FRAMEWORKS = ["torch", "jax"]
BACKENDS = ["loop", "batched", "fused", "reference"]
# tiny and quick stay on the CPU (every skipped cuda cell still costs a process start);
# full has both; a GPU machine asks for MHABENCH_DEVICES=cuda (scripts/gpu-grid).
DEVICE_PARAMS = list_from_env("MHABENCH_DEVICES", grid(tiny=["cpu"], quick=["cpu"],
                                                       full=list(DEVICES)), DEVICES)
DTYPES = list_from_env("MHABENCH_DTYPES", grid(tiny=["float32"], quick=["float32"],
                                               full=list(ALL_DTYPES)), ALL_DTYPES)
WARMUP = 1  # calls inside prepare(), after JAX compiled in make_step; as measure() passes it


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


class AttentionBenchmark(abc.ABC):
    """Base of the timed classes: a subclass only sets ``param_names`` (config fields and
    ``threads``) and ``params`` (abstract here, so asv does not collect the base itself).

    Each cell gets ``time_step`` (asv's clock around one synchronised step; compile and
    warm-up happened in ``prepare``), ``peakmem_step`` (whole-process max RSS) and
    ``track_seconds_per_model_gflop`` (lower is better, as asv assumes for track_), the
    roofline view's measure. Cost-model quantities (attention-map bytes, FLOPs) are pure
    functions of the config the parameters name, so the report computes them.
    """

    rounds = grid(tiny=1, quick=1, full=2)
    repeat = grid(tiny=(1, 3, 1.0), quick=(1, 3, 2.0), full=(3, 10, 20.0))
    warmup_time = 0.0  # prepare() already compiled and warmed the step up
    timeout = grid(tiny=120, quick=300, full=900)
    track_repeats = grid(tiny=1, quick=1, full=5)

    @property
    @abc.abstractmethod
    def param_names(self) -> list[str]:
        """AttentionConfig field names, then ``threads``."""

    @property
    @abc.abstractmethod
    def params(self) -> list[list[Any]]:
        """One list of values per name in ``param_names``."""

    def setup(self, *params: Any) -> None:
        self.cfg = unsupported_as_skip(lambda: config_of(self.param_names, params))
        self.step = unsupported_as_skip(lambda: timing.prepare(self.cfg, WARMUP))

    def time_step(self, *params: Any) -> None:
        self.step()

    def peakmem_step(self, *params: Any) -> None:
        self.step()

    def track_seconds_per_model_gflop(self, *params: Any) -> float:
        # The same cached step as time_step, timed by the library's one timing path.
        seconds = timing.measure(self.cfg, self.track_repeats, WARMUP).median_s
        return seconds / (cost(self.cfg).flops_model / 1e9)

    track_seconds_per_model_gflop.unit = "s/GFLOP"
