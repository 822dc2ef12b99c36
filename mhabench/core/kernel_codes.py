"""Which attention kernel a config's step actually ran, and whether it writes the map.

"fused" names a call (torch SDPA, ``jax.nn.dot_product_attention``), not a kernel: torch
dispatches SDPA to flash, memory-efficient, cuDNN or the math fallback by dtype, head width,
mask, GQA and dropout, and on XLA:CPU JAX's call is an einsum plus softmax. The kernel
decides whether the (batch, h, n, m) attention map is written to memory, so the cost model
and the report use the kernel, not the backend's name.

:func:`expected_kernel` is a static prediction from the config (used by the cost model
before anything runs: memory budgets). :func:`mhabench.measure.profiler.kernel_detect.detect_kernel`
reads what ran: torch's profiler op names, or the compiled HLO of a JAX step. The asv
suite records the detected kernel per cell as :data:`KERNEL_CODES` (``track_kernel``), so
the results carry it.
"""

from __future__ import annotations

from mhabench.core import backends
from mhabench.core.config import AttentionConfig

# Codes for asv's track_kernel (asv tracks numbers; higher reads as worse): fused kernels
# that never write the map first, then those that do. A fused cell moving from flash to
# math shows as a regression.
KERNEL_CODES = {"flash": 1, "efficient": 2, "cudnn": 3, "tiled": 4, "xla": 6, "math": 7,
                "explicit": 8}
KERNEL_NAMES = {code: name for name, code in KERNEL_CODES.items()}
# Kernels that keep the attention map in registers / on-chip tiles; "tiled" is a backend's
# own code that never writes the whole map (a registered backend with materialises=False).
NON_MATERIALISING = frozenset({"flash", "efficient", "cudnn", "tiled"})


def library_call(config: AttentionConfig) -> bool:
    """Whether the config's attention is one library call (the library picks the kernel)."""
    return backends.get(config.framework, config.backend).library


def own_kernel(config: AttentionConfig) -> str:
    """The code of a backend's own attention (no library call): the map written or not."""
    return "explicit" if backends.get(config.framework, config.backend).materialises \
        else "tiled"


def materialises(kernel: str) -> bool:
    """Whether ``kernel`` writes the whole attention map to memory."""
    if kernel not in KERNEL_CODES:
        raise ValueError(f"kernel={kernel!r} is not known; choose one of "
                         f"{', '.join(KERNEL_CODES)}")
    return kernel not in NON_MATERIALISING


def expected_kernel(config: AttentionConfig) -> str:
    """The kernel ``config``'s step is expected to run, from the config alone.

    Loop and batched backends compute the map with explicit ops. JAX's
    ``dot_product_attention`` (implementation=None) and flax's layer lower to XLA einsum +
    softmax on every device. torch SDPA on the CPU takes its flash kernel unless dropout
    is active in training (then math). On CUDA the rules of torch's dispatcher are
    approximated conservatively: flash for 16-bit, unmasked MHA or GQA with head width a
    multiple of 8 up to 256; efficient for other MHA with a multiple-of-8 head width;
    math otherwise (float32 GQA, head width 4, ...). What ran: ``measure.profiler.kernel_detect``.
    """
    if not library_call(config):
        return own_kernel(config)
    forced = backends.get(config.framework, config.backend).sdpa_kernel
    if forced is not None:
        return forced
    if config.framework == "jax":
        return "xla"
    dropout_active = config.dropout > 0 and config.mode == "train"
    if config.device == "cpu":
        return "math" if dropout_active else "flash"
    p, gqa = config.head_dim, config.kv_heads != config.heads
    aligned = p % 8 == 0 and p <= 256
    if aligned and config.dtype != "float32" and not config.masked:
        return "flash"
    if aligned and not gqa:
        return "efficient"
    return "math"


# What the time model's b*h*n*m term counts, named by whether the kernel writes the map:
# traffic to and from the map, or, where the map stays in tiles (flash, efficient, cuDNN,
# flex, blockwise), the work done per score (softmax, the narrow p = d/h matmuls).
SCORE_TERMS = {True: "map written and read", False: "per-score work (softmax, narrow matmuls)"}


def score_term(kernel: str) -> str:
    """The name of the b*h*n*m term for a step that ran ``kernel``."""
    return SCORE_TERMS[materialises(kernel)]
