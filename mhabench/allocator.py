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
timing entry points call it through :func:`mhabench.timing.configure_process`.
:func:`release_free_heap` hands the free memory back on purpose, which the step-memory
measurement does before it resets the peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys

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
