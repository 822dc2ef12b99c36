"""Which attention kernel one call of a prepared step actually ran: torch's profiler op
names, or a JAX step's compiled HLO. The static side (the codes asv tracks, the kernel a
config is expected to run, whether a kernel writes the map) is :mod:`mhabench.core.kernel_codes`,
whose names a benchmark reads from here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mhabench.core.config import AttentionConfig
from mhabench.core.kernel_codes import (  # noqa: F401 - re-exported beside detect_kernel
    KERNEL_CODES,
    KERNEL_NAMES,
    expected_kernel,
    library_call,
    materialises,
    own_kernel,
)

# torch op name (as the profiler lists it) -> kernel. Order matters: first match wins.
_TORCH_OPS = (
    ("aten::_scaled_dot_product_flash_attention", "flash"),  # also ..._for_cpu
    ("aten::_flash_attention_forward", "flash"),
    ("aten::_scaled_dot_product_efficient_attention", "efficient"),
    ("aten::_efficient_attention_forward", "efficient"),
    ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
    ("aten::_cudnn_attention_forward", "cudnn"),
    ("aten::_scaled_dot_product_attention_math", "math"),
)


def kernel_from_torch_ops(names: Any) -> str | None:
    """The SDPA kernel among profiler op ``names``, or None if no SDPA op ran."""
    names = list(names)
    for prefix, kernel in _TORCH_OPS:
        if any(name.startswith(prefix) for name in names):
            return kernel
    return None


def kernel_from_hlo(hlo_text: str) -> str:
    """cuDNN if the compiled HLO calls a cuDNN fused-attention custom call, else XLA."""
    return "cudnn" if "__cudnn$fmha" in hlo_text or "cudnn$fmha" in hlo_text else "xla"


def detect_kernel(config: AttentionConfig, step: Callable[[], Any]) -> str:
    """The attention kernel that one call of the prepared ``step`` of ``config`` ran."""
    if not library_call(config):
        return own_kernel(config)
    if config.framework == "jax":
        compiled = getattr(step, "compiled", None)
        if compiled is None:
            raise ValueError(f"{config.id}: the step carries no compiled JAX function")
        return kernel_from_hlo(compiled.as_text())
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    found = kernel_from_torch_ops(event.name for event in prof.events())
    # No SDPA op at all: the layer computed attention with explicit ops (the map is written).
    return found or "math"
