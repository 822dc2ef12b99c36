"""Blockwise attention in JAX: an online softmax over key blocks, as flash attention does.

Why: the batched backend writes the whole (b, h, n, m) score map, so its memory grows with
h·n·m. Here a ``lax.scan`` walks the keys in blocks of :data:`BLOCK`, keeping a running
max and running sum per query (float32), so at most one (n, block) tile of scores per head
is live. The backward pass (a ``custom_vjp``) recomputes each tile from the saved
row max and sum instead of storing the tiles, so a training step never holds the map either.

Semantics match the reference (``mhabench.layers.jax.attention.masked_softmax``): keys at or past
``valid_lens`` (and, with ``causal``, past query i's position m - n + i) score
:data:`MASK_VALUE`, not -inf, so a query with no valid key averages all m keys uniformly,
and no gradient flows through a masked score. Keys padded to a whole number of blocks
score -inf (weight 0). Grouped key/value heads are handled by viewing q (b, h, n, p) as
(b, h_kv, g, n, p): query head j reads key/value head j // g, with no repeat of K or V.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from mhabench.core.backends import KEY_BLOCK

# Keys per tile, clamped to m; read at trace time (tests change it). At b=2, n=1024, d=256,
# h=8 on a 1-thread CPU, 64 beat 128 and 256 in 4 interleaved runs (by 3-18%); 32 and 512,
# timed once, were within noise of it. Smaller tiles also hold less. The time model counts
# the padded scores with the same size (mhabench.analysis.prediction.features).
BLOCK = KEY_BLOCK
MASK_VALUE = -1e6  # as the reference's masked_softmax: masked scores stay finite
F32 = jnp.float32


def _tile_scores(qg: jax.Array, kb: jax.Array, start: jax.Array, m: int,
                 valid_lens: jax.Array | None, causal: bool, scale: float
                 ) -> tuple[jax.Array, jax.Array]:
    """Scaled, masked float32 scores (b, h_kv, g, n, block) of the keys from ``start`` on,
    and where a masked (not padded) key's score was replaced (the gradient stops there)."""
    n, block = qg.shape[3], kb.shape[2]
    s = jnp.einsum("bkgnp,bkmp->bkgnm", qg, kb, preferred_element_type=F32)
    s = s * scale
    pos = start + jnp.arange(block)  # key positions of this tile
    keep = jnp.ones((1, 1, 1, 1, block), bool)
    if valid_lens is not None:
        lens = valid_lens.reshape(valid_lens.shape[0], 1, 1, -1, 1)  # (b, 1, 1, 1 or n, 1)
        keep = keep & (pos < lens)
    if causal:
        keep = keep & (pos <= jnp.arange(m - n, m)[:, None])
    s = jnp.where(keep, s, MASK_VALUE)
    return jnp.where(pos < m, s, -jnp.inf), keep


def _blocks(x: jax.Array, block: int) -> tuple[jax.Array, int]:
    """``x`` (b, h_kv, m, p) padded with zero keys to a multiple of ``block``; the count."""
    count = -(-x.shape[2] // block)
    pad = count * block - x.shape[2]
    return (jnp.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0))) if pad else x), count


def _forward(qg, k, v, valid_lens, causal, block, scale):
    """Output (b, h_kv, g, n, p) in float32 and each query's score max and sum of
    exp(score - max), apart: a log-sum-exp of -1e6 + log(m) would round away log(m)."""
    m = k.shape[2]
    kp, count = _blocks(k, block)
    vp, _ = _blocks(v, block)
    shape = qg.shape[:-1]

    def step(carry, start):
        run_max, run_sum, acc = carry
        kb = lax.dynamic_slice_in_dim(kp, start, block, axis=2)
        vb = lax.dynamic_slice_in_dim(vp, start, block, axis=2)
        s, _ = _tile_scores(qg, kb, start, m, valid_lens, causal, scale)
        new_max = jnp.maximum(run_max, s.max(-1))  # finite: tile 0 holds no padding
        rescale = jnp.exp(run_max - new_max)
        w = jnp.exp(s - new_max[..., None])
        run_sum = run_sum * rescale + w.sum(-1)
        acc = acc * rescale[..., None] + jnp.einsum(
            "bkgnm,bkmp->bkgnp", w.astype(v.dtype), vb, preferred_element_type=F32)
        return (new_max, run_sum, acc), None

    init = (jnp.full(shape, -jnp.inf, F32), jnp.zeros(shape, F32),
            jnp.zeros(qg.shape, F32))
    (run_max, run_sum, acc), _ = lax.scan(step, init, jnp.arange(count) * block)
    return acc / run_sum[..., None], (run_max, run_sum)


@partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _attend(qg, k, v, valid_lens, causal, block, scale):
    out, _ = _forward(qg, k, v, valid_lens, causal, block, scale)
    return out.astype(qg.dtype)


def _attend_fwd(qg, k, v, valid_lens, causal, block, scale):
    out, stats = _forward(qg, k, v, valid_lens, causal, block, scale)
    out = out.astype(qg.dtype)
    return out, (qg, k, v, valid_lens, out, stats)


def _attend_bwd(causal, block, scale, residuals, d_out):
    """Flash attention's backward: per tile, recompute the weights from the saved max and
    sum, accumulate dq, and emit that tile's dk and dv."""
    qg, k, v, valid_lens, out, (run_max, run_sum) = residuals
    m, p = k.shape[2], k.shape[3]
    kp, count = _blocks(k, block)
    vp, _ = _blocks(v, block)
    d_out = d_out.astype(F32)
    delta = (d_out * out.astype(F32)).sum(-1)  # (b, h_kv, g, n): sum_j w_j dp_j

    def step(dq, start):
        kb = lax.dynamic_slice_in_dim(kp, start, block, axis=2)
        vb = lax.dynamic_slice_in_dim(vp, start, block, axis=2)
        s, keep = _tile_scores(qg, kb, start, m, valid_lens, causal, scale)
        w = jnp.exp(s - run_max[..., None]) / run_sum[..., None]  # 0 on padding
        dv = jnp.einsum("bkgnm,bkgnp->bkmp", w, d_out)
        dw = jnp.einsum("bkgnp,bkmp->bkgnm", d_out, vb, preferred_element_type=F32)
        ds = jnp.where(keep, w * (dw - delta[..., None]), 0.0) * scale
        dq = dq + jnp.einsum("bkgnm,bkmp->bkgnp", ds, kb, preferred_element_type=F32)
        dk = jnp.einsum("bkgnm,bkgnp->bkmp", ds, qg, preferred_element_type=F32)
        return dq, (dk, dv)

    dq, (dk, dv) = lax.scan(step, jnp.zeros(qg.shape, F32), jnp.arange(count) * block)

    def unblock(x: jax.Array, like: jax.Array) -> jax.Array:
        # (count, b, h_kv, block, p) -> (b, h_kv, count * block, p), padding cut off
        x = jnp.moveaxis(x, 0, 2).reshape(*like.shape[:2], count * block, p)
        return x[:, :, :m].astype(like.dtype)

    return dq.astype(qg.dtype), unblock(dk, k), unblock(dv, v), None


_attend.defvjp(_attend_fwd, _attend_bwd)


def blockwise_attention(q: jax.Array, k: jax.Array, v: jax.Array,
                        valid_lens: jax.Array | None, causal: bool = False,
                        block: int | None = None, scale: float | None = None) -> jax.Array:
    """Attention of q (b, h, n, p) over k, v (b, h_kv, m, p) -> (b, h, n, p) in q's dtype;
    ``valid_lens`` None, (b,) or (b, n); ``block`` keys per tile (default :data:`BLOCK`);
    scores times ``scale`` (None: 1 / sqrt(p))."""
    b, h, n, p = q.shape
    h_kv, m = k.shape[1], k.shape[2]
    block = min(BLOCK if block is None else block, m)
    scale = 1.0 / math.sqrt(p) if scale is None else float(scale)
    qg = q.reshape(b, h_kv, h // h_kv, n, p)  # query head j = kv head j // g, slot j % g
    out = _attend(qg, k, v, valid_lens, bool(causal), block, scale)
    return out.reshape(b, h, n, p)
