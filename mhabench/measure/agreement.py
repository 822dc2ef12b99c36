"""Does a backend compute multi-head attention? Its outputs against a reference backend.

Every backend, built-in or registered (``mhabench.core.backends``), runs the same small cells:
self- and cross-attention, masked (valid_lens), grouped (GQA) and single (MQA) key/value
heads, a decode step, the no-cache prefix step and a training step, heads whose width is
set apart from d with a softmax scale of their own (the ``general`` variants), with the shared
weights and inputs of ``mhabench.core.inputs``. Outputs must match the reference (torch's
batched layer, the chapter's layout) to :data:`ATOL` in float32. A cell the backend does not
support is n/a with the config's reason. The test suite and ``mhabench check`` both call
:func:`check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mhabench.core.config import AttentionConfig
from mhabench.core.inputs import init_weights, make_inputs

# float32 through different summation orders: outputs are O(1), so 1e-4 absolute is tight.
ATOL = 1e-4
BASE = {"batch": 3, "n": 7, "d": 24, "heads": 4}
VARIANTS: dict[str, dict[str, Any]] = {
    "self": {},
    "cross": {"cross": True, "m": 11},
    "masked": {"masked": True},
    "cross-masked": {"cross": True, "m": 13, "masked": True},
    "gqa": {"kv_heads": 2, "masked": True},
    "mqa": {"kv_heads": 1, "cross": True, "m": 9},
    "decode": {"mode": "decode", "n": 1, "m": 9, "kv_heads": 2},
    "prefix": {"mode": "prefix", "n": 1, "m": 9},
    "train": {"mode": "train", "masked": True, "kv_heads": 2},
    "causal": {"causal": True},
    "causal-train": {"mode": "train", "causal": True, "kv_heads": 2},
    # A published model's shape, scaled down: heads of width p with h p != d (4 x 8 = 32
    # over d = 24), grouped key/value heads and a softmax scale other than 1/sqrt(p).
    "general": {"kv_heads": 2, "head_dim": 8, "scale": 0.2, "masked": True},
    "general-mha": {"head_dim": 8, "cross": True, "m": 11},
    "general-decode": {"mode": "decode", "n": 1, "m": 9, "kv_heads": 2, "head_dim": 8,
                       "scale": 0.2},
    "general-train": {"mode": "train", "causal": True, "kv_heads": 2, "head_dim": 8,
                      "scale": 0.2},
}
REFERENCE = ("torch", "batched")


@dataclass(frozen=True)
class Agreement:
    """One variant of one backend: the largest absolute error, or why it is n/a."""

    variant: str
    config_id: str
    max_error: float | None  # None: n/a, or it raised
    reason: str = ""  # why n/a, or what it raised
    raised: bool = False

    @property
    def ok(self) -> bool:
        if self.raised:
            return False
        return self.max_error is None or self.max_error <= ATOL


def config_for(framework: str, backend: str, variant: str,
               shape: dict[str, Any] | None = None, **extra: Any) -> AttentionConfig:
    """The variant's config (raises ValueError where the backend does not support it);
    ``shape`` replaces :data:`BASE`'s width and heads."""
    return AttentionConfig(**{**BASE, **(shape or {}), **VARIANTS[variant],
                              "framework": framework, "backend": backend, **extra})


def forward_output(config: AttentionConfig, weights: dict[str, np.ndarray],
                   queries: np.ndarray, keys: np.ndarray, values: np.ndarray,
                   valid_lens: np.ndarray | None = None) -> np.ndarray:
    """Output (b, n, d) of a forward pass as float64 numpy; ``keys is values`` feeds one
    tensor (self-attention). float32 matmuls are true float32, as in every timed step."""
    from mhabench.measure.timing import float32_matmul_precision

    with float32_matmul_precision(config.framework):
        if config.framework == "torch":
            import torch

            from mhabench.layers.torch.steps import build_model, to_tensors

            model = build_model(config, weights).eval()
            x = to_tensors(config, {"q": queries, "k": keys, "v": values, "l": valid_lens})
            with torch.no_grad():
                out = model(x["q"], x["k"], x["v"], x["l"], **config.call_kwargs)
            return out.double().cpu().numpy()
        from mhabench.layers.jax.steps import build_model, to_arrays

        model = build_model(config, weights)
        x = to_arrays(config, {"q": queries, "k": keys, "v": values, "l": valid_lens})
        return np.asarray(model(x["q"], x["k"], x["v"], x["l"], **config.call_kwargs),
                          dtype=np.float64)


def step_output(config: AttentionConfig) -> np.ndarray:
    """The output of one call of the config's timed step (decode, prefix, train: the
    layer's output) as float64 numpy."""
    from mhabench.measure.timing import float32_matmul_precision

    with float32_matmul_precision(config.framework):
        if config.framework == "torch":
            from mhabench.layers.torch.steps import make_step

            return make_step(config)().detach().double().cpu().numpy()
        from mhabench.layers.jax.steps import make_step

        out = make_step(config)()
        return np.asarray(out[0] if isinstance(out, tuple) else out, dtype=np.float64)


def output(config: AttentionConfig) -> np.ndarray:
    """The variant's output: a forward pass, or the step of the other modes."""
    if config.mode != "forward":
        return step_output(config)
    x = make_inputs(config)
    return forward_output(config, init_weights(config), x["queries"], x["keys"], x["values"],
                          x["valid_lens"])


def check(framework: str, backend: str, variants: tuple[str, ...] | None = None,
          device: str = "cpu", shape: dict[str, Any] | None = None) -> list[Agreement]:
    """Every variant of ``backend`` against :data:`REFERENCE` on ``device``. ``shape``: a
    model's d, heads, kv_heads, head_dim and scale (``mhabench.core.models``) in place of
    :data:`BASE`'s in every variant, where the variant sets no head width of its own
    (those variants are left out by default); the kv_heads a variant sets still apply."""
    if variants is None:
        variants = tuple(v for v in VARIANTS if shape is None or "head_dim" not in VARIANTS[v])
    rows = []
    for variant in variants:
        try:
            config = config_for(framework, backend, variant, device=device, shape=shape)
        except ValueError as err:
            rows.append(Agreement(variant, "", None, str(err)))
            continue
        expected = output(config.replace(framework=REFERENCE[0], backend=REFERENCE[1],
                                          device="cpu"))
        try:  # a backend that crashes on a variant fails that variant, not the check
            got = output(config)
            if got.shape != expected.shape:
                raise ValueError(f"output shape {got.shape}, expected {expected.shape}")
        except Exception as err:  # noqa: BLE001 (any error of a user's code)
            rows.append(Agreement(variant, config.id, None,
                                  f"raised {type(err).__name__}: {err}", raised=True))
            continue
        rows.append(Agreement(variant, config.id, float(np.abs(got - expected).max())))
    return rows
