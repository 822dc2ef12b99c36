"""Decoding: the KV-cache step writes into its cache and attends over the grown prefix, so a
sequence of steps equals causal attention over the prefix, in every backend of both
frameworks, for MHA, GQA and MQA; the timed steps repeat identical, bounded work; the
cached, recomputed and no-cache steps give the same token output."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import run_forward

from mhabench.core.config import AttentionConfig
from mhabench.core.inputs import init_weights

ATOL = 1e-4
BACKENDS = ("loop", "batched", "fused")
KV_HEADS = {"mha": 4, "gqa": 2, "mqa": 1}
T, START = 9, 3  # sequence length; tokens already in the cache before decoding starts


def sequence_config(framework: str, backend: str, kv_heads: int) -> AttentionConfig:
    return AttentionConfig(framework=framework, backend=backend, batch=2, n=T, d=24, heads=4,
                           kv_heads=kv_heads)


def sequence(config: AttentionConfig) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((config.batch, T, config.d)).astype(
        np.float32)


def causal_forward(config: AttentionConfig, x: np.ndarray) -> np.ndarray:
    """The layer's causal self-attention over the whole sequence, (b, T, d)."""
    weights = init_weights(config)
    if config.framework == "torch":
        import torch

        from mhabench.layers.torch.steps import build_model

        t = torch.from_numpy(x)
        with torch.no_grad():
            return build_model(config, weights).eval()(t, t, t, causal=True).double().numpy()
    import jax.numpy as jnp

    from mhabench.layers.jax.steps import build_model

    a = jnp.asarray(x)
    return np.asarray(build_model(config, weights)(a, a, a, causal=True), dtype=np.float64)


def decoded(config: AttentionConfig, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Outputs of decode steps for tokens START ... T-1 from a cache of capacity T prefilled
    with tokens 0 ... START-1, and the cache's keys afterwards, (b, T, h_kv, p)."""
    weights = init_weights(config)
    if config.framework == "torch":
        import torch

        from mhabench.layers.torch.decode import KVCache
        from mhabench.layers.torch.steps import build_model

        model, t = build_model(config, weights).eval(), torch.from_numpy(x)
        with torch.inference_mode():
            cache = KVCache.prefilled(*model.project_kv(t[:, :START], t[:, :START]), T)
            outs = [model.decode_step(t[:, i:i + 1], cache) for i in range(START, T)]
            assert cache.pos == T
            return (torch.cat(outs, dim=1).double().numpy(),
                    cache.k.transpose(1, 2).double().numpy())
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from mhabench.layers.jax.decode import compile_decoder, prefill
    from mhabench.layers.jax.steps import build_model

    graphdef, params, rest = nnx.split(build_model(config, weights), nnx.Param, ...)
    a = jnp.asarray(x)
    cache = prefill(graphdef, params, rest, a[:, :START], capacity=T)
    step = compile_decoder(graphdef, params, rest, a[:, :1], cache)  # one compile, traced pos
    kv, pos, outs = (cache.k, cache.v), cache.pos, []
    for i in range(START, T):
        out, kv, pos = step(params, rest, a[:, i:i + 1], kv, pos)
        outs.append(out)
    assert int(pos) == T
    return np.asarray(jnp.concatenate(outs, axis=1), np.float64), np.asarray(
        jax.device_get(kv[0]), np.float64).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", KV_HEADS)
def test_decode_steps_equal_causal_attention_over_the_prefix(framework, backend, variant):
    config = sequence_config(framework, backend, KV_HEADS[variant])
    x = sequence(config)
    outs, keys = decoded(config, x)
    np.testing.assert_allclose(outs, causal_forward(config, x)[:, START:], atol=ATOL)
    # The steps wrote each token's key into its slot: the cache equals the keys projected
    # from the whole sequence at once.
    p = config.head_dim
    w_k = init_weights(config)["W_k"]  # (h_kv p, d)
    expected = (x.astype(np.float64) @ w_k.T.astype(np.float64)).reshape(
        config.batch, T, config.kv_heads, p)
    np.testing.assert_allclose(keys, expected, atol=ATOL)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_attention_is_plain_attention_over_each_prefix(framework, backend):
    """Position t of the causal forward is the (already validated) non-causal forward over
    tokens 0 ... t, at its last position."""
    config = sequence_config(framework, backend, 2)
    x = sequence(config)
    causal = causal_forward(config, x)
    weights = init_weights(config)
    for t in (0, 4, T - 1):
        prefix = np.ascontiguousarray(x[:, :t + 1])
        plain = run_forward(config.replace(n=t + 1), weights, prefix, prefix, prefix)
        np.testing.assert_allclose(causal[:, t], plain[:, -1], atol=ATOL)


def to_numpy(value) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        return value.double().numpy()
    return np.asarray(value, dtype=np.float64)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_timed_steps_repeat_identical_bounded_work(framework, backend):
    """The KV-cache step (each call rewinds to the fill level m), the no-cache prefix step
    and repeated calls all give the new token's same output."""
    from mhabench.layers.torch.steps import make_step as torch_step

    if framework == "torch":
        make_step = torch_step
    else:
        from mhabench.layers.jax.steps import make_step
    config = AttentionConfig(framework=framework, backend=backend, batch=2, n=1, m=11, d=24,
                             heads=4, kv_heads=2, mode="decode")
    step = make_step(config)
    first = to_numpy(step())
    for _ in range(3):
        np.testing.assert_allclose(to_numpy(step()), first, atol=1e-6)
    no_cache = to_numpy(make_step(config.replace(mode="prefix"))())
    np.testing.assert_allclose(no_cache, first, atol=ATOL)
    assert first.shape == (config.batch, 1, config.d)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_decode_with_cached_source_equals_recomputing_it(framework, backend):
    """Exercise 7.2: cached source K/V (mode=decode, cross) compute what recomputing them
    (mode=forward, cross, n=1) does."""
    from mhabench.measure.timing import prepare

    dec = AttentionConfig(framework=framework, backend=backend, batch=3, n=1, m=10, d=24,
                          heads=4, kv_heads=2, mode="decode", cross=True, masked=True)
    np.testing.assert_allclose(to_numpy(prepare(dec)()),
                               to_numpy(prepare(dec.replace(mode="forward"))()), atol=ATOL)


def test_torch_cache_refuses_to_overflow():
    import torch

    from mhabench.layers.torch.decode import KVCache

    cache = KVCache.prefilled(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), capacity=3)
    cache.append(torch.ones(1, 1, 1, 4), torch.ones(1, 1, 1, 4))
    with pytest.raises(ValueError, match="the KV cache is full"):
        cache.append(torch.ones(1, 1, 1, 4), torch.ones(1, 1, 1, 4))


