"""What every asv benchmark process reads from its environment and sets up when it imports
the suite (scipy's benchmarks/common.py style), for mhabench's own ``benchmarks/`` and the
suite ``mhabench init`` writes into a user's repository.

- ``MHABENCH_GRID`` picks the grid (:mod:`mhabench.core.grids`: tiny, quick or full);
  :func:`grid` returns a value per grid.
- ``MHABENCH_DEVICES`` and ``MHABENCH_DTYPES`` (comma lists; defaults depend on the grid)
  and ``MHABENCH_THREADS`` (default 1) become every attention class's ``device``, ``dtype``
  and ``threads`` parameters (:data:`mhabench.bench.axes.WHERE`).

asv's forkserver imports the benchmark modules once and forks every cell from it, so what
is set up here is inherited by each cell instead of paid in each. There are four: the
thread count, the frameworks imported up front, JAX's compilation cache on disk, and a
memory cap. The parameter values the classes share are :mod:`mhabench.bench.axes`'.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TypeVar

from mhabench.core import config, grids
from mhabench.core.config import framework_installed
from mhabench.measure import timing

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
DEVICES = list_from_env("MHABENCH_DEVICES", grid(tiny=["cpu"], quick=["cpu"],
                                                 full=list(config.DEVICES)), config.DEVICES)
DTYPES = list_from_env("MHABENCH_DTYPES", grid(tiny=["float32"], quick=["float32"],
                                               full=list(config.DTYPES)), config.DTYPES)
THREADS = timing.threads_from_env()
CPU = "cpu" in DEVICES
CUDA = "cuda" in DEVICES

# ----- Side effects at import ------------------------------------------------------------------
# cuda asked for on a machine with an NVIDIA driver: CUDA may start in the cells.
_CUDA_HERE = CUDA and os.path.exists("/dev/nvidiactl")

# 1. Threads: torch's count and the CPU affinity XLA sizes its pool from, set before JAX
#    touches a device (as MHABENCH_THREADS says; recorded as the ``threads`` parameter).
timing.configure_process(THREADS)

# 2. Pre-imports: a cell forked from a process that has the frameworks loaded starts
#    without paying their import. Importing jax does not start a device. MHABENCH_PREIMPORT
# names what to import up front (default: both frameworks and, where CUDA cannot start,
# torch's compiler machinery, which otherwise imports on every compiled cell's first
# compile; importing starts no compile worker, so forking after it is safe on the CPU). A
# framework left out is imported by its first cell; mhabench gate, whose rounds each start
# a forkserver for a few cells, names only its cells' frameworks.
# asv's discovery process (``benchmark.py discover``) only lists the classes and forks
# nothing: the default imports none there.
_DISCOVERY = sys.argv[1:2] == ["discover"] and Path(sys.argv[0]).name == "benchmark.py"
# Where CUDA may start, the compiler machinery stays out: importing it with a CUDA build
# of torch starts the CUDA driver in the forkserver, and no forked cell could use the GPU
# ("Cannot re-initialize CUDA in forked subprocess"). tests/test_cuda_fork.py checks it.
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
