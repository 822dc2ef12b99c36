"""A config's Flax NNX layer and its compiled, blocking step: built from the description of
the config's registered backend (``mhabench.core.backends``) by :data:`BUILDERS`, fed the
shared inputs (``mhabench.core.inputs``), compiled ahead of time (no compile inside a timed
call). The layers themselves are in ``mhabench.layers.jax.attention`` (and ``blockwise``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mhabench.core import backends
from mhabench.core.backends import Backend
from mhabench.core.config import AttentionConfig
from mhabench.core.inputs import init_weights, make_inputs, make_upstream
from mhabench.layers.jax.attention import MultiHeadAttention, ReferenceAttention, placeholder_init
from mhabench.layers.jax.decode import compile_traced, make_decode_step

JAX_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def jax_device(device: str) -> jax.Device:
    return jax.devices("cpu" if device == "cpu" else "gpu")[0]


def build_layer(config: AttentionConfig, weights: dict[str, np.ndarray], layout: str,
                core: tuple[Callable[..., Any], bool] | None = None,
                dropout: float | None = None, kernel: str | None = None
                ) -> MultiHeadAttention:
    """mhabench's layer in ``layout`` (loop, batched, fused) with ``weights``, in the
    config's dtype (``build_model`` places it); ``core`` as in :class:`MultiHeadAttention`."""
    model = MultiHeadAttention(config.d, config.heads, config.kv_heads, layout,
                               config.dropout if dropout is None else dropout,
                               dtype=JAX_DTYPES[config.dtype], self_attention=not config.cross,
                               core=core, kernel=kernel, kernel_init=placeholder_init,
                               head_dim=config.head_dim, scale=config.scale)
    model.load_weights(weights)
    return model


def build_reference(config: AttentionConfig, weights: dict[str, np.ndarray]) -> nnx.Module:
    """``flax.nnx.MultiHeadAttention`` with ``weights``."""
    return ReferenceAttention(build_layer(config, weights, "batched", dropout=0.0),
                              config.dropout, dtype=JAX_DTYPES[config.dtype])


def _blockwise(config: AttentionConfig, weights: dict[str, np.ndarray], _: Backend
               ) -> nnx.Module:
    from mhabench.layers.jax.blockwise import blockwise_attention

    return build_layer(config, weights, "batched",
                       core=(backends.checked(blockwise_attention), True))


# What builds each of mhabench's own JAX backends (``Backend.impl``), and a plug-in's
# attention function ("attend"): the layouts' are shared.
BUILDERS: dict[str, backends.Builder] = {
    **backends.layer_builders(build_layer),
    "reference": lambda config, weights, _: build_reference(config, weights),
    "blockwise": _blockwise}


def build_model(config: AttentionConfig, weights: dict[str, np.ndarray] | None = None
                ) -> nnx.Module:
    """The module for ``config`` with ``weights`` (default: ``init_weights(config)``), built
    from the config's registered backend (``mhabench.core.backends``), in evaluation mode
    (deterministic); ``make_step`` switches train configs to training."""
    weights = init_weights(config) if weights is None else weights
    with jax.default_device(jax_device(config.device)):
        model = backends.build(config, weights, BUILDERS)
    model.eval()
    return model


def to_arrays(config: AttentionConfig, arrays: dict[str, np.ndarray | None]
              ) -> dict[str, jax.Array | None]:
    """numpy inputs -> arrays on the config's device/dtype; one numpy array feeding
    several inputs (self-attention) stays one array."""
    dev, dtype = jax_device(config.device), JAX_DTYPES[config.dtype]
    out: dict[str, jax.Array | None] = {}
    seen: dict[int, jax.Array] = {}
    for name, value in arrays.items():
        if value is None or id(value) in seen:
            out[name] = None if value is None else seen[id(value)]
            continue
        cast = value.astype(dtype) if value.dtype == np.float32 else value
        out[name] = seen[id(value)] = jax.device_put(cast, dev)
    return out


def upstream_gradient(config: AttentionConfig, seed: int = 0) -> jax.Array:
    """The output gradient (b, n, d) a training step back-propagates (``inputs``)."""
    return to_arrays(config, {"g": make_upstream(config, seed + 2)})["g"]


def make_step(config: AttentionConfig, seed: int = 0) -> Callable[[], Any]:
    """A ready-to-call, compiled step for ``config`` that blocks until its result is ready:
    a forward pass; a training step (gradients w.r.t. the parameters and the inputs, with a
    fresh dropout key each call, threaded through the compiled function); or a decode-mode
    step (``mhabench.layers.jax.decode``). Compilation happens here, outside any clock."""
    model = build_model(config, init_weights(config, seed))
    x = to_arrays(config, make_inputs(config, seed + 1))
    if config.mode == "train":
        model.train()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if config.mode in ("decode", "prefix"):
        return make_decode_step(config, graphdef, params, rest, x)

    # One jit argument per distinct input array, so the model sees which one tensor feeds
    # queries, keys and values (separate arguments would be separate tracers).
    names = ("queries", "keys", "values")
    distinct = list({id(x[n]): x[n] for n in names}.values())
    wiring = [next(i for i, a in enumerate(distinct) if a is x[n]) for n in names]
    lens = x["valid_lens"]

    def call(model, inputs, lens):
        return model(*(inputs[i] for i in wiring), lens, **config.call_kwargs)

    def forward(params, rest, inputs, lens):
        return call(nnx.merge(graphdef, params, rest), inputs, lens)

    if config.mode != "train":
        compiled = compile_traced(forward, (params, rest, distinct, lens))

        def step() -> Any:
            return jax.block_until_ready(compiled(params, rest, distinct, lens))
    else:
        # The gradient arriving from the layers above: a fixed array, not the constant
        # ones of sum(), which XLA would fold into reductions and so skip matmuls.
        upstream = upstream_gradient(config, seed)

        def train(params, rest, key, inputs, lens, upstream):
            key, dropout_key = jax.random.split(key)  # the next step's key goes back out

            def layer(params, inputs):
                # Fresh variables inside the differentiated trace (dropout counts its calls).
                model = nnx.merge(graphdef, params, rest, copy=True)
                if config.dropout:
                    nnx.reseed(model, dropout=dropout_key)  # this step's masks
                return call(model, inputs, lens)

            # The output goes out too: the layers above need it (and XLA would otherwise
            # drop the output projection, which no gradient needs).
            out, backward = jax.vjp(layer, params, inputs)
            return (out, *backward(upstream)), key

        state = {"key": jax.random.key(seed)}
        compiled = compile_traced(train, (params, rest, state["key"], distinct, lens, upstream))

        def step() -> Any:
            result, state["key"] = compiled(params, rest, state["key"], distinct, lens,
                                            upstream)
            return jax.block_until_ready(result)  # (output, parameter grads, input grads)

    step.compiled = compiled  # XLA cost analysis, HLO text and jaxpr for the tests
    return step
