"""The ``compiled`` backend: ``torch.compile`` of the chapter's batched layout.

:class:`CompiledAttention` is mhabench's :class:`MultiHeadAttention` in layout "batched"
(same weights, ``load_weights``, ``weight_grads``, ``.to()``) whose entry points, the
methods the steps call (``forward``, ``attend``, ``decode_step``), each run through
``torch.compile(fullgraph=True, dynamic=False)``: one graph per method, shapes
specialised, no graph breaks (a break is an error at the first call).

Recompiles are errors. A method compiles on its first call (a step's first warm-up call);
every later call runs under ``torch.compiler.set_stance("fail_on_recompile")``, so a call
that would compile again (another shape, dtype, grad mode, a profiler switched on: any
failed guard) raises instead of putting the compiler into a timing.

Decode: ``decode_step`` is compiled whole, the in-place write into the KV cache included.
Dynamo specialises on the cache's Python-int position; the decode step rewinds it to the
same slot before every call (``mhabench.layers.torch.decode``), so it stays one graph. A loop
that advanced the position would recompile on each token, and so raises here.

Layers of one config share their graphs: dynamo keeps compiled code per code object (the
methods of :class:`MultiHeadAttention`) with the parameters as inputs, so a second layer
of a config seen before compiles nothing. Each new config adds one entry there; a first
call may add past dynamo's recompile limit (8, meant to catch runaway recompiles, which
the stance above catches here), so that call raises the limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from mhabench.core.config import AttentionConfig
from mhabench.layers.torch.attention import MultiHeadAttention

# Entries per code object a first call may add to (one per config, mode and grad mode).
FIRST_CALL_LIMIT = 4096


class CompiledAttention(MultiHeadAttention):
    """The batched layout with its entry points compiled (see the module docstring)."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None,
                 dropout: float = 0.0, head_dim: int | None = None,
                 scale: float | None = None) -> None:
        super().__init__(d, heads, kv_heads, "batched", dropout, head_dim=head_dim,
                         scale=scale)
        self._compiled: dict[str, Callable[..., Any]] = {}

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        eager = getattr(MultiHeadAttention, name)
        if torch.compiler.is_compiling():
            # Called from inside another compiled method: trace straight through.
            return eager(self, *args, **kwargs)
        compiled = self._compiled.get(name)
        if compiled is None:  # the first call compiles
            compiled = torch.compile(eager.__get__(self), fullgraph=True, dynamic=False)
            self._compiled[name] = compiled
            with torch._dynamo.config.patch(recompile_limit=FIRST_CALL_LIMIT,
                                            accumulated_recompile_limit=FIRST_CALL_LIMIT):
                return compiled(*args, **kwargs)
        with torch.compiler.set_stance("fail_on_recompile"):
            return compiled(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._call("forward", *args, **kwargs)

    def attend(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._call("attend", *args, **kwargs)

    def decode_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self._call("decode_step", *args, **kwargs)


def build_layer(config: AttentionConfig, weights: dict[str, np.ndarray]) -> CompiledAttention:
    """The compiled layer for ``config`` with ``weights`` (CPU, float32; nothing compiles
    before the first call, so ``build_model``'s ``.to()`` comes first)."""
    model = CompiledAttention(config.d, config.heads, config.kv_heads, config.dropout,
                              config.head_dim, config.scale)
    model.load_weights(weights)
    return model
