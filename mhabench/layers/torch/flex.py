"""The ``flex`` backend: FlexAttention (``torch.nn.attention.flex_attention``) compiled.

Why: FlexAttention writes a masked attention as a small Python ``mask_mod`` that
``torch.compile`` turns into one tiled kernel which skips the key blocks the mask rules
out: the compiled alternative to SDPA for masks SDPA has no flag for (per-query lengths,
offsets).

What: mhabench's batched layer (eager projections, KV cache, output projection, as in
``batched``) whose scores, softmax and mixing are :func:`flex_attend`, compiled per layer
by :class:`CompiledFlex` (``fullgraph=True, dynamic=False``; its later calls run under
the ``fail_on_recompile`` stance, as in :mod:`mhabench.layers.torch.compiled`). Compiling the
attention function, not the whole layer, is FlexAttention's documented use; it also
sidesteps an inductor CPU bug: the C++ flex template reads each input's buffer as 4-D, so
q, k, v that are views of a projection's 2-D matmul inside the same graph fail to lower.

- Grouped key/value heads go in as they are, through ``enable_gqa=True`` (no repeat).
- ``valid_lens`` and ``causal`` become one ``mask_mod`` (:func:`key_limit`); the block
  mask is built inside the compiled function on every call, as a model with new lengths
  per batch builds it (not cached).
- A row with no valid key is the mean of the values, as mhabench's reference gives it
  (its masked scores are -1e6, not -inf; flex would give 0): replaced after the kernel.

On CPU, inductor lowers ``flex_attention`` to its C++ flex template, which walks q and kv
tiles with an online softmax: the (b, h, n, m) map is never written
(``materialises=False``). No train mode: FlexAttention has no backward on CPU (torch 2.13
raises for inputs that require grad) and a backend's modes are the same on every device.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from mhabench.layers.torch.compiled import FIRST_CALL_LIMIT


def key_limit(valid_lens: torch.Tensor | None, causal: bool, n: int, m: int,
              b: torch.Tensor, q_idx: torch.Tensor) -> torch.Tensor:
    """How many leading keys query ``q_idx`` of row ``b`` sees (keys ``< limit``): its
    valid length, capped at its causal position + 1. float32 (exact below 2**24): an int64
    compare inside ``mask_mod`` hits an inductor CPU codegen bug (VecMask<long> vs
    VecMask<float> in the padded block-mask kernel, torch 2.13)."""
    limit = torch.full_like(q_idx, m)
    if valid_lens is not None:
        limit = valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, q_idx]
    if causal:
        limit = torch.minimum(limit, q_idx + (m - n + 1))
    return limit.to(torch.float32)


def flex_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                valid_lens: torch.Tensor | None = None, causal: bool = False,
                scale: float | None = None) -> torch.Tensor:
    """Attention of q (b, h, n, p) over k, v (b, h_kv, m, p) with h_kv | h, masked by
    ``valid_lens`` (None, (b,) or (b, n)) and ``causal``, scores times ``scale`` (None:
    1 / sqrt(p)); out (b, h, n, p), equal to mhabench's reference (rows with no valid key:
    the mean of all values)."""
    b, h, n, _ = q.shape
    m = k.shape[2]
    gqa = k.shape[1] != h
    if valid_lens is None and not causal:
        return flex_attention(q, k, v, scale=scale, enable_gqa=gqa)

    def mask_mod(b_idx, h_idx, q_idx, kv_idx):
        return kv_idx.to(torch.float32) < key_limit(valid_lens, causal, n, m, b_idx, q_idx)

    block_mask = create_block_mask(mask_mod, b, None, n, m, device=q.device)
    out = flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa)
    # Rows with no valid key (flex: 0) are uniform over all keys in the reference.
    rows = torch.arange(b, device=q.device)[:, None]
    limits = key_limit(valid_lens, causal, n, m, rows, torch.arange(n, device=q.device))
    empty = (limits.expand(b, n) <= 0)[:, None, :, None]  # (b, 1, n, 1)
    mean = v.mean(dim=2, keepdim=True).repeat_interleave(h // k.shape[1], dim=1)
    return torch.where(empty, mean, out)


class CompiledFlex:
    """:func:`flex_attend` under ``torch.compile(fullgraph=True, dynamic=False)`` for one
    layer: its first call compiles (with dynamo's recompile limit raised, as layers of
    every config share ``flex_attend``'s cache, see :mod:`mhabench.layers.torch.compiled`); every
    later call runs under the ``fail_on_recompile`` stance, so a recompile raises."""

    def __init__(self) -> None:
        # No epilogue fusion: inductor's CPU flex template cannot take one (it raises
        # NotImplementedError when the empty-row fix-up would be fused into it).
        self.compiled = torch.compile(flex_attend, fullgraph=True, dynamic=False,
                                      options={"epilogue_fusion": False})
        self.calls = 0

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 valid_lens: torch.Tensor | None = None, causal: bool = False,
                 scale: float | None = None) -> torch.Tensor:
        if valid_lens is not None:
            # The template's mask subgraph reads only graph inputs: a strided view of the
            # lengths would be copied inside the graph, which its lowering rejects.
            valid_lens = valid_lens.contiguous()
        self.calls += 1
        if self.calls == 1:
            with torch._dynamo.config.patch(recompile_limit=FIRST_CALL_LIMIT,
                                            accumulated_recompile_limit=FIRST_CALL_LIMIT):
                return self.compiled(q, k, v, valid_lens, causal, scale)
        with torch.compiler.set_stance("fail_on_recompile"):
            return self.compiled(q, k, v, valid_lens, causal, scale)

