"""JAX / Flax NNX multi-head attention with the same backends and weights as the torch one.

Weights come from ``mhabench.inputs`` in torch's ``(out, in)`` layout; an ``nnx.Linear``
kernel is ``(in, out)``, so loading transposes. Keys and values live as
``(b, m, h_kv, p)``, the layout ``jax.nn.dot_product_attention`` takes, which groups
query heads over fewer key/value heads natively. Forward functions jit with static shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mhabench.config import AttentionConfig
from mhabench.inputs import init_weights, make_inputs

# Named scopes (never nested) label the regions in traces and in the compiled HLO's
# op_name metadata; XLA may still fuse neighbouring regions into one kernel.
REGIONS = ("projections", "scores", "softmax", "mixing", "output", "attention")
region = jax.named_scope

MASK_VALUE = -1e6  # as in the chapter's masked_softmax: masked rows stay finite


def masked_softmax(scores: jax.Array, valid_lens: jax.Array | None) -> jax.Array:
    """Softmax over the last axis of ``scores (B, n, m)``; valid_lens (B,) or (B, n)."""
    if valid_lens is None:
        return jax.nn.softmax(scores, axis=-1)
    lens = valid_lens[:, None, None] if valid_lens.ndim == 1 else valid_lens[:, :, None]
    keep = jnp.arange(scores.shape[-1])[None, None, :] < lens
    return jax.nn.softmax(jnp.where(keep, scores, MASK_VALUE), axis=-1)


def key_mask(valid_lens: jax.Array, m: int) -> jax.Array:
    """Boolean mask (b, 1, n or 1, m), True where a query may attend."""
    one_per_row = valid_lens.ndim == 1
    lens = valid_lens[:, None, None, None] if one_per_row else valid_lens[:, None, :, None]
    return jnp.arange(m)[None, None, None, :] < lens


class MultiHeadAttention(nnx.Module):
    """Multi-head attention; returns the output only (the chapter's NNX version also
    returns the weights, which fused kernels never form)."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None,
                 backend: str = "batched", dropout: float = 0.0, *,
                 dtype: Any = jnp.float32, rngs: nnx.Rngs | None = None) -> None:
        kv_heads = heads if kv_heads is None else kv_heads
        if d % heads or heads % kv_heads:
            raise ValueError(f"need heads | d and kv_heads | heads, got d={d}, "
                             f"heads={heads}, kv_heads={kv_heads}")
        if backend not in ("loop", "batched", "fused"):
            raise ValueError(f"backend={backend!r}; choose loop, batched or fused")
        if backend == "fused" and dropout:
            raise ValueError("jax.nn.dot_product_attention has no dropout; use dropout=0 "
                             "or the loop/batched backend")
        rngs = nnx.Rngs(params=0, dropout=1) if rngs is None else rngs
        self.d, self.heads, self.kv_heads, self.backend = d, heads, kv_heads, backend
        self.p = d // heads
        kv_width = kv_heads * self.p
        lin = dict(use_bias=False, dtype=dtype, param_dtype=dtype, rngs=rngs)
        self.W_q = nnx.Linear(d, d, **lin)
        self.W_k = nnx.Linear(d, kv_width, **lin)
        self.W_v = nnx.Linear(d, kv_width, **lin)
        self.W_o = nnx.Linear(d, d, **lin)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def project_kv(self, keys: jax.Array, values: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Projected keys and values, each (b, m, h_kv, p): what a KV cache stores."""
        b, m = keys.shape[:2]
        with region("projections"):
            if self.backend == "loop":
                cols = [slice(j * self.p, (j + 1) * self.p) for j in range(self.kv_heads)]
                k = jnp.stack([keys @ self.W_k.kernel[...][:, c] for c in cols], axis=2)
                v = jnp.stack([values @ self.W_v.kernel[...][:, c] for c in cols], axis=2)
                return k, v
            # (b, m, h_kv * p) -> (b, m, h_kv, p)
            return (self.W_k(keys).reshape(b, m, self.kv_heads, self.p),
                    self.W_v(values).reshape(b, m, self.kv_heads, self.p))

    def attend(self, queries: jax.Array, k: jax.Array, v: jax.Array,
               valid_lens: jax.Array | None = None) -> jax.Array:
        """Output (b, n, d) of queries (b, n, d) over projected k, v (b, m, h_kv, p)."""
        if self.backend == "loop":
            return self._attend_loop(queries, k, v, valid_lens)
        b, n = queries.shape[:2]
        with region("projections"):
            q = self.W_q(queries).reshape(b, n, self.heads, self.p)  # (b, n, h, p)
        if self.backend == "fused":
            out = self._sdpa(q, k, v, valid_lens)
        else:
            out = self._attend_batched(q, k, v, valid_lens)
        with region("output"):
            return self.W_o(out.reshape(b, n, self.d))

    def __call__(self, queries: jax.Array, keys: jax.Array, values: jax.Array,
                 valid_lens: jax.Array | None = None) -> jax.Array:
        if self.backend == "fused" and queries is keys and keys is values:
            return self._fused_self_attention(queries, valid_lens)
        k, v = self.project_kv(keys, values)
        return self.attend(queries, k, v, valid_lens)

    def _sdpa(self, q, k, v, valid_lens):
        mask = None if valid_lens is None else key_mask(valid_lens, k.shape[1])
        with region("attention"):
            return jax.nn.dot_product_attention(q, k, v, mask=mask)  # (b, n, h, p)

    def _fused_self_attention(self, x, valid_lens):
        # One matmul for Q, K and V when one array feeds all three (as the torch backend
        # and torch's own MultiheadAttention fast path do).
        b, n = x.shape[:2]
        kv_width = self.kv_heads * self.p
        with region("projections"):
            w = jnp.concatenate([self.W_q.kernel[...], self.W_k.kernel[...],
                                 self.W_v.kernel[...]], axis=1)  # (d, d + 2 h_kv p)
            q, k, v = jnp.split(x @ w, [self.d, self.d + kv_width], axis=-1)
            # (b, n, width) -> (b, n, heads, p)
            q = q.reshape(b, n, self.heads, self.p)
            k, v = (t.reshape(b, n, self.kv_heads, self.p) for t in (k, v))
        out = self._sdpa(q, k, v, valid_lens)
        with region("output"):
            return self.W_o(out.reshape(b, n, self.d))

    def _attend_batched(self, q, k, v, valid_lens):
        b, n, h, p = q.shape
        m, g = k.shape[1], self.heads // self.kv_heads
        if g > 1:  # each key/value head serves g consecutive query heads
            k, v = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
        # Fold heads into the batch axis: (b, len, h, p) -> (b, h, len, p) -> (b*h, len, p)
        q = q.transpose(0, 2, 1, 3).reshape(b * h, n, p)
        k = k.transpose(0, 2, 1, 3).reshape(b * h, m, p)
        v = v.transpose(0, 2, 1, 3).reshape(b * h, m, p)
        if valid_lens is not None:
            # Row i*h + j is head j of sequence i: repeat each length h times (not tile).
            valid_lens = jnp.repeat(valid_lens, h, axis=0)
        with region("scores"):
            scores = jnp.einsum("bnp,bmp->bnm", q, k) / math.sqrt(p)
        with region("softmax"):
            weights = self.dropout(masked_softmax(scores, valid_lens))
        with region("mixing"):
            out = jnp.einsum("bnm,bmp->bnp", weights, v)  # (b*h, n, p)
        # (b*h, n, p) -> (b, h, n, p) -> (b, n, h, p); attend() flattens to (b, n, d)
        return out.reshape(b, h, n, p).transpose(0, 2, 1, 3)

    def _attend_loop(self, queries, k, v, valid_lens):
        g = self.heads // self.kv_heads
        wq, wo = self.W_q.kernel[...], self.W_o.kernel[...]
        out = None
        for i in range(self.heads):
            cols = slice(i * self.p, (i + 1) * self.p)
            with region("projections"):
                q_i = queries @ wq[:, cols]  # (b, n, p): head i's query features
            with region("scores"):
                scores = jnp.einsum("bnp,bmp->bnm", q_i, k[:, :, i // g]) / math.sqrt(self.p)
            with region("softmax"):
                weights = self.dropout(masked_softmax(scores, valid_lens))
            with region("mixing"):
                head = jnp.einsum("bnm,bmp->bnp", weights, v[:, :, i // g])
            with region("output"):
                part = head @ wo[cols, :]  # head i enters W_o through rows i*p ... (i+1)*p - 1
                out = part if out is None else out + part
        return out


class ReferenceAttention(nnx.Module):
    """``flax.nnx.MultiHeadAttention`` (no bias) behind our interface, same weights."""

    def __init__(self, source: MultiHeadAttention, dtype: Any = jnp.float32) -> None:
        if source.kv_heads != source.heads:
            raise ValueError("the reference backend supports MHA only")
        h, p, d = source.heads, source.p, source.d
        self.mha = nnx.MultiHeadAttention(
            num_heads=h, in_features=d, qkv_features=d, out_features=d, use_bias=False,
            decode=False, deterministic=True, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
        # nnx.Linear kernel (in, h*p) -> DenseGeneral kernel (in, h, p); out (h*p, d) -> (h, p, d)
        self.mha.query.kernel[...] = source.W_q.kernel[...].reshape(d, h, p)
        self.mha.key.kernel[...] = source.W_k.kernel[...].reshape(d, h, p)
        self.mha.value.kernel[...] = source.W_v.kernel[...].reshape(d, h, p)
        self.mha.out.kernel[...] = source.W_o.kernel[...].reshape(h, p, d)

    def __call__(self, queries, keys, values, valid_lens=None):
        mask = None if valid_lens is None else key_mask(valid_lens, keys.shape[1])
        return self.mha(queries, keys, values, mask=mask)


# ----- building and running a config ----------------------------------------------------
JAX_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def jax_device(device: str) -> jax.Device:
    return jax.devices("cpu" if device == "cpu" else "gpu")[0]


def build_model(config: AttentionConfig, weights: dict[str, np.ndarray] | None = None
                ) -> nnx.Module:
    """The module for ``config`` with ``weights`` (default: ``init_weights(config)``)."""
    weights = init_weights(config) if weights is None else weights
    dtype = JAX_DTYPES[config.dtype]
    backend = "batched" if config.backend == "reference" else config.backend
    with jax.default_device(jax_device(config.device)):
        model = MultiHeadAttention(config.d, config.heads, config.kv_heads, backend,
                                   config.dropout, dtype=dtype)
        for name, value in weights.items():
            getattr(model, name).kernel[...] = jnp.asarray(value.T, dtype=dtype)
        if config.backend == "reference":
            model = ReferenceAttention(model, dtype=dtype)
    return model


def to_arrays(config: AttentionConfig, arrays: dict[str, np.ndarray | None]
              ) -> dict[str, jax.Array | None]:
    dev, dtype = jax_device(config.device), JAX_DTYPES[config.dtype]
    out: dict[str, jax.Array | None] = {}
    for name, value in arrays.items():
        if value is not None and value.dtype == np.float32:
            value = value.astype(dtype)
        out[name] = None if value is None else jax.device_put(value, dev)
    return out


def make_step(config: AttentionConfig, seed: int = 0) -> Callable[[], Any]:
    """A ready-to-call, compiled step for ``config`` (forward, forward+backward w.r.t. the
    parameters, or decode over cached keys/values) that blocks until its result is ready.
    Compilation happens here, outside any clock."""
    model = build_model(config, init_weights(config, seed))
    x = to_arrays(config, make_inputs(config, seed + 1))
    q, k, v, lens = x["queries"], x["keys"], x["values"], x["valid_lens"]
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    # Self-attention passes one array, so the model sees that one tensor feeds queries,
    # keys and values (separate jit arguments would be separate tracers).
    self_attention = not config.cross and config.mode != "decode"
    inputs = (q, lens) if self_attention else (q, k, v, lens)

    def forward(params, rest, *inputs):
        model = nnx.merge(graphdef, params, rest)
        if self_attention:
            x, lens = inputs
            return model(x, x, x, lens)
        return model(*inputs)

    if config.mode == "train":
        def loss(params, rest, *inputs):
            return forward(params, rest, *inputs).astype(jnp.float32).sum()

        fn = jax.jit(jax.grad(loss))
        args: tuple = (params, rest, *inputs)
    elif config.mode == "decode":
        def decode(params, rest, q, k_cache, v_cache, lens):
            return nnx.merge(graphdef, params, rest).attend(q, k_cache, v_cache, lens)

        k_cache, v_cache = jax.jit(
            lambda params, rest, k, v: nnx.merge(graphdef, params, rest).project_kv(k, v)
        )(params, rest, k, v)
        fn, args = jax.jit(decode), (params, rest, q, k_cache, v_cache, lens)
    else:
        fn, args = jax.jit(forward), (params, rest, *inputs)

    compiled = fn.lower(*args).compile()

    def step() -> Any:
        return jax.block_until_ready(compiled(*args))

    step.compiled = compiled  # XLA cost analysis and HLO text for the cost model tests
    return step
