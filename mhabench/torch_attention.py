"""PyTorch multi-head attention with three backends (loop, batched, fused) and MHA/GQA/MQA.

All backends share one parameter layout (``mhabench.inputs``): ``W_q``, ``W_k``, ``W_v``,
``W_o`` as bias-free ``nn.Linear`` layers, key/value projections of width ``h_kv * p``
shared by groups of ``h / h_kv`` query heads. The ``reference`` backend wraps
``torch.nn.MultiheadAttention`` (its fast path) with the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from mhabench.config import AttentionConfig
from mhabench.inputs import init_weights, make_inputs

# Profiler regions (record_function labels, never nested, so their times add up):
# projections, scores, softmax (scale is in scores; mask and dropout in softmax), mixing,
# output; the fused kernel is one region, "attention" (scores + softmax + mixing).
REGIONS = ("projections", "scores", "softmax", "mixing", "output", "attention")


def region(name: str) -> record_function:
    return record_function(name)


# d2l's masked_softmax fills masked scores with -1e6 (not -inf), so a row with no valid
# key becomes uniform rather than NaN.
MASK_VALUE = -1e6


def masked_softmax(scores: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis of ``scores (B, n, m)``, keys past valid_lens masked.

    valid_lens: None, ``(B,)`` (one length per row of the batch) or ``(B, n)`` (one per
    query).
    """
    if valid_lens is None:
        return F.softmax(scores, dim=-1)
    # (B,) -> (B, 1, 1); (B, n) -> (B, n, 1): broadcast against key positions (1, 1, m).
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    keep = torch.arange(scores.shape[-1], device=scores.device)[None, None, :] < lens
    return F.softmax(scores.masked_fill(~keep, MASK_VALUE), dim=-1)


