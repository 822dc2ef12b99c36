"""The memory a step itself needs: the live peak of the step's own allocations.

asv's ``peakmem_`` is the whole process's maximum RSS: importing torch, jax and flax,
building the model and compiling are hundreds of MB that say nothing about attention.
:func:`step_bytes` reads one (untimed) call of a prepared step instead, so that one cell
reads the same bytes in every process (docs/measurement.md, ``track_step_bytes``):

- torch on the CPU: the peak of the bytes the step allocated and had not yet freed, from
  torch's profiler memory events (frees of memory allocated before the step left out).
- JAX on the CPU: the larger of two floors. The C allocator's live peak: for the one call
  every block of 128 KiB or more comes from fresh pages and goes back to the kernel when
  freed (:func:`mhabench.measure.allocator.fresh_large_blocks`), and the reading is the
  call's peak-RSS growth. And XLA's buffer plan (``memory_analysis``), which misses the
  buffers of XLA:CPU's YNNPACK fusions, where the heap reading sees the planned temporaries
  or not by what ran earlier in the process. A step with no compiled function (a
  plug-in's) has no plan: the heap reading alone.
- torch on CUDA: the caching allocator's peak (``reset_peak_memory_stats``,
  ``max_memory_allocated``) minus what was allocated before the step.
- JAX on CUDA: XLA's buffer plan (temporaries plus outputs, less outputs written in place
  of donated inputs); XLA cannot reset a peak counter.
- torch's profiler busy: the C allocator's live peak; no glibc: the RSS reading below;
  either with a warning.

:func:`rss_step_bytes` is the operating system's view, kept as a cross-check (asv's
``track_step_rss_bytes``): ``malloc_trim``, reset the peak-RSS high-water mark (writing 5
to ``/proc/self/clear_refs``), run the step on the heap as the timing process keeps it, and
take VmHWM minus the RSS before it. It also counts freed pages the C allocator did not
reuse, which depends on the heap's history in that process, and memory outside torch's
allocator (BLAS and oneDNN scratch).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mhabench.core.config import AttentionConfig, UnavailableError
from mhabench.measure.allocator import (
    can_isolate_large_blocks,
    fresh_large_blocks,
    release_free_heap,
    wait_for_frees,
)

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
# StepMemory.source: where a reading came from.
TORCH_PROFILER, HEAP, CUDA_ALLOCATOR, XLA_BUFFERS, RSS = (
    "torch profiler", "C allocator, large blocks on fresh pages", "CUDA allocator",
    "XLA buffer assignment", "RSS high-water")


@dataclass(frozen=True)
class StepMemory:
    """One step's memory reading: bytes, and where they came from (``source``)."""

    bytes: int
    source: str


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise UnavailableError(f"{_STATUS} has no {field} line")


def _rss_growth(step: Callable[[], Any]) -> int:
    if not _CLEAR_REFS.exists():
        raise UnavailableError("step memory on the CPU needs Linux's /proc/self/clear_refs")
    _CLEAR_REFS.write_text("5")  # VmHWM := current RSS
    before = _status_kib("VmRSS")
    out = step()
    peak = _status_kib("VmHWM")
    del out
    return max(0, peak - before) * 1024


def cpu_rss_bytes(step: Callable[[], Any]) -> int:
    """Peak RSS growth of one call of ``step`` on this (Linux) process, its heap as it is."""
    release_free_heap()
    return _rss_growth(step)


def heap_live_peak(step: Callable[[], Any]) -> int:
    """Peak RSS growth of one call of ``step`` with every large block on fresh pages that
    go back when freed: the live peak of the call's allocations, whatever the heap's history
    (small blocks, under 128 KiB, still land in the heap's holes)."""
    with fresh_large_blocks():
        step()  # small blocks settle on pages this policy's calls fault anyway
        wait_for_frees()  # its temporaries too, or the measured call frees them (less)
        return _rss_growth(step)


def rss_step_bytes(config: AttentionConfig, step: Callable[[], Any]) -> int:
    """The RSS cross-check of one call of ``config``'s prepared ``step`` (CPU cells only:
    the host's RSS says nothing about a GPU's memory)."""
    if config.device != "cpu":
        raise UnavailableError(f"{config.id}: the RSS reading is for CPU cells only")
    return cpu_rss_bytes(step)


