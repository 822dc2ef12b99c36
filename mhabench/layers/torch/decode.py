"""PyTorch decoding: a preallocated KV cache and the steps of the decode modes.

``mode="decode"`` (self-attention): the layer's ``decode_step`` projects the new token's q,
k and v, writes k and v into the cache in place and attends over the grown prefix. The
cache holds m + 1 positions, filled with the projected prefix once at build time; every
timed call rewinds to position m first, so each call writes slot m and attends over
m + 1 positions: identical work per call, and the cache never grows.
``mode="decode", cross=True``: the source keys/values are projected once; the step only
attends to them (Exercise 7.2). ``mode="prefix"``: no cache; each step recomputes causal
attention over the m + 1 tokens and keeps the last position's output.

This module knows the layer only through its methods (``project_kv``, ``attend``,
``decode_step``, ``forward``), so it imports nothing from ``attention``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhabench.core.config import AttentionConfig


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@dataclass
class KVCache:
    """Keys and values, each (b, h_kv, capacity, p); positions < ``pos`` are valid."""

    k: torch.Tensor
    v: torch.Tensor
    pos: int = 0

    @classmethod
    def prefilled(cls, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> KVCache:
        """A cache of ``capacity`` positions holding projected keys/values (b, h_kv, m, p)
        at 0 ... m - 1."""
        b, kv_heads, m, p = keys.shape
        if capacity < m:
            raise ValueError(f"capacity={capacity} is smaller than the prefix of {m} tokens")
        k = keys.new_zeros(b, kv_heads, capacity, p)
        v = values.new_zeros(b, kv_heads, capacity, p)
        k[:, :, :m], v[:, :, :m] = keys, values
        return cls(k, v, m)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (b, h_kv, 1, p) at ``pos`` in place and advance; returns views of the
        valid prefix (b, h_kv, pos + 1, p)."""
        if self.pos >= self.k.shape[2]:
            raise ValueError(f"the KV cache is full ({self.k.shape[2]} positions)")
        self.k[:, :, self.pos] = k[:, :, 0]
        self.v[:, :, self.pos] = v[:, :, 0]
        self.pos += 1
        return self.k[:, :, :self.pos], self.v[:, :, :self.pos]


def make_decode_step(config: AttentionConfig, model: nn.Module,
                     x: dict[str, torch.Tensor | None]) -> Callable[[], Any]:
    """The timed step of a ``decode`` or ``prefix`` config: ``x`` holds the new token
    (``queries``, (b, 1, d)) and the prefix or source (``keys`` = ``values``, (b, m, d))."""
    token, source, lens, device, m = x["queries"], x["keys"], x["valid_lens"], \
        config.device, config.m
    with torch.inference_mode():
        if config.mode == "prefix":
            sequence = torch.cat([source, token], dim=1)  # (b, m + 1, d), built once

            def run() -> torch.Tensor:
                return model(sequence, sequence, sequence, causal=True)[:, -1:]
        elif config.cross:
            # Cached once, contiguous (b, h_kv, m, p) as a cache is stored: the projection
            # returns strided views, which bmm would copy on every step.
            k_src, v_src = (t.contiguous() for t in model.project_kv(source, x["values"]))

            def run() -> torch.Tensor:
                return model.attend(token, k_src, v_src, lens)
        else:
            cache = KVCache.prefilled(*model.project_kv(source, source), capacity=m + 1)

            def run() -> torch.Tensor:
                cache.pos = m  # the fixed fill level: every call writes slot m
                return model.decode_step(token, cache)

    def step() -> Any:
        with torch.inference_mode():
            out = run()
        synchronize(device)
        return out

    return step
