"""A config's PyTorch layer and its timed step: built from the description of the config's
registered backend (``mhabench.core.backends``) by :data:`BUILDERS`, fed the shared inputs
(``mhabench.core.inputs``), and synchronised with the device before a call returns. The
layers themselves are in ``mhabench.layers.torch.attention`` (and ``compiled``, ``flex``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from mhabench.core import backends
from mhabench.core.backends import Backend
from mhabench.core.config import AttentionConfig
from mhabench.core.inputs import init_weights, make_inputs, make_upstream
from mhabench.layers.torch.attention import MultiHeadAttention, ReferenceAttention
from mhabench.layers.torch.decode import make_decode_step, synchronize

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_layer(config: AttentionConfig, weights: dict[str, np.ndarray], layout: str,
                core: tuple[Callable[..., Any], bool] | None = None,
                kernel: str | None = None) -> MultiHeadAttention:
    """mhabench's layer in ``layout`` (loop, batched, fused) with ``weights``, on the CPU in
    float32 (``build_model`` moves it); ``core`` and ``kernel`` as in
    :class:`MultiHeadAttention`."""
    model = MultiHeadAttention(config.d, config.heads, config.kv_heads, layout,
                               config.dropout, core=core, kernel=kernel,
                               head_dim=config.head_dim, scale=config.scale)
    model.load_weights(weights)
    return model


def build_reference(config: AttentionConfig, weights: dict[str, np.ndarray]) -> nn.Module:
    """``torch.nn.MultiheadAttention`` with ``weights``."""
    return ReferenceAttention(build_layer(config, weights, "batched"))


def _compiled(config: AttentionConfig, weights: dict[str, np.ndarray], _: Backend
              ) -> nn.Module:
    from mhabench.layers.torch import compiled  # torch.compile only when it runs

    return compiled.build_layer(config, weights)


def _flex(config: AttentionConfig, weights: dict[str, np.ndarray], _: Backend) -> nn.Module:
    from mhabench.layers.torch.flex import CompiledFlex

    # Grouped heads passed as they are; nothing compiles before the first call. Ours, so
    # no shape check, and no cached wrapper that would keep every layer's graphs alive.
    return build_layer(config, weights, "batched", core=(CompiledFlex(), True))


# What builds each of mhabench's own torch backends (``Backend.impl``), and a plug-in's
# attention function ("attend"): the layouts' are shared.
BUILDERS: dict[str, backends.Builder] = {
    **backends.layer_builders(build_layer),
    "reference": lambda config, weights, _: build_reference(config, weights),
    "compiled": _compiled, "flex": _flex}


def build_model(config: AttentionConfig, weights: dict[str, np.ndarray] | None = None
                ) -> nn.Module:
    """The module for ``config`` with ``weights`` (default: ``init_weights(config)``), built
    from the config's registered backend (``mhabench.core.backends``)."""
    weights = init_weights(config) if weights is None else weights
    model = backends.build(config, weights, BUILDERS)
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


def make_step(config: AttentionConfig, seed: int = 0) -> Callable[[], Any]:
    """A ready-to-call step for ``config`` (forward, forward+backward, or a decode-mode
    step, see ``mhabench.core.config.MODES``), synchronised with the device before it returns.
    A forced SDPA kernel that cannot take the cell raises ValueError here (n/a)."""
    step = _make_step(config, seed)
    if backends.get(config.framework, config.backend).sdpa_kernel is not None:
        check_forced_kernel(config, step)
    return step


def _make_step(config: AttentionConfig, seed: int) -> Callable[[], Any]:
    model = build_model(config, init_weights(config, seed))
    x = to_tensors(config, make_inputs(config, seed + 1))
    if config.mode in ("decode", "prefix"):
        return make_decode_step(config, model.eval(), x)
    device = config.device

    if config.mode == "train":
        model.train()
        # The input needs its gradient too, as for a layer inside a network. Leaf tensors
        # made once; self-attention keeps one tensor for queries, keys and values.
        leaves: dict[int, torch.Tensor] = {}
        for name in ("queries", "keys", "values"):
            leaves.setdefault(id(x[name]), x[name].detach().requires_grad_())
        q, k, v = (leaves[id(x[name])] for name in ("queries", "keys", "values"))
        lens = x["valid_lens"]
        # The gradient arriving from the layers above (a fixed array, as in the JAX steps).
        upstream = to_tensors(config, {"g": make_upstream(config, seed + 2)})["g"]

        def step() -> Any:
            model.zero_grad(set_to_none=True)
            for leaf in leaves.values():
                leaf.grad = None
            out = model(q, k, v, lens, **config.call_kwargs)
            out.backward(upstream)
            synchronize(device)
            return out

        return step

    model.eval()
    q, k, v, lens = x["queries"], x["keys"], x["values"], x["valid_lens"]

    def step() -> Any:
        with torch.inference_mode():
            out = model(q, k, v, lens, **config.call_kwargs)
        synchronize(device)
        return out

    return step


def check_forced_kernel(config: AttentionConfig, step: Callable[[], Any]) -> None:
    """Run ``step`` once; if its forced SDPA kernel cannot take the cell, raise ValueError
    with torch's reasons (its warnings), so the cell is n/a instead of falling back."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            step()
        except RuntimeError as err:
            reasons = " ".join(dict.fromkeys(
                re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", str(w.message)).strip()
                for w in caught))
            raise ValueError(f"{config.id}: backend={config.backend!r} cannot run this cell: "
                             f"{reasons or err}") from err
