"""Cold caches on the GPU: overwrite a buffer far larger than L2 before each sample.

A benchmark that calls the same step back to back finds its weights and inputs in the
GPU's L2 (60 MB on an H200) and reads a warm-cache time that no model layer inside a real
network sees. Triton's ``do_bench`` zeroes a 256 MB buffer between calls; FlashInfer times
with a cold L2 too. mhabench does the same, outside the timed region: the asv suite's
``time_step`` setup calls :func:`flush` before every sample of a CUDA cell, in the cell's
own framework, and waits for it, so the flush's kernel never runs into the timed call.

The buffer is :data:`MIN_BYTES` or twice the L2 size, whichever is larger (torch reports
the L2 size; a JAX process does not, and takes :data:`MIN_BYTES`, over 4x an H200's L2).
It is allocated once per process and kept: its memory counts toward the cell's GPU usage,
not toward ``track_step_bytes`` (a separate process).
"""

from __future__ import annotations

from collections.abc import Callable

MIN_BYTES = 256 * 2**20
_flushers: dict[str, Callable[[], None]] = {}


def flush_bytes(l2_bytes: int | None) -> int:
    """The buffer's size for an L2 of ``l2_bytes`` (None: unknown)."""
    return max(MIN_BYTES, 2 * (l2_bytes or 0))


def _torch_flusher() -> Callable[[], None]:
    import torch

    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                 "L2_cache_size", None)
    buffer = torch.empty(flush_bytes(l2), dtype=torch.int8, device="cuda")

    def flush() -> None:
        buffer.zero_()
        torch.cuda.synchronize()

    return flush


def _jax_flusher() -> Callable[[], None]:
    import jax
    import jax.numpy as jnp

    if jax.default_backend() != "gpu":
        raise ValueError(f"JAX's default backend is {jax.default_backend()!r}: the L2 "
                         "flush needs a GPU")
    size = flush_bytes(None)
    # A fresh buffer of zeros per call: XLA writes every byte of it (a broadcast fusion).
    fill = jax.jit(lambda: jnp.zeros((size,), jnp.int8))
    fill().block_until_ready()  # compile now, not before the first sample

    def flush() -> None:
        fill().block_until_ready()

    return flush


def flusher(framework: str) -> Callable[[], None]:
    """The flush of ``framework``'s GPU (built once per process; raises where there is no
    GPU: callers ask only for CUDA cells)."""
    if framework not in _flushers:
        make: dict[str, Callable[[], Callable[[], None]]] = {
            "torch": _torch_flusher, "jax": _jax_flusher}
        if framework not in make:
            raise ValueError(f"framework={framework!r} has no L2 flush; "
                             f"allowed: {', '.join(make)}")
        _flushers[framework] = make[framework]()
    return _flushers[framework]


def flush(framework: str) -> None:
    """Overwrite the GPU's L2 from ``framework`` and wait until done."""
    flusher(framework)()