@pytest.mark.parametrize("backend", ["batched", "fused", "loop", "blockwise"])
def test_jax_decode_copies_its_cache_where_the_time_model_counts_a_copy(backend):
    """The time model's ``kv_copy`` term (:func:`decode_kv_copied`) says which JAX decode
    steps copy their cache before reading it, and how often; the compiled HLO must hold as
    many cache-sized copies (or transposes) of K and V: self decode steps copy the cache
    they write into, and the fused step transposes a single K/V head (or any at batch 1)
    whether it wrote it or not (the repeat of batched GQA is a broadcast, checked apart)."""
    import re

    from mhabench.analysis.prediction.decode_reads import (
        REPEATS_KV,
        decode_kv_copied,
        decode_kv_elements,
    )
    from mhabench.layers.jax.steps import make_step

    for cross, kv_heads, batch in itertools.product((False, True), (4, 2, 1), (2, 1)):
        rows = 300 if cross else 301  # a self step's cache holds the new token too
        config = AttentionConfig(framework="jax", backend=backend, mode="decode",
                                 batch=batch, n=1, m=300, d=64, heads=4, kv_heads=kv_heads,
                                 cross=cross)
        hlo = make_step(config).compiled.as_text()
        cache = "|".join(re.escape(f"f32[{batch},{kv_heads},{a},{b}]")
                         for a, b in ((rows, 16), (16, rows)))  # (m, p) or transposed
        copies = len(re.findall(rf"(?:{cache})\{{[0-9,]*\}} (?:copy|transpose)\(", hlo))
        repeats = backend in REPEATS_KV and kv_heads < 4
        counted = 0 if repeats else decode_kv_copied(config) // decode_kv_elements(config)
        assert copies == 2 * counted, (backend, cross, kv_heads, batch, copies)  # K and V
        if repeats:
            assert decode_kv_copied(config) > 0
        if repeats and batch > 1:  # XLA drops a batch axis of 1 from the broadcast's shape
            wide = re.escape(f"f32[{batch},{kv_heads},{4 // kv_heads},{rows},16]")  # b,h_kv,g,m,p
            assert re.search(wide + r"\{[0-9,]*\} broadcast\(", hlo), (backend, kv_heads)
