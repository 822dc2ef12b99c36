"""JAX / Flax NNX multi-head attention with the same layouts and weights as the torch one.

A config's layer and compiled step are built in ``mhabench.layers.jax.steps``.

Weights come from ``mhabench.core.inputs`` in torch's ``(out, in)`` layout; an ``nnx.Linear``
kernel is ``(in, out)``, so loading transposes. XLA has no views: slicing or concatenating
a parameter inside a step copies it on every call. So each layout stores its kernels the
way its step reads them, packed or split once at load time: ``batched`` four kernels;
``loop`` one kernel per head (``q_heads``, ``k_heads``, ``v_heads``, ``o_heads``); ``fused``
one ``W_qkv`` kernel for a self-attention layer, ``W_q`` and a packed ``W_kv`` for a
cross-attention layer. Keys and values live as ``(b, h_kv, m, p)``, as in torch: the layout
the batched scores read with a free reshape, and the one a KV cache is stored in (XLA:CPU
transposing a (b, m, h, p) cache costs ~15x the attention itself at m = 4096). The fused
layout hands ``jax.nn.dot_product_attention`` (which groups query heads over fewer
key/value heads natively) its (b, m, h_kv, p) view.

Softmax in float32: ``loop`` and ``batched`` upcast the scores, ``jax.nn.dot_product_attention``
(``fused``) computes its logits in float32; ``reference`` (``nnx.MultiHeadAttention``) runs
softmax in the layer's dtype (bfloat16 in a bfloat16 config).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mhabench.layers.jax.decode import KVCache

# A list of modules as an attribute: nnx.List from Flax 0.12 on (which refuses a plain
# list there); a plain list before it, which Flax 0.11 walks as a pytree.
ModuleList = getattr(nnx, "List", list)


def assign(variable: nnx.Variable, value: Any) -> None:
    """Set a Flax variable's array: ``set_value`` where Flax has it (0.12.6 on), else the
    ``value`` setter (the older releases a release sweep reaches; newer ones deprecate it)."""
    if hasattr(type(variable), "set_value"):
        variable.set_value(value)
    else:
        variable.value = value

# Named scopes (never nested) label the regions in traces and in the compiled HLO's
# op_name metadata (free at run time); XLA may still fuse neighbouring regions into one
# kernel. "cache" is a decode step's write into the KV cache.
REGIONS = ("projections", "scores", "softmax", "mixing", "output", "attention", "cache")
region = jax.named_scope

MASK_VALUE = -1e6  # as in the chapter's masked_softmax: masked rows stay finite


def keep_mask(n: int, m: int, valid_lens: jax.Array | None, causal: bool) -> jax.Array | None:
    """Boolean (B or 1, n or 1, m), True where a query may attend; None: everywhere.
    valid_lens (B,) or (B, n); causal: query i of n sits at position m - n + i."""
    keep = None
    positions = jnp.arange(m)
    if valid_lens is not None:
        lens = valid_lens[:, None, None] if valid_lens.ndim == 1 else valid_lens[:, :, None]
        keep = positions[None, None, :] < lens
    if causal:
        below = positions[None, None, :] <= jnp.arange(m - n, m)[None, :, None]
        keep = below if keep is None else keep & below
    return keep


def masked_softmax(scores: jax.Array, keep: jax.Array | None) -> jax.Array:
    """Float32 softmax over the last axis of ``scores (B, n, m)`` where ``keep`` is True."""
    if keep is not None:
        scores = jnp.where(keep, scores, MASK_VALUE)
    return jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(scores.dtype)


def placeholder_init(key: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A kernel's stand-in until the shared weights replace it (``load_weights``). nnx's
    random initializers run a dozen eager JAX ops per kernel, each lowered anew in every
    process: 0.2-0.9 s of each asv process, for values that are overwritten at once."""
    return np.zeros(shape, dtype)


