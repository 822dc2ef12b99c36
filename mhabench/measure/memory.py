"""The memory a step itself needs, above what was resident before it ran.

asv's ``peakmem_`` is the whole process's maximum RSS: importing torch, jax and flax,
building the model and compiling are hundreds of MB that say nothing about attention.
:func:`step_bytes` measures one call of a prepared step instead:

- CPU (Linux): free what the allocator holds (``malloc_trim``), reset the peak-RSS
  high-water mark (writing 5 to ``/proc/self/clear_refs`` resets VmHWM), run the step, and
  take VmHWM minus the RSS before it.
- CUDA, torch: the caching allocator's peak (``reset_peak_memory_stats``,
  ``max_memory_allocated``) minus what was allocated before the step.
- CUDA, JAX: XLA cannot reset its peak counter, so the compiled step's own buffer
  assignment (``memory_analysis``: temporaries plus outputs) is used.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mhabench.core.config import AttentionConfig, UnavailableError
from mhabench.measure.allocator import release_free_heap

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise UnavailableError(f"{_STATUS} has no {field} line")


def cpu_step_bytes(step: Callable[[], Any]) -> int:
    """Peak RSS growth of one call of ``step`` on this (Linux) process."""
    if not _CLEAR_REFS.exists():
        raise UnavailableError("step memory on the CPU needs Linux's /proc/self/clear_refs")
    release_free_heap()
    _CLEAR_REFS.write_text("5")  # VmHWM := current RSS
    before = _status_kib("VmRSS")
    out = step()
    peak = _status_kib("VmHWM")
    del out
    return max(0, peak - before) * 1024


def step_bytes(config: AttentionConfig, step: Callable[[], Any]) -> int:
    """Bytes one call of ``config``'s prepared ``step`` needs above what was resident."""
    if config.device == "cpu":
        return cpu_step_bytes(step)
    if config.framework == "torch":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = step()
        peak = torch.cuda.max_memory_allocated()
        del out
        return max(0, peak - before)
    compiled = getattr(step, "compiled", None)
    analysis = compiled.memory_analysis() if compiled is not None else None
    if analysis is None:
        raise UnavailableError(f"{config.id}: XLA gives no memory analysis for this step")
    return int(analysis.temp_size_in_bytes + analysis.output_size_in_bytes)
