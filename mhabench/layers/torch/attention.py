"""PyTorch multi-head attention layers in three layouts (loop, batched, fused), MHA/GQA/MQA.

The layout (``layout=``) says how the heads are computed; a registered backend
(``mhabench.core.backends``) names a layout or something else. The batched layout can run
an attention function on projected heads (``core=``: a plug-in's, FlexAttention) instead
of its own scores, softmax and mixing, and the fused layout can be forced to one SDPA
kernel. A config's layer and step are built in ``mhabench.layers.torch.steps``.

All backends load one parameter layout (``mhabench.core.inputs``): ``W_q``, ``W_k``, ``W_v``,
``W_o``, query and output projections of width ``h * p``, key/value projections of width
``h_kv * p`` shared by groups of ``h / h_kv`` query heads (``p`` is ``d / h`` unless the
layer is given its own ``head_dim``). ``loop`` and ``batched`` hold them as four
bias-free ``nn.Linear`` layers; ``fused`` packs ``W_q; W_k; W_v`` into one ``W_qkv``
parameter at build time (as torch's own ``MultiheadAttention`` keeps ``in_proj_weight``),
so no step concatenates weights. The ``reference`` backend wraps
``torch.nn.MultiheadAttention`` (its fast path), same weights.

Softmax runs in float32 in every backend: ``loop`` and ``batched`` upcast the scores
(:func:`masked_softmax`); the CPU flash kernel behind ``fused`` and ``reference``
accumulates in float32.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import profiler as autograd_profiler
from torch.nn.attention import SDPBackend, sdpa_kernel

from mhabench.core.inputs import WEIGHT_NAMES
from mhabench.layers.torch.decode import KVCache

# Profiler regions (record_function labels, never nested, so their times add up):
# projections, scores, softmax (scale is in scores; mask and dropout in softmax), mixing,
# output; the fused kernel is one region, "attention" (scores + softmax + mixing); "cache"
# is a decode step's write into the KV cache.
REGIONS = ("projections", "scores", "softmax", "mixing", "output", "attention", "cache")
_NO_REGION = contextlib.nullcontext()


def region(name: str) -> contextlib.AbstractContextManager:
    """A ``record_function`` label while a torch profiler records, else a no-op.

    ``record_function`` dispatches an enter and an exit op on every call even when no
    profiler runs: the loop backend would pay 5 pairs per head inside every timed step.
    Inside ``torch.compile`` (the ``compiled`` backend) no label is traced, and the
    profiler flag is not read: dynamo would guard on it, so a profiler switched on later
    would be a recompile (an error there); compiled code shows as its own kernels.
    """
    if torch.compiler.is_compiling():
        return _NO_REGION
    if autograd_profiler._is_profiler_enabled:  # set by torch.profiler / autograd.profiler
        return autograd_profiler.record_function(name)
    return _NO_REGION


# d2l's masked_softmax fills masked scores with -1e6 (not -inf), so a row with no valid
# key becomes uniform rather than NaN.
MASK_VALUE = -1e6


def keep_mask(n: int, m: int, valid_lens: torch.Tensor | None, causal: bool,
              device: torch.device | str) -> torch.Tensor | None:
    """Boolean (B or 1, n or 1, m), True where a query may attend; None: everywhere.

    valid_lens: None, ``(B,)`` (one length per row) or ``(B, n)`` (one per query).
    causal: query i of n sits at position m - n + i and sees keys up to it.
    """
    keep = None
    positions = torch.arange(m, device=device)
    if valid_lens is not None:
        # (B,) -> (B, 1, 1); (B, n) -> (B, n, 1): broadcast against key positions (1, 1, m).
        lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
        keep = positions[None, None, :] < lens
    if causal:
        last = torch.arange(m - n, m, device=device)[None, :, None]  # (1, n, 1)
        below = positions[None, None, :] <= last
        keep = below if keep is None else keep & below
    return keep


def masked_softmax(scores: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Float32 softmax over the last axis of ``scores (B, n, m)``, where ``keep`` is False
    masked out; returned in the scores' dtype."""
    if keep is not None:
        scores = scores.masked_fill(~keep, MASK_VALUE)
    weights = F.softmax(scores, dim=-1, dtype=torch.float32)
    return weights if weights.dtype == scores.dtype else weights.to(scores.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention; ``layout`` picks how the heads are computed."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None,
                 layout: str = "batched", dropout: float = 0.0,
                 core: tuple[Callable[..., Any], bool] | None = None,
                 kernel: str | None = None, head_dim: int | None = None,
                 scale: float | None = None) -> None:
        """``core``: an attention function on projected heads,
        ``attend(q, k, v, valid_lens, causal, scale)``, and whether it takes grouped
        key/value heads (a plug-in's is wrapped by ``mhabench.layers.torch.steps``); it
        replaces the batched layout's scores, softmax and mixing. ``kernel``: the SDPA
        kernel the fused layout is forced to (flash, efficient, cudnn, math).
        ``head_dim``: p (None: d / heads); ``scale``: the factor on the scores (None:
        1 / sqrt(p))."""
        super().__init__()
        kv_heads = heads if kv_heads is None else kv_heads
        if (head_dim is None and d % heads) or heads % kv_heads:
            raise ValueError(f"need heads | d (or a head_dim) and kv_heads | heads, got d={d}, "
                             f"heads={heads}, kv_heads={kv_heads}")
        if layout not in ("loop", "batched", "fused"):
            raise ValueError(f"layout={layout!r}; choose loop, batched or fused "
                             "(reference: build_model)")
        if core is not None and layout != "batched":
            raise ValueError(f"a core attention function runs in the batched layout, "
                             f"not layout={layout!r}")
        self.d, self.heads, self.kv_heads, self.layout = d, heads, kv_heads, layout
        if kernel is not None and layout != "fused":
            raise ValueError(f"a forced kernel needs the fused layout, not layout={layout!r}")
        self.core = core
        self.sdpa_backends = None if kernel is None else [_sdpa_backend(kernel)]
        self.p = d // heads if head_dim is None else head_dim
        # None: SDPA's and the plug-ins' own default; the eager layouts multiply by it.
        self.scale = scale
        self.softmax_scale = 1.0 / math.sqrt(self.p) if scale is None else scale
        q_width, kv_width = heads * self.p, kv_heads * self.p
        self.q_width = q_width
        self.dropout = nn.Dropout(dropout)
        # Rows of each projection inside the packed weight (fused) and the shapes loaded.
        self._rows = {"W_q": (0, q_width), "W_k": (q_width, q_width + kv_width),
                      "W_v": (q_width + kv_width, q_width + 2 * kv_width)}
        if layout == "fused":
            self.W_qkv = nn.Linear(d, q_width + 2 * kv_width, bias=False)  # W_q; W_k; W_v
        else:
            self.W_q = nn.Linear(d, q_width, bias=False)
            self.W_k = nn.Linear(d, kv_width, bias=False)
            self.W_v = nn.Linear(d, kv_width, bias=False)
        self.W_o = nn.Linear(q_width, d, bias=False)

    # ----- the shared weight layout -----------------------------------------------------
    def weight(self, name: str) -> torch.Tensor:
        """``name``'s (out, in) weight; a view of the packed parameter for fused."""
        if self.layout != "fused" or name == "W_o":
            return getattr(self, name).weight
        start, stop = self._rows[name]
        return self.W_qkv.weight[start:stop]

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for name in WEIGHT_NAMES:
                self.weight(name).copy_(torch.from_numpy(weights[name]))

    def weight_grads(self) -> dict[str, torch.Tensor | None]:
        """The gradient of each weight of the shared layout (after a backward pass)."""
        if self.layout != "fused":
            return {name: getattr(self, name).weight.grad for name in WEIGHT_NAMES}
        packed = self.W_qkv.weight.grad
        grads = {name: None if packed is None else packed[start:stop]
                 for name, (start, stop) in self._rows.items()}
        return {**grads, "W_o": self.W_o.weight.grad}

    # ----- head bookkeeping (the chapter's transpose_qkv / transpose_output) ----------
    def split_heads(self, X: torch.Tensor, heads: int) -> torch.Tensor:
        # (b, len, heads * p) -> (b, len, heads, p) -> (b, heads, len, p)
        return X.reshape(X.shape[0], X.shape[1], heads, self.p).transpose(1, 2)

    def merge_heads(self, X: torch.Tensor) -> torch.Tensor:
        # (b, h, n, p) -> (b, n, h, p) -> (b, n, h * p)
        return X.transpose(1, 2).reshape(X.shape[0], X.shape[2], self.q_width)

    def _drop(self, weights: torch.Tensor) -> torch.Tensor:
        # Not even a no-op call outside training: eval steps dispatch nothing for dropout.
        return self.dropout(weights) if self.training and self.dropout.p else weights

    # ----- the two halves of a forward pass -------------------------------------------
    def project_kv(self, keys: torch.Tensor, values: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected keys and values, each (b, h_kv, m, p): what a KV cache stores."""
        with region("projections"):
            if self.layout == "loop":
                # One key/value head at a time through the sliced projections (views).
                ks, vs = [], []
                for j in range(self.kv_heads):
                    rows = slice(j * self.p, (j + 1) * self.p)
                    ks.append(keys @ self.W_k.weight[rows].T)  # (b, m, p)
                    vs.append(values @ self.W_v.weight[rows].T)
                return torch.stack(ks, dim=1), torch.stack(vs, dim=1)
            if self.layout == "fused" and keys is values:
                # One matmul for K and V: their rows are adjacent in the packed weight.
                kv = F.linear(keys, self.W_qkv.weight[self.q_width:])
                k, v = kv.split(self.kv_heads * self.p, dim=-1)
            else:
                k, v = F.linear(keys, self.weight("W_k")), F.linear(values, self.weight("W_v"))
            return self.split_heads(k, self.kv_heads), self.split_heads(v, self.kv_heads)

    def attend(self, queries: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               valid_lens: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """Output (b, n, d) of queries (b, n, d) over projected k, v (b, h_kv, m, p)."""
        if self.layout == "loop":
            keep = keep_mask(queries.shape[1], k.shape[2], valid_lens, causal, k.device)
            return self._attend_loop(queries, k, v, keep)
        with region("projections"):
            q = self.split_heads(F.linear(queries, self.weight("W_q")), self.heads)  # (b,h,n,p)
        if self.layout == "fused":
            out = self._sdpa(q, k, v, valid_lens, causal)
        elif self.core is not None:
            out = self._attend_core(q, k, v, valid_lens, causal)
        else:
            out = self._attend_batched(q, k, v, valid_lens, causal)
        return self._output(out)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        if self.layout == "fused" and queries is keys and keys is values:
            q, k, v = self._project_packed(queries)
            return self._output(self._sdpa(q, k, v, valid_lens, causal))
        k, v = self.project_kv(keys, values)
        return self.attend(queries, k, v, valid_lens, causal)

    def decode_step(self, token: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One generation step: the new token (b, 1, d) is projected to q, k, v; k and v
        are written into ``cache`` at its position (in place), which then advances; q
        attends over the cache's grown prefix. Returns (b, 1, d)."""
        if self.layout == "fused":
            q, k, v = self._project_packed(token)
        else:
            k, v = self.project_kv(token, token)
        with region("cache"):
            k_all, v_all = cache.append(k, v)  # (b, h_kv, pos + 1, p)
        if self.layout == "fused":
            return self._output(self._sdpa(q, k_all, v_all, None, False))
        return self.attend(token, k_all, v_all)

    # ----- layouts ----------------------------------------------------------------------
    def _project_packed(self, x):
        # Q, K and V of one tensor in one matmul with the packed weight.
        with region("projections"):
            kv_width = self.kv_heads * self.p
            q, k, v = self.W_qkv(x).split([self.q_width, kv_width, kv_width], dim=-1)
            return (self.split_heads(q, self.heads), self.split_heads(k, self.kv_heads),
                    self.split_heads(v, self.kv_heads))

    def _output(self, out):
        with region("output"):
            return self.W_o(self.merge_heads(out))

    def _attend_batched(self, q, k, v, valid_lens, causal):
        b, n, h = q.shape[0], q.shape[2], self.heads
        g = h // self.kv_heads
        # Each key/value head serves g consecutive query heads: (b, h_kv, m, p) -> (b, h, m, p)
        if g > 1:
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        # Fold heads into the batch axis: (b, h, len, p) -> (b * h, len, p)
        q, k, v = (t.reshape(b * h, t.shape[2], self.p) for t in (q, k, v))
        if valid_lens is not None:
            # Row i*h + j is head j of sequence i: repeat each length h times (not tile).
            valid_lens = torch.repeat_interleave(valid_lens, repeats=h, dim=0)
        keep = keep_mask(n, k.shape[1], valid_lens, causal, k.device)
        with region("scores"):
            scores = torch.bmm(q, k.transpose(1, 2)) * self.softmax_scale  # (b*h, n, m)
        with region("softmax"):
            weights = self._drop(masked_softmax(scores, keep))
        with region("mixing"):
            out = torch.bmm(weights, v)  # (b*h, n, p)
        return out.reshape(b, h, n, self.p)

    def _attend_core(self, q, k, v, valid_lens, causal):
        attend, takes_groups = self.core
        g = self.heads // self.kv_heads
        if g > 1 and not takes_groups:
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        with region("attention"):
            out = attend(q, k, v, valid_lens, causal, self.scale)
        return out

    def _attend_loop(self, queries, k, v, keep):
        g = self.heads // self.kv_heads
        out = None
        for i in range(self.heads):
            cols = slice(i * self.p, (i + 1) * self.p)
            with region("projections"):
                q_i = queries @ self.W_q.weight[cols].T  # (b, n, p): head i's query features
            with region("scores"):
                scores = torch.bmm(q_i, k[:, i // g].transpose(1, 2)) * self.softmax_scale
            with region("softmax"):
                weights = self._drop(masked_softmax(scores, keep))  # (b, n, m)
            with region("mixing"):
                head = torch.bmm(weights, v[:, i // g])  # (b, n, p)
            with region("output"):
                # Head i's output enters W_o through input features i*p ... (i+1)*p - 1.
                part = head @ self.W_o.weight[:, cols].T  # (b, n, d)
                out = part if out is None else out + part
        return out

    def _sdpa(self, q, k, v, valid_lens, causal):
        # 4-D (b, h, n, p) inputs: on CPU this reaches the flash kernel; 3-D input would
        # silently take the slow math path. SDPA's own causal flag aligns the mask top-left,
        # right only for n == m; otherwise the mask is explicit.
        n, m = q.shape[2], k.shape[2]
        own_causal = causal and valid_lens is None and n == m
        keep = None
        if (valid_lens is not None or causal) and not own_causal:
            keep = keep_mask(n, m, valid_lens, causal, q.device)[:, None]  # (b|1, 1, n|1, m)
        forced = _NO_REGION if self.sdpa_backends is None else sdpa_kernel(self.sdpa_backends)
        with region("attention"), forced:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=keep, is_causal=own_causal,
                dropout_p=self.dropout.p if self.training else 0.0, scale=self.scale,
                enable_gqa=self.kv_heads != self.heads)


def _sdpa_backend(kernel: str) -> SDPBackend:
    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
             "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    if kernel not in names:
        raise ValueError(f"kernel={kernel!r} is not allowed; choose one of {', '.join(names)}")
    return getattr(SDPBackend, names[kernel])


class ReferenceAttention(nn.Module):
    """``torch.nn.MultiheadAttention`` (need_weights=False, no bias) behind our interface,
    with the source layer's weights and dropout rate."""

    def __init__(self, source: MultiHeadAttention) -> None:
        super().__init__()
        if source.kv_heads != source.heads:
            raise ValueError("torch.nn.MultiheadAttention supports MHA only")
        if source.q_width != source.d or source.scale is not None:
            raise ValueError("torch.nn.MultiheadAttention splits d into its heads (h p = d) "
                             "and takes no softmax scale")
        self.heads = source.heads
        self.mha = nn.MultiheadAttention(source.d, source.heads, dropout=source.dropout.p,
                                         bias=False, batch_first=True)
        with torch.no_grad():
            self.mha.in_proj_weight.copy_(torch.cat(
                [source.weight("W_q"), source.weight("W_k"), source.weight("W_v")]))
            self.mha.out_proj.weight.copy_(source.weight("W_o"))

    def forward(self, queries, keys, values, valid_lens=None, causal=False):
        padding, attn_mask = None, None
        if causal:  # the library's own mask (config: never with valid_lens)
            attn_mask = nn.Transformer.generate_square_subsequent_mask(
                queries.shape[1], device=queries.device, dtype=queries.dtype)
            return self.mha(queries, keys, values, attn_mask=attn_mask, is_causal=True,
                            need_weights=False)[0]
        if valid_lens is not None:
            m = keys.shape[1]
            if valid_lens.dim() == 1:
                # True marks a key to ignore.
                padding = torch.arange(m, device=keys.device)[None, :] >= valid_lens[:, None]
            else:
                # Per-query lengths need a (b*h, n, m) mask, rows ordered batch-major.
                allowed = keep_mask(queries.shape[1], m, valid_lens, False, keys.device)
                attn_mask = ~allowed[:, None].expand(-1, self.heads, -1, -1).reshape(
                    -1, queries.shape[1], m)
        out, _ = self.mha(queries, keys, values, key_padding_mask=padding,
                          attn_mask=attn_mask, need_weights=False)
        return out
