"""This machine's roofline: a matmul and a streaming copy of known size, per framework,
device and dtype. The asv calibration benchmarks time the steps built here; the report
turns those times into FLOP/s and bytes/s with :func:`matmul_flops` and :func:`copy_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mhabench.core.config import DTYPE_BYTES, AttentionConfig
from mhabench.measure.timing import check_available, float32_matmul_precision

# Problem sizes per device and grid: large enough to reach the device's peak (an H200 needs
# an 8192 matmul and a copy far beyond its 60 MB L2), small enough for a 2-core CPU.
MATMUL_SIZE = {"cpu": {"tiny": 256, "quick": 1024, "full": 2048},
               "cuda": {"tiny": 1024, "quick": 8192, "full": 8192}}
COPY_MIB = {"cpu": {"tiny": 8, "quick": 64, "full": 256},
            "cuda": {"tiny": 64, "quick": 2048, "full": 2048}}


def matmul_flops(size: int) -> int:
    """FLOPs of one (size, size) @ (size, size) product (a multiply-add is 2 FLOPs)."""
    return 2 * size**3


def copy_bytes(mib: int) -> int:
    """Bytes moved by one streaming pass over ``mib`` MiB: read it once, write it once."""
    return 2 * mib * 2**20


def _check(framework: str, device: str, dtype: str) -> None:
    # The one availability check (framework installed, GPU present); the attention shape
    # of this config is irrelevant, its framework/device/dtype are validated.
    check_available(AttentionConfig(framework=framework, device=device, dtype=dtype))


def _elements(mib: int, dtype: str) -> int:
    return mib * 2**20 // DTYPE_BYTES[dtype]


def make_matmul(framework: str, device: str, dtype: str, size: int) -> Callable[[], Any]:
    """A warmed-up, synchronising step computing one ``size``^3 matmul."""
    _check(framework, device, dtype)
    a = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    if framework == "torch":
        return _torch_step(lambda x: x @ x, a, device, dtype)
    return _jax_step(lambda x: x @ x, a, device, dtype)


def make_copy(framework: str, device: str, dtype: str, mib: int) -> Callable[[], Any]:
    """A warmed-up, synchronising step that reads ``mib`` MiB and writes ``mib`` MiB
    (x + 1 into a fresh buffer: a copy that no compiler can elide)."""
    _check(framework, device, dtype)
    a = np.zeros(_elements(mib, dtype), dtype=np.float32)
    if framework == "torch":
        import torch

        out = torch.empty(a.shape, device=device, dtype=getattr(torch, dtype))
        return _torch_step(lambda x: torch.add(x, 1, out=out), a, device, dtype)
    return _jax_step(lambda x: x + 1, a, device, dtype)


def _torch_step(fn: Callable, a: np.ndarray, device: str, dtype: str) -> Callable[[], Any]:
    import torch

    float32_matmul_precision("torch")
    x = torch.from_numpy(a).to(device=device, dtype=getattr(torch, dtype))

    def step() -> Any:
        with torch.inference_mode():
            out = fn(x)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    step()
    return step


def _jax_step(fn: Callable, a: np.ndarray, device: str, dtype: str) -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp

    from mhabench.layers.jax.steps import jax_device

    x = jax.device_put(a.astype(jnp.dtype(dtype)), jax_device(device))
    with float32_matmul_precision("jax"):
        compiled = jax.jit(fn).lower(x).compile()

    def step() -> Any:
        return jax.block_until_ready(compiled(x))

    step()
    return step