def key_mask(valid_lens: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Boolean mask (b, 1, n or 1, m), True where a query may attend (SDPA convention)."""
    one_per_row = valid_lens.dim() == 1
    lens = valid_lens[:, None, None, None] if one_per_row else valid_lens[:, None, :, None]
    return torch.arange(m, device=valid_lens.device)[None, None, None, :] < lens


class MultiHeadAttention(nn.Module):
    """Multi-head attention; ``backend`` picks how the heads are computed."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None,
                 backend: str = "batched", dropout: float = 0.0) -> None:
        super().__init__()
        kv_heads = heads if kv_heads is None else kv_heads
        if d % heads or heads % kv_heads:
            raise ValueError(f"need heads | d and kv_heads | heads, got d={d}, "
                             f"heads={heads}, kv_heads={kv_heads}")
        if backend not in ("loop", "batched", "fused"):
            raise ValueError(f"backend={backend!r}; choose loop, batched or fused "
                             "(reference: build_model)")
        self.d, self.heads, self.kv_heads, self.backend = d, heads, kv_heads, backend
        self.p = d // heads
        self.dropout = nn.Dropout(dropout)
        self.W_q = nn.Linear(d, d, bias=False)
        self.W_k = nn.Linear(d, kv_heads * self.p, bias=False)
        self.W_v = nn.Linear(d, kv_heads * self.p, bias=False)
        self.W_o = nn.Linear(d, d, bias=False)

    # ----- head bookkeeping (the chapter's transpose_qkv / transpose_output) ----------
    def split_heads(self, X: torch.Tensor, heads: int) -> torch.Tensor:
        # (b, len, heads * p) -> (b, len, heads, p) -> (b, heads, len, p)
        return X.reshape(X.shape[0], X.shape[1], heads, self.p).transpose(1, 2)

    def merge_heads(self, X: torch.Tensor) -> torch.Tensor:
        # (b, h, n, p) -> (b, n, h, p) -> (b, n, d)
        return X.transpose(1, 2).reshape(X.shape[0], X.shape[2], self.d)

    # ----- the two halves of a forward pass -------------------------------------------
    def project_kv(self, keys: torch.Tensor, values: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected keys and values, each (b, h_kv, m, p): what a KV cache stores."""
        with region("projections"):
            if self.backend == "loop":
                # One key/value head at a time through the sliced projections.
                ks, vs = [], []
                for j in range(self.kv_heads):
                    rows = slice(j * self.p, (j + 1) * self.p)
                    ks.append(keys @ self.W_k.weight[rows].T)  # (b, m, p)
                    vs.append(values @ self.W_v.weight[rows].T)
                return torch.stack(ks, dim=1), torch.stack(vs, dim=1)
            return self.split_heads(self.W_k(keys), self.kv_heads), \
                self.split_heads(self.W_v(values), self.kv_heads)

    def attend(self, queries: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Output (b, n, d) of queries (b, n, d) over projected k, v (b, h_kv, m, p)."""
        if self.backend == "loop":
            return self._attend_loop(queries, k, v, valid_lens)
        with region("projections"):
            q = self.split_heads(self.W_q(queries), self.heads)  # (b, h, n, p)
        if self.backend == "fused":
            out = self._sdpa(q, k, v, valid_lens)
        else:
            out = self._attend_batched(q, k, v, valid_lens)
        with region("output"):
            return self.W_o(self.merge_heads(out))

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        if self.backend == "fused" and queries is keys and keys is values:
            return self._fused_self_attention(queries, valid_lens)
        k, v = self.project_kv(keys, values)
        return self.attend(queries, k, v, valid_lens)

    # ----- backends ---------------------------------------------------------------------
    def _attend_batched(self, q, k, v, valid_lens):
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
        with region("scores"):
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.p)  # (b*h, n, m)
        with region("softmax"):
            weights = self.dropout(masked_softmax(scores, valid_lens))
        with region("mixing"):
            out = torch.bmm(weights, v)  # (b*h, n, p)
        return out.reshape(b, h, n, self.p)

    def _attend_loop(self, queries, k, v, valid_lens):
        g = self.heads // self.kv_heads
        out = None
        for i in range(self.heads):
            cols = slice(i * self.p, (i + 1) * self.p)
            with region("projections"):
                q_i = queries @ self.W_q.weight[cols].T  # (b, n, p): head i's query features
            with region("scores"):
                scores = torch.bmm(q_i, k[:, i // g].transpose(1, 2)) / math.sqrt(self.p)
            with region("softmax"):
                weights = self.dropout(masked_softmax(scores, valid_lens))  # (b, n, m)
            with region("mixing"):
                head = torch.bmm(weights, v[:, i // g])  # (b, n, p)
            with region("output"):
                # Head i's output enters W_o through input features i*p ... (i+1)*p - 1.
                part = head @ self.W_o.weight[:, cols].T  # (b, n, d)
                out = part if out is None else out + part
        return out

    def _sdpa(self, q, k, v, valid_lens):
        # 4-D (b, h, n, p) inputs: on CPU this reaches the flash kernel; 3-D input would
        # silently take the slow math path.
        mask = None if valid_lens is None else key_mask(valid_lens, q.shape[2], k.shape[2])
        with region("attention"):
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0.0,
                enable_gqa=self.kv_heads != self.heads)

    def _fused_self_attention(self, x, valid_lens):
        # One matmul for Q, K and V when one tensor feeds all three (as torch's own
        # MultiheadAttention fast path does).
        with region("projections"):
            w = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
            kv_width = self.kv_heads * self.p
            q, k, v = F.linear(x, w).split([self.d, kv_width, kv_width], dim=-1)
        out = self._sdpa(self.split_heads(q, self.heads), self.split_heads(k, self.kv_heads),
                         self.split_heads(v, self.kv_heads), valid_lens)
        with region("output"):
            return self.W_o(self.merge_heads(out))


class ReferenceAttention(nn.Module):
    """``torch.nn.MultiheadAttention`` (need_weights=False, no bias) behind our interface."""

    def __init__(self, source: MultiHeadAttention) -> None:
        super().__init__()
        if source.kv_heads != source.heads:
            raise ValueError("torch.nn.MultiheadAttention supports MHA only")
        self.heads = source.heads
        self.mha = nn.MultiheadAttention(source.d, source.heads, dropout=source.dropout.p,
                                         bias=False, batch_first=True)
        with torch.no_grad():
            self.mha.in_proj_weight.copy_(torch.cat(
                [source.W_q.weight, source.W_k.weight, source.W_v.weight]))
            self.mha.out_proj.weight.copy_(source.W_o.weight)

    def forward(self, queries, keys, values, valid_lens=None):
        padding, attn_mask = None, None
        if valid_lens is not None:
            m = keys.shape[1]
            if valid_lens.dim() == 1:
                # True marks a key to ignore.
                padding = torch.arange(m, device=keys.device)[None, :] >= valid_lens[:, None]
            else:
                # Per-query lengths need a (b*h, n, m) mask, rows ordered batch-major.
                allowed = key_mask(valid_lens, queries.shape[1], m)  # (b, 1, n, m)
                attn_mask = ~allowed.expand(-1, self.heads, -1, -1).reshape(
                    -1, queries.shape[1], m)
        out, _ = self.mha(queries, keys, values, key_padding_mask=padding,
                          attn_mask=attn_mask, need_weights=False)
        return out


# ----- building and running a config ----------------------------------------------------
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_model(config: AttentionConfig, weights: dict[str, np.ndarray] | None = None
                ) -> nn.Module:
    """The module for ``config`` with ``weights`` (default: ``init_weights(config)``)."""
    weights = init_weights(config) if weights is None else weights
    backend = "batched" if config.backend == "reference" else config.backend
    model = MultiHeadAttention(config.d, config.heads, config.kv_heads, backend, config.dropout)
    with torch.no_grad():
        for name, value in weights.items():
            getattr(model, name).weight.copy_(torch.from_numpy(value))
    if config.backend == "reference":
        model = ReferenceAttention(model)
    return model.to(device=config.device, dtype=TORCH_DTYPES[config.dtype])


def to_tensors(config: AttentionConfig, arrays: dict[str, np.ndarray | None]
               ) -> dict[str, torch.Tensor | None]:
    """numpy inputs -> tensors on the config's device/dtype; keeps self-attention's
    single tensor shared by queries, keys and values."""
    out: dict[str, torch.Tensor | None] = {}
    seen: dict[int, torch.Tensor] = {}
    for name, value in arrays.items():
        if value is None:
            out[name] = None
        elif id(value) in seen:
            out[name] = seen[id(value)]
        else:
            t = torch.from_numpy(value).to(config.device)
            if t.is_floating_point():
                t = t.to(TORCH_DTYPES[config.dtype])
            out[name] = seen[id(value)] = t
    return out


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def make_step(config: AttentionConfig, seed: int = 0) -> Callable[[], Any]:
    """A ready-to-call step for ``config``: one forward, forward+backward, or decode step,
    synchronised with the device before it returns."""
    model = build_model(config, init_weights(config, seed))
    x = to_tensors(config, make_inputs(config, seed + 1))
    q, k, v, lens = x["queries"], x["keys"], x["values"], x["valid_lens"]
    device = config.device

    if config.mode == "train":
        model.train()

        def step() -> Any:
            model.zero_grad(set_to_none=True)
            out = model(q, k, v, lens)
            out.float().sum().backward()
            synchronize(device)
            return out

        return step

    model.eval()
    if config.mode == "decode":
        with torch.inference_mode():
            k_cache, v_cache = model.project_kv(k, v)

        def step() -> Any:
            with torch.inference_mode():
                out = model.attend(q, k_cache, v_cache, lens)
            synchronize(device)
            return out

        return step

    def step() -> Any:
        with torch.inference_mode():
            out = model(q, k, v, lens)
        synchronize(device)
        return out

    return step
