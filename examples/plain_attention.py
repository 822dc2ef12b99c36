"""A user's own attention as an mhabench backend: scaled dot-product attention written out
for both frameworks, registered as "plain". Load it with ``MHABENCH_BACKENDS=plain_attention``
(this folder on ``PYTHONPATH``; ``ASV_PYTHONPATH`` for asv) or an entry point in your
package's ``pyproject.toml``::

    [project.entry-points."mhabench.backends"]
    plain = "plain_attention"

Each function takes projected heads: q (b, h, n, p), k and v (b, h_kv, m, p), valid_lens
None, (b,) or (b, n); with ``causal=True`` query i of n sits at key position m - n + i;
``scale`` multiplies the scores (None: 1/sqrt(p); mhabench passes it only for a model
whose config sets another, as Gemma's do; a function without the keyword runs every other
cell). It returns (b, h, n, p). ``gqa=False``: mhabench repeats each key/value head for
its query heads before the call.
"""

import math

from mhabench.api import register_attention


def keep(n, m, valid_lens, causal, xp):
    """Boolean (b or 1, 1, n or 1, m) of the keys each query may see, or None."""
    mask = None
    positions = xp.arange(m)
    if valid_lens is not None:
        lens = valid_lens[:, None, None] if valid_lens.ndim == 1 else valid_lens[:, :, None]
        mask = positions[None, None, :] < lens
    if causal:
        below = positions[None, None, :] <= xp.arange(m - n, m)[None, :, None]
        mask = below if mask is None else mask & below
    return None if mask is None else mask[:, None]


def torch_attend(q, k, v, valid_lens, causal=False, scale=None):
    import torch

    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    mask = keep(q.shape[2], k.shape[2], valid_lens, causal, torch)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e6)
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def jax_attend(q, k, v, valid_lens, causal=False, scale=None):
    import jax
    import jax.numpy as jnp

    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ jnp.swapaxes(k, -1, -2) * scale
    mask = keep(q.shape[2], k.shape[2], valid_lens, causal, jnp)
    if mask is not None:
        scores = jnp.where(mask, scores, -1e6)
    return jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype) @ v


register_attention("plain", "torch", torch_attend, gqa=False,
                   summary="scaled dot-product attention written out (example plug-in)")
register_attention("plain", "jax", jax_attend, gqa=False,
                   summary="scaled dot-product attention written out (example plug-in)")
