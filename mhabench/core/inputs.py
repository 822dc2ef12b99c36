"""Framework-neutral weights and inputs (numpy), so both frameworks see the same numbers.

Weights use PyTorch's ``nn.Linear`` layout, ``(out_features, in_features)``:
``W_q (h p, d)``, ``W_k`` and ``W_v (h_kv p, d)``, ``W_o (d, h p)`` (``h p = d`` in the
chapter's split). Output feature
``i*p + j`` of ``W_q`` feeds head ``i`` (the order ``transpose_qkv`` reads them in), and
input features ``i*p ... (i+1)*p - 1`` of ``W_o`` receive head ``i``'s output.
"""

from __future__ import annotations

import numpy as np

from mhabench.core.config import AttentionConfig

WEIGHT_NAMES = ("W_q", "W_k", "W_v", "W_o")


def init_weights(config: AttentionConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights with variance 1/fan-in (keeps activations of order one)."""
    rng = np.random.default_rng(seed)
    d, q_width, kv_width = config.d, config.query_width, config.kv_width
    shapes = {"W_q": (q_width, d), "W_k": (kv_width, d), "W_v": (kv_width, d),
              "W_o": (d, q_width)}
    return {name: (rng.standard_normal(shape) * (1.0 / np.sqrt(shape[1]))).astype(np.float32)
            for name, shape in shapes.items()}


def make_inputs(config: AttentionConfig, seed: int = 1) -> dict[str, np.ndarray | None]:
    """queries (b, n, d); keys = values (b, m, d); valid_lens (b,) in [1, m] if masked.

    Self-attention returns the very same array for queries, keys and values, so
    implementations can see that one tensor feeds all three. In decode and prefix mode the
    queries are the new token (b, 1, d) and keys = values the m tokens before it.
    """
    rng = np.random.default_rng(seed)
    b, n, m, d = config.batch, config.n, config.m, config.d
    queries = rng.standard_normal((b, n, d)).astype(np.float32)
    if config.cross or config.mode in ("decode", "prefix"):
        source = rng.standard_normal((b, m, d)).astype(np.float32)
    else:
        source = queries
    valid_lens = None
    if config.masked:
        # At least one valid key per row: fully masked rows are undefined for fused kernels.
        valid_lens = rng.integers(max(1, m // 2), m + 1, size=b).astype(np.int32)
    return {"queries": queries, "keys": source, "values": source, "valid_lens": valid_lens}


def make_upstream(config: AttentionConfig, seed: int = 3) -> np.ndarray:
    """The gradient (b, n, d) that a training step receives for the layer's output, as
    from the layers above it; random, so no framework can fold it into a reduction."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((config.batch, config.n, config.d)).astype(np.float32)