def _events(roots: list[Any]) -> Iterator[Any]:
    stack = list(roots)
    while stack:
        event = stack.pop()
        yield event
        stack.extend(event.children)


def torch_live_peak(step: Callable[[], Any]) -> int:
    """Peak bytes of torch CPU allocations made by one call of ``step`` and still live."""
    from torch._C._profiler import _EventType
    from torch.autograd import profiler

    # autograd's profiler, not torch.profiler's wrapper, which imports torch._inductor
    with profiler.profile(use_cpu=True, profile_memory=True) as prof:
        out = step()
    del out
    allocations = sorted(
        (e for e in _events(prof.kineto_results.experimental_event_tree())
         if e.tag == _EventType.Allocation and e.extra_fields.device.type == "cpu"),
        key=lambda e: e.start_time_ns)  # stable: one thread's events keep their order
    live: dict[int, int] = {}  # address -> bytes, for blocks this step allocated
    now = peak = 0
    for event in allocations:
        fields = event.extra_fields
        if fields.alloc_size > 0:
            live[fields.ptr] = fields.alloc_size
            now += fields.alloc_size
            peak = max(peak, now)
        else:  # a free; of a block allocated before the step when its address is unknown
            now -= live.pop(fields.ptr, 0)
    return peak


def xla_buffer_bytes(step: Callable[[], Any]) -> int | None:
    """Temporaries plus outputs of the compiled step (``step.compiled``, as mhabench's JAX
    steps expose it), less the outputs that alias donated inputs (a decode step's KV cache,
    written in place, is not new memory); None when the step has no compiled function or
    XLA no analysis."""
    compiled = getattr(step, "compiled", None)
    try:
        analysis = compiled.memory_analysis() if compiled is not None else None
    except (AttributeError, NotImplementedError, RuntimeError):
        analysis = None
    if analysis is None:
        return None
    return int(analysis.temp_size_in_bytes + analysis.output_size_in_bytes
               - getattr(analysis, "alias_size_in_bytes", 0))


def step_memory(config: AttentionConfig, step: Callable[[], Any]) -> StepMemory:
    """The live peak of one call of ``config``'s prepared ``step`` (see the module
    docstring), and its source; falls back to the RSS reading with a warning."""
    if config.device != "cpu":
        return _device_memory(config, step)
    if config.framework == "torch":
        try:
            return StepMemory(torch_live_peak(step), TORCH_PROFILER)
        except RuntimeError as err:  # another profiler already running, no kineto
            warnings.warn(f"{config.id}: torch's profiler could not run ({err}); step "
                          "memory is the C allocator's live peak", RuntimeWarning, stacklevel=2)
    if can_isolate_large_blocks():
        heap = heap_live_peak(step)
        plan = xla_buffer_bytes(step) if config.framework == "jax" else None
        # XLA:CPU's planned temporaries reach the heap reading only now and then (see the
        # module docstring); they are memory the step needs either way
        if plan is not None and plan > heap:
            return StepMemory(plan, XLA_BUFFERS)
        return StepMemory(heap, HEAP)
    warnings.warn(f"{config.id}: step memory is the RSS high-water reading, not the live "
                  "peak: the C allocator is not glibc's", RuntimeWarning, stacklevel=2)
    return StepMemory(cpu_rss_bytes(step), RSS)


def _device_memory(config: AttentionConfig, step: Callable[[], Any]) -> StepMemory:
    if config.framework == "torch":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = step()
        peak = torch.cuda.max_memory_allocated()
        del out
        return StepMemory(max(0, peak - before), CUDA_ALLOCATOR)
    found = xla_buffer_bytes(step)
    if found is None:
        raise UnavailableError(f"{config.id}: XLA gives no memory analysis for this step")
    return StepMemory(found, XLA_BUFFERS)


def step_bytes(config: AttentionConfig, step: Callable[[], Any]) -> int:
    """Bytes one call of ``config``'s prepared ``step`` allocates at its live peak."""
    return step_memory(config, step).bytes
