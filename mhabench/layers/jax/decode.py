"""JAX decoding: a preallocated KV cache and the compiled steps of the decode modes.

``mode="decode"`` (self-attention): the layer's ``decode_step`` projects the new token's q,
k and v, writes k and v into the cache with ``lax.dynamic_update_slice`` at a traced
position (the cache is donated to the compiled step, so the write reuses its buffer) and
attends over the valid prefix, masking positions at or past it (the capacity is static). The
cache holds m + 1 positions, filled with the projected prefix once at build time; every
timed call rewinds the position to m, so it writes slot m and attends over m + 1
positions: identical work per call, and the cache never grows.
``mode="decode", cross=True``: the source keys/values are projected once; the step only
attends to them (Exercise 7.2). ``mode="prefix"``: no cache; each step recomputes causal
attention over the m + 1 tokens and keeps the last position's output.

This module knows the layer only through its methods, so it imports nothing from
``attention``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mhabench.core.config import AttentionConfig


def compile_traced(fn: Callable, args: tuple, donate: tuple[int, ...] = ()) -> Any:
    """``fn`` compiled ahead of time for ``args`` (calling it with other shapes or dtypes
    raises; it never compiles again). The result carries ``jaxpr`` (what the step
    computes, for tests that inspect which operations touch the parameters) and
    ``compile_seconds`` (trace, lower and compile; cold only with JAX's caches off, see
    ``mhabench.measure.compile_time``)."""
    start = time.perf_counter()
    traced = jax.jit(fn, donate_argnums=donate).trace(*args)
    compiled = traced.lower().compile()
    compiled.compile_seconds = time.perf_counter() - start
    compiled.jaxpr = traced.jaxpr
    return compiled


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys and values, each (b, h_kv, capacity, p); positions < ``pos`` are valid."""

    k: jax.Array
    v: jax.Array
    pos: jax.Array  # int32 scalar, traced inside a compiled step

    @classmethod
    def prefilled(cls, keys: jax.Array, values: jax.Array, capacity: int) -> KVCache:
        """A cache of ``capacity`` positions holding projected keys/values (b, h_kv, m, p)
        at 0 ... m - 1."""
        m = keys.shape[2]
        if capacity < m:
            raise ValueError(f"capacity={capacity} is smaller than the prefix of {m} tokens")
        pad = ((0, 0), (0, 0), (0, capacity - m), (0, 0))
        return cls(jnp.pad(keys, pad), jnp.pad(values, pad), jnp.asarray(m, jnp.int32))

    def append(self, k: jax.Array, v: jax.Array) -> KVCache:
        """The cache with k, v (b, h_kv, 1, p) written at ``pos`` and ``pos`` advanced.
        (Past the capacity, dynamic_update_slice clamps: callers keep pos < capacity.)"""
        at = (0, 0, self.pos, 0)
        return KVCache(jax.lax.dynamic_update_slice(self.k, k.astype(self.k.dtype), at),
                       jax.lax.dynamic_update_slice(self.v, v.astype(self.v.dtype), at),
                       self.pos + 1)



def compile_decoder(graphdef: nnx.GraphDef, params: nnx.State, rest: nnx.State,
                    token: jax.Array, cache: KVCache) -> Any:
    """``(params, rest, token, (k, v), pos) -> (output, (k, v), pos + 1)``: the layer's
    ``decode_step``, compiled with the cache's k and v donated (not its position, which a
    caller may pass again)."""
    def decode(params, rest, token, kv, pos):
        out, cache = nnx.merge(graphdef, params, rest).decode_step(token, KVCache(*kv, pos))
        return out, (cache.k, cache.v), cache.pos

    return compile_traced(decode, (params, rest, token, (cache.k, cache.v), cache.pos),
                          donate=(3,))


def prefill(graphdef: nnx.GraphDef, params: nnx.State, rest: nnx.State, prefix: jax.Array,
            capacity: int) -> KVCache:
    """A cache of ``capacity`` positions holding the projected ``prefix`` (b, m, d)."""
    def project(params, rest, prefix):
        k, v = nnx.merge(graphdef, params, rest).project_kv(prefix, prefix)
        return KVCache.prefilled(k, v, capacity)

    return jax.jit(project)(params, rest, prefix)


def make_decode_step(config: AttentionConfig, graphdef: nnx.GraphDef, params: nnx.State,
                     rest: nnx.State, x: dict[str, jax.Array | None]) -> Callable[[], Any]:
    """The compiled, blocking step of a ``decode`` or ``prefix`` config: ``x`` holds the
    new token (``queries``, (b, 1, d)) and the prefix or source (``keys``, (b, m, d))."""
    token, source, lens, m = x["queries"], x["keys"], x["valid_lens"], config.m

    if config.mode == "prefix":
        def run(params, rest, sequence):
            model = nnx.merge(graphdef, params, rest)
            return model(sequence, sequence, sequence, causal=True)[:, -1:]

        sequence = jnp.concatenate([source, token], axis=1)  # (b, m + 1, d), built once
        args: tuple = (params, rest, sequence)
        compiled = compile_traced(run, args)

        def step() -> Any:
            return jax.block_until_ready(compiled(*args))
    elif config.cross:
        def attend(params, rest, token, k, v, lens):
            return nnx.merge(graphdef, params, rest).attend(token, k, v, lens)

        k_src, v_src = jax.jit(lambda params, rest, src: nnx.merge(
            graphdef, params, rest).project_kv(src, src))(params, rest, source)  # cached once
        args = (params, rest, token, k_src, v_src, lens)
        compiled = compile_traced(attend, args)

        def step() -> Any:
            return jax.block_until_ready(compiled(*args))
    else:
        cache = prefill(graphdef, params, rest, source, capacity=m + 1)
        fill = cache.pos  # the fixed fill level m: every call writes slot m
        state = {"kv": (cache.k, cache.v)}
        compiled = compile_decoder(graphdef, params, rest, token, cache)

        def step() -> Any:
            out, state["kv"], _ = compiled(params, rest, token, state["kv"], fill)
            return jax.block_until_ready((out, state["kv"]))[0]

    step.compiled = compiled  # XLA cost analysis, HLO text and jaxpr
    return step
