"""The C allocator of a timing process: freed memory stays in the process between steps.

With glibc's defaults, a buffer above the mmap threshold (the attention map, the scores)
is mapped fresh on every call and unmapped when freed, and the heap top is trimmed back
to the kernel. The next call then page-faults on every 4 KiB of it while the kernel
zeroes the pages, which can take longer than the attention itself, and how many faults a
step takes depends on the allocator's history in that process, which makes asv's
per-process samples bimodal (docs/research.md has the figures). That is the operating
system's cost, not attention's, and a caching allocator (jemalloc, tcmalloc, torch's CUDA
allocator) never pays it in a steady state.

:func:`retain_freed_memory` sets glibc's options so that every allocation comes from one
heap that is never trimmed: one arena, no mmap'd chunks, no automatic trim. It must run
before the frameworks start their threads (each thread would take its own arena); the
timing entry points call it through :func:`mhabench.measure.timing.configure_process`.
:func:`release_free_heap` hands the free memory back on purpose, which the step-memory
measurement does before it resets the peak. :func:`fresh_large_blocks` switches the heap to
the opposite policy for one measured call: every block of 128 KiB or more comes from fresh
pages and goes back to the kernel when freed, so the peak RSS of that call is the peak of
its live large blocks, whatever the heap held before (``mhabench.measure.memory``).

Kept memory still has to be touched once. The heap reaches its high-water mark over the
first few calls (fragmentation puts a buffer above the previous top now and then), so
:func:`warm_until_settled` keeps warming a step until its calls stop faulting, and that
growth lands in the warm-up and not in the timed samples.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

# mallopt parameters (glibc's malloc.h); values are C ints, and a trim threshold of -1
# turns trimming off (mallopt(3)).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -3, -4, -8
RETAIN = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1), (M_TOP_PAD, 64 << 20))
# glibc's own defaults for what fresh_large_blocks changes, restored where RETAIN is not set.
DEFAULTS = ((M_MMAP_MAX, 65536), (M_TOP_PAD, 128 << 10))
LARGE = 128 << 10  # glibc's default mmap threshold: "large" blocks from here up
_IS_MMAPPED = 0x2  # bit of a chunk's size field (the word before the pointer malloc returns)
_WORD = ctypes.sizeof(ctypes.c_size_t)
_RETAINING: list[bool] = []  # [True] once retain_freed_memory has set RETAIN


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


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@functools.lru_cache(maxsize=1)
def _glibc_malloc() -> ctypes.CDLL | None:
    """glibc with malloc, free and mallinfo2 typed for pointers (None elsewhere)."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    libc.mallinfo2.restype = _MallInfo2
    return libc


def can_isolate_large_blocks() -> bool:
    """Whether :func:`fresh_large_blocks` works here (glibc 2.33 or newer)."""
    return _glibc_malloc() is not None


@contextlib.contextmanager
def fresh_large_blocks() -> Iterator[None]:
    """While inside: every block of :data:`LARGE` bytes or more comes from fresh pages
    (mmap) and goes back to the kernel when freed (munmap), whatever the heap held before.

    glibc maps a large block only when no free heap chunk and not the top of the heap can
    hold it, so free chunks of that size are plugged first: taken with ``malloc``, largest
    first, until a request of that size comes back mapped. The plugs are never written
    (their pages stay out of RSS) and are freed on exit, when this process's policy
    (``RETAIN`` or glibc's defaults) comes back. Free memory is released first
    (:func:`release_free_heap`), so small blocks fault fresh pages too.
    """
    libc = _glibc_malloc()
    if libc is None:
        raise RuntimeError("fresh_large_blocks needs glibc's malloc (mallinfo2)")
    release_free_heap()
    plugs: list[int] = []
    try:
        for option, value in ((M_TOP_PAD, 0), (M_MMAP_THRESHOLD, LARGE), (M_MMAP_MAX, 1 << 24)):
            libc.mallopt(option, value)
        size = 1 << max(LARGE.bit_length(), libc.mallinfo2().arena.bit_length())
        while size >= LARGE:
            block = libc.malloc(size)
            header = block and ctypes.c_size_t.from_address(block - _WORD).value
            if block and not header & _IS_MMAPPED:
                plugs.append(block)  # a free heap chunk (or the top): keep it out of reach
                continue
            libc.free(block)  # mapped (or NULL): nothing of this size left in the heap
            size //= 2
        yield
    finally:
        for block in plugs:
            libc.free(block)
        for option, value in RETAIN if _RETAINING else DEFAULTS:
            libc.mallopt(option, value)


def held_bytes() -> int:
    """Bytes the C allocator has handed out and not had back (heap and mapped blocks)."""
    libc = _glibc_malloc()
    if libc is None:
        return 0
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def wait_for_frees(polls: int = 3, interval_s: float = 0.002, max_s: float = 0.5) -> None:
    """Return once the allocator's held bytes stay the same for ``polls`` polls in a row
    (at most ``max_s``): XLA:CPU frees a step's temporaries on its own thread after the
    step's outputs are ready, so they may outlive the call that made them."""
    start, last, same = time.perf_counter(), held_bytes(), 0
    while same < polls and time.perf_counter() - start < max_s:
        time.sleep(interval_s)
        now = held_bytes()
        same = same + 1 if now == last else 0
        last = now


@functools.lru_cache(maxsize=1)
def retain_freed_memory() -> bool:
    """Keep freed memory in this process (see the module docstring); True when set."""
    libc = _glibc()
    if libc is None:
        return False
    if all(libc.mallopt(option, value) == 1 for option, value in RETAIN):
        _RETAINING.append(True)
    return bool(_RETAINING)


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
