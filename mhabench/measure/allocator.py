"""The C allocator of a timing process: freed memory stays in the process between steps.

With glibc's defaults, a buffer above the mmap threshold (the attention map, the scores)
is mapped fresh on every call and unmapped when freed, and the heap top is trimmed back
to the kernel. The next call then page-faults on every 4 KiB of it while the kernel
zeroes the pages: measured here at b=2, n=512, d=256, h=16 (1 thread), torch batched took
24,579 minor faults a step (96 MiB) and 93-108 ms; with freed memory kept it took 0 faults
and 34-41 ms; JAX fused went from 110-150 ms to 50-59 ms. How many faults a step takes
also depends on the allocator's history in that process (the loop backend took 3,700 to
9,000), which made asv's per-process samples bimodal. That is the operating system's
cost, not attention's, and a caching allocator (jemalloc, tcmalloc, torch's CUDA
allocator) never pays it in a steady state.

:func:`retain_freed_memory` sets glibc's options so that every allocation comes from one
heap that is never trimmed: one arena, no mmap'd chunks, no automatic trim. It must run
before the frameworks start their threads (each thread would take its own arena); the
timing entry points call it through :func:`mhabench.measure.timing.configure_process`.
:func:`release_free_heap` hands the free memory back on purpose, which the step-memory
measurement does before it resets the peak.

Kept memory still has to be touched once. The heap reaches its high-water mark over the
first few calls (fragmentation puts a buffer above the previous top now and then): at the
size above, torch batched faulted 8,192-24,576 pages in 1 to 3 of calls 2-8 and none after.
:func:`warm_until_settled` keeps warming a step until its calls stop faulting, so that
growth lands in the warm-up and not in the timed samples.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys
import time
from collections.abc import Callable
from typing import Any

# mallopt parameters (glibc's malloc.h); values are C ints, and a trim threshold of -1
# turns trimming off (mallopt(3)).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
RETAIN = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1), (M_TOP_PAD, 64 << 20))


@functools.lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    # musl and others have no mallopt/malloc_trim: nothing to set.
    if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None
    return libc


@functools.lru_cache(maxsize=1)
def retain_freed_memory() -> bool:
    """Keep freed memory in this process (see the module docstring); True when set."""
    libc = _glibc()
    if libc is None:
        return False
    return all(libc.mallopt(option, value) == 1 for option, value in RETAIN)


def release_free_heap() -> None:
    """Collect Python garbage and return the allocator's free memory to the kernel."""
    gc.collect()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def minor_faults() -> int:
    """Minor page faults this process has taken so far (0 where the OS does not count)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# A call is quiet when it touched at most 1 MiB of fresh 4 KiB pages.
QUIET_PAGES = 256


def warm_until_settled(call: Callable[[], Any], quiet_calls: int = 2, max_calls: int = 10,
                       max_seconds: float = 0.3) -> int:
    """Call ``call`` until ``quiet_calls`` calls in a row take at most :data:`QUIET_PAGES`
    page faults each; at most ``max_calls`` calls or ``max_seconds`` (a slow step's
    faults are a small part of it). Returns the number of calls made."""
    start, quiet, calls = time.perf_counter(), 0, 0
    while (quiet < quiet_calls and calls < max_calls
           and time.perf_counter() - start < max_seconds):
        before = minor_faults()
        call()
        calls += 1
        quiet = quiet + 1 if minor_faults() - before <= QUIET_PAGES else 0
    return calls