class MultiHeadAttention(nnx.Module):
    """Multi-head attention; returns the output only (the chapter's NNX version also
    returns the weights, which fused kernels never form). ``self_attention`` picks the
    fused layout's packing (one QKV kernel, or Q apart from a KV kernel)."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None,
                 layout: str = "batched", dropout: float = 0.0, *,
                 dtype: Any = jnp.float32, rngs: nnx.Rngs | None = None,
                 self_attention: bool = True,
                 core: tuple[Callable[..., Any], bool] | None = None,
                 kernel: str | None = None,
                 kernel_init: nnx.Initializer | None = None,
                 head_dim: int | None = None, scale: float | None = None) -> None:
        """``head_dim``: p (None: d / heads); ``scale``: the factor on the scores (None:
        1 / sqrt(p))."""
        kv_heads = heads if kv_heads is None else kv_heads
        if (head_dim is None and d % heads) or heads % kv_heads:
            raise ValueError(f"need heads | d (or a head_dim) and kv_heads | heads, got d={d}, "
                             f"heads={heads}, kv_heads={kv_heads}")
        if layout not in ("loop", "batched", "fused"):
            raise ValueError(f"layout={layout!r}; choose loop, batched or fused")
        if layout == "fused" and dropout:
            raise ValueError("jax.nn.dot_product_attention has no dropout; use dropout=0 "
                             "or the loop/batched layout")
        if core is not None and layout != "batched":
            raise ValueError(f"a core attention function runs in the batched layout, "
                             f"not layout={layout!r}")
        rngs = nnx.Rngs(params=0, dropout=1) if rngs is None else rngs
        self.d, self.heads, self.kv_heads, self.layout = d, heads, kv_heads, layout
        # An attention function on projected heads, attend(q, k, v, valid_lens, causal)
        # (a plug-in's, wrapped by mhabench.layers.jax.steps): static, not a pytree node.
        self.core = nnx.static(core) if hasattr(nnx, "static") else core
        if kernel is not None and layout != "fused":
            raise ValueError(f"a forced kernel needs the fused layout, not layout={layout!r}")
        self.implementation = kernel  # dot_product_attention's: None, "xla" or "cudnn"
        self.p = p = d // heads if head_dim is None else head_dim
        # None: dot_product_attention's and the plug-ins' own default; the eager layouts
        # multiply by softmax_scale.
        self.scale = scale
        self.softmax_scale = 1.0 / math.sqrt(p) if scale is None else scale
        self.q_width = q_width = heads * p
        kv_width = kv_heads * p

        init = {} if kernel_init is None else {"kernel_init": kernel_init}

        def lin(din: int, dout: int) -> nnx.Linear:
            return nnx.Linear(din, dout, use_bias=False, dtype=dtype, param_dtype=dtype,
                              rngs=rngs, **init)

        # Where each shared weight lives: (kernel path, torch-weight slice, axis) parts; a
        # kernel is the concatenation (along its output axis) of its parts, transposed.
        rows = lambda i: slice(i * p, (i + 1) * p)  # noqa: E731 (head i's features)
        if layout == "loop":
            self.q_heads = ModuleList([lin(d, p) for _ in range(heads)])
            self.k_heads = ModuleList([lin(d, p) for _ in range(kv_heads)])
            self.v_heads = ModuleList([lin(d, p) for _ in range(kv_heads)])
            self.o_heads = ModuleList([lin(p, d) for _ in range(heads)])  # rows i*p...(i+1)*p
            self._parts = [(f"{g}_heads.{i}", [(name, rows(i), axis)])
                           for g, name, axis, count in (("q", "W_q", 0, heads),
                                                        ("k", "W_k", 0, kv_heads),
                                                        ("v", "W_v", 0, kv_heads),
                                                        ("o", "W_o", 1, heads))
                           for i in range(count)]
        elif layout == "fused" and self_attention:
            self.W_qkv = lin(d, q_width + 2 * kv_width)  # columns: W_q | W_k | W_v
            self._parts = [("W_qkv", [(n, slice(None), 0) for n in ("W_q", "W_k", "W_v")])]
        elif layout == "fused":
            self.W_q, self.W_kv = lin(d, q_width), lin(d, 2 * kv_width)  # W_kv: W_k | W_v
            self._parts = [("W_q", [("W_q", slice(None), 0)]),
                           ("W_kv", [(n, slice(None), 0) for n in ("W_k", "W_v")])]
        else:
            self.W_q, self.W_k, self.W_v = lin(d, q_width), lin(d, kv_width), lin(d, kv_width)
            self._parts = [(n, [(n, slice(None), 0)]) for n in ("W_q", "W_k", "W_v")]
        if layout != "loop":
            self.W_o = lin(q_width, d)
            self._parts.append(("W_o", [("W_o", slice(None), 0)]))
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    # ----- the shared weight layout -----------------------------------------------------
    def _kernel(self, path: str) -> nnx.Param:
        node: Any = self
        for key in path.split("."):
            node = node[int(key)] if key.isdigit() else getattr(node, key)
        return node.kernel

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Copy torch-layout ``(out, in)`` weights into this layout's kernels."""
        for path, parts in self._parts:
            kernel = self._kernel(path)
            blocks = [weights[n][s] if axis == 0 else weights[n][:, s] for n, s, axis in parts]
            assign(kernel, jnp.asarray(np.concatenate([b.T for b in blocks], axis=1),
                                       dtype=kernel[...].dtype))

    def weights(self) -> dict[str, np.ndarray]:
        """The weights in the shared torch layout (float32 numpy): from a model, or from a
        gradient state merged into one (``nnx.merge(graphdef, grads, rest)``)."""
        kv_width = self.kv_heads * self.p
        shapes = {"W_q": (self.q_width, self.d), "W_k": (kv_width, self.d),
                  "W_v": (kv_width, self.d), "W_o": (self.d, self.q_width)}
        out = {n: np.zeros(shape, np.float32) for n, shape in shapes.items()}
        for path, parts in self._parts:
            kernel, start = np.asarray(self._kernel(path)[...], np.float32), 0
            for name, s, axis in parts:
                # The block's torch rows run along the kernel's output axis.
                rows = shapes[name][0]
                width = len(range(*s.indices(rows))) if axis == 0 else rows
                block = kernel[:, start:start + width].T
                if axis == 0:
                    out[name][s] = block
                else:
                    out[name][:, s] = block
                start += width
        return out

    # ----- the two halves of a forward pass -------------------------------------------
    def project_kv(self, keys: jax.Array, values: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Projected keys and values, each (b, h_kv, m, p): what a KV cache stores."""
        with region("projections"):
            if self.layout == "loop":
                k = jnp.stack([lin(keys) for lin in self.k_heads], axis=1)
                v = jnp.stack([lin(values) for lin in self.v_heads], axis=1)
                return k, v
            if self.layout == "fused":
                kernel = self.W_kv.kernel[...] if hasattr(self, "W_kv") else \
                    self.W_qkv.kernel[...][:, self.q_width:]  # a self-attention layer: a copy
                if keys is values:  # one matmul for K and V
                    k, v = jnp.split(keys @ kernel, 2, axis=-1)
                else:
                    half = kernel.shape[1] // 2
                    k, v = keys @ kernel[:, :half], values @ kernel[:, half:]
            else:
                k, v = self.W_k(keys), self.W_v(values)
            return self._split_heads(k, self.kv_heads), self._split_heads(v, self.kv_heads)

    def attend(self, queries: jax.Array, k: jax.Array, v: jax.Array,
               valid_lens: jax.Array | None = None, causal: bool = False) -> jax.Array:
        """Output (b, n, d) of queries (b, n, d) over projected k, v (b, h_kv, m, p)."""
        if self.layout == "loop":
            keep = keep_mask(queries.shape[1], k.shape[2], valid_lens, causal)
            return self._attend_loop(queries, k, v, keep)
        b, n = queries.shape[:2]
        with region("projections"):
            kernel = self.W_qkv.kernel[...][:, :self.q_width] if hasattr(self, "W_qkv") else \
                self.W_q.kernel[...]
            q = (queries @ kernel).reshape(b, n, self.heads, self.p)  # (b, n, h, p)
        if self.layout == "fused":
            out = self._sdpa(q, k, v, keep_mask(n, k.shape[2], valid_lens, causal))
        elif self.core is not None:
            out = self._attend_core(q, k, v, valid_lens, causal)
        else:
            out = self._attend_batched(q, k, v, valid_lens, causal)
        return self._output(out)

    def __call__(self, queries: jax.Array, keys: jax.Array, values: jax.Array,
                 valid_lens: jax.Array | None = None, causal: bool = False) -> jax.Array:
        if hasattr(self, "W_qkv") and queries is keys and keys is values:
            q, k, v = self._project_packed(queries)
            keep = keep_mask(q.shape[1], k.shape[2], valid_lens, causal)
            return self._output(self._sdpa(q, k, v, keep))
        k, v = self.project_kv(keys, values)
        return self.attend(queries, k, v, valid_lens, causal)

    def decode_step(self, token: jax.Array, cache: KVCache) -> tuple[jax.Array, KVCache]:
        """One generation step: the new token (b, 1, d) is projected to q, k, v; k and v
        are written into ``cache`` at its position, which advances; q attends over the
        valid prefix. Returns the output (b, 1, d) and the updated cache."""
        if hasattr(self, "W_qkv"):
            q, k, v = self._project_packed(token)
        else:
            k, v = self.project_kv(token, token)
        with region("cache"):
            cache = cache.append(k, v)
        # The cache's capacity is static; positions at or past pos are masked out.
        lens = jnp.full((token.shape[0],), cache.pos, jnp.int32)
        if hasattr(self, "W_qkv"):
            keep = keep_mask(1, cache.k.shape[2], lens, False)
            return self._output(self._sdpa(q, cache.k, cache.v, keep)), cache
        return self.attend(token, cache.k, cache.v, lens), cache

    # ----- layouts ----------------------------------------------------------------------
    def _split_heads(self, x, heads):
        # (b, len, heads * p) -> (b, len, heads, p) -> (b, heads, len, p)
        return x.reshape(x.shape[0], x.shape[1], heads, self.p).transpose(0, 2, 1, 3)

    def _project_packed(self, x):
        # Q (b, n, h, p), K and V (b, h_kv, n, p) of one array in one packed matmul.
        b, n = x.shape[:2]
        kv_width = self.kv_heads * self.p
        with region("projections"):
            q, k, v = jnp.split(self.W_qkv(x), [self.q_width, self.q_width + kv_width],
                                axis=-1)
            return (q.reshape(b, n, self.heads, self.p), self._split_heads(k, self.kv_heads),
                    self._split_heads(v, self.kv_heads))

    def _output(self, out):
        b, n = out.shape[:2]
        with region("output"):
            return self.W_o(out.reshape(b, n, self.q_width))  # (b, n, h, p) -> (b, n, h p)

    def _sdpa(self, q, k, v, keep):
        mask = None if keep is None else keep[:, None]  # (b or 1, 1, n or 1, m)
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # (b, m, h_kv, p) views
        with region("attention"):
            if self.implementation is None:
                return jax.nn.dot_product_attention(q, k, v, mask=mask,
                                                    scale=self.scale)  # (b, n, h, p)
            try:  # traced once, at compile time: no cost in the step
                return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=self.scale,
                                                    implementation=self.implementation)
            except Exception as err:  # noqa: BLE001 (whatever the implementation refuses)
                raise ValueError(f"implementation={self.implementation!r} cannot run this "
                                 f"cell: {err}") from err

    def _attend_batched(self, q, k, v, valid_lens, causal):
        b, n, h, p = q.shape
        m, g = k.shape[2], self.heads // self.kv_heads
        if g > 1:  # each key/value head serves g consecutive query heads
            k, v = jnp.repeat(k, g, axis=1), jnp.repeat(v, g, axis=1)
        # Fold heads into the batch axis: q (b, n, h, p) -> (b, h, n, p) -> (b*h, n, p);
        # k, v (b, h, m, p) -> (b*h, m, p)
        q = q.transpose(0, 2, 1, 3).reshape(b * h, n, p)
        k, v = k.reshape(b * h, m, p), v.reshape(b * h, m, p)
        if valid_lens is not None:
            # Row i*h + j is head j of sequence i: repeat each length h times (not tile).
            valid_lens = jnp.repeat(valid_lens, h, axis=0)
        keep = keep_mask(n, m, valid_lens, causal)
        with region("scores"):
            scores = jnp.einsum("bnp,bmp->bnm", q, k) * self.softmax_scale
        with region("softmax"):
            weights = self.dropout(masked_softmax(scores, keep))
        with region("mixing"):
            out = jnp.einsum("bnm,bmp->bnp", weights, v)  # (b*h, n, p)
        # (b*h, n, p) -> (b, h, n, p) -> (b, n, h, p); _output flattens to (b, n, d)
        return out.reshape(b, h, n, p).transpose(0, 2, 1, 3)

    def _attend_core(self, q, k, v, valid_lens, causal):
        attend, takes_groups = self.core
        g = self.heads // self.kv_heads
        if g > 1 and not takes_groups:
            k, v = jnp.repeat(k, g, axis=1), jnp.repeat(v, g, axis=1)
        q = q.transpose(0, 2, 1, 3)  # (b, n, h, p) -> (b, h, n, p), the function's layout
        with region("attention"):
            out = attend(q, k, v, valid_lens, causal, self.scale)
        return out.transpose(0, 2, 1, 3)

    def _attend_loop(self, queries, k, v, keep):
        g = self.heads // self.kv_heads
        out = None
        for i in range(self.heads):
            with region("projections"):
                q_i = self.q_heads[i](queries)  # (b, n, p): head i's query features
            with region("scores"):
                scores = jnp.einsum("bnp,bmp->bnm", q_i, k[:, i // g]) * self.softmax_scale
            with region("softmax"):
                weights = self.dropout(masked_softmax(scores, keep))
            with region("mixing"):
                head = jnp.einsum("bnm,bmp->bnp", weights, v[:, i // g])
            with region("output"):
                part = self.o_heads[i](head)  # head i's share of W_o
                out = part if out is None else out + part
        return out


class ReferenceAttention(nnx.Module):
    """``flax.nnx.MultiHeadAttention`` (no bias) behind our interface, with the source
    layer's weights and dropout rate."""

    def __init__(self, source: MultiHeadAttention, dropout: float = 0.0,
                 dtype: Any = jnp.float32) -> None:
        if source.kv_heads != source.heads:
            raise ValueError("the reference backend supports MHA only")
        if source.scale is not None:
            raise ValueError("flax.nnx.MultiHeadAttention takes no softmax scale")
        h, p, d = source.heads, source.p, source.d
        # qkv_features h p: its heads are qkv_features / h wide, apart from d
        self.mha = nnx.MultiHeadAttention(
            num_heads=h, in_features=d, qkv_features=h * p, out_features=d, use_bias=False,
            dropout_rate=dropout, decode=False, dtype=dtype, param_dtype=dtype,
            kernel_init=placeholder_init, rngs=nnx.Rngs(0, dropout=1))
        w = source.weights()
        # (out, in) -> DenseGeneral kernels (in, h, p) and, for the output, (h, p, out)
        for layer, kernel in ((self.mha.query, w["W_q"].T.reshape(d, h, p)),
                              (self.mha.key, w["W_k"].T.reshape(d, h, p)),
                              (self.mha.value, w["W_v"].T.reshape(d, h, p)),
                              (self.mha.out, w["W_o"].T.reshape(h, p, d))):
            assign(layer.kernel, jnp.asarray(kernel, dtype))

    def __call__(self, queries, keys, values, valid_lens=None, causal=False):
        if causal:  # the library's own mask (config: never with valid_lens)
            return self.mha(queries, keys, values,
                            mask=nnx.make_causal_mask(queries[..., 0]))
        keep = None if valid_lens is None else keep_mask(queries.shape[1], keys.shape[1],
                                                         valid_lens, False)[:, None]
        return self.mha(queries, keys, values, mask=keep)
