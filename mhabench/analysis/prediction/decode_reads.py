"""What a decode step reads and copies each call, counted for the time model's K/V terms.

A decode step's time is its reads: the K/V cache as its backend lays it out (or the h-wide
copy a repeating backend writes), the cache copies a compiled JAX step makes, and the
projection weights. :mod:`mhabench.analysis.prediction.features` arranges these counts into the
``kv``, ``kv_copy`` and ``kv_spill`` columns (why each counts is there; the figures are in
docs/research.md).
"""

from __future__ import annotations

from mhabench.core.config import DTYPE_BYTES, AttentionConfig
from mhabench.core.cost import params, step_lengths

# Backends whose grouped-query path copies each key/value head to its g query heads
# (torch repeat_interleave, jnp.repeat) before the batched matmuls, so the attention reads
# h-wide keys/values whatever h_kv is. The loop backends index the shared head and fused
# kernels take grouped K/V directly: they read the h_kv-wide tensors.
REPEATS_KV = frozenset({"batched"})
# How many times a compiled JAX decode step copies each of its K and V caches per call (the
# cache-sized copy and transpose ops of its HLO; see ``kv_copy`` in
# :mod:`mhabench.analysis.prediction.features` and the HLO test in
# tests/test_decode.py): a self step copies the (donated) cache it writes the new token
# into, 4 times in the batched step with h_kv = h (its GQA step repeats instead and does
# not copy) and twice in the blockwise step; with a single K/V head the loop step copies
# it 4 times (self steps) and the fused step transposes and copies it (self and cross).
XLA_SELF_CACHE_COPIES = {"batched": 4, "blockwise": 2}
XLA_ONE_HEAD_COPIES = {("loop", False): 4, ("fused", False): 2, ("fused", True): 2}
# ... and the fused step does the same at batch 1 with any number of K/V heads: b x h_kv
# then holds one non-trivial axis, as with a single K/V head.
XLA_BATCH_ONE_COPIES = frozenset({"fused"})


def read_kv_width(config: AttentionConfig) -> int:
    """Width of the keys/values the attention reads: ``h_kv * p``, or ``h * p`` where the
    backend repeats K/V to every query head (:data:`REPEATS_KV`)."""
    return config.query_width if config.backend in REPEATS_KV else config.kv_width


def decode_kv_elements(config: AttentionConfig) -> int:
    """Key/value elements a decode step reads every call (the m + 1 positions the cache
    holds after the write, or a cross step's m cached source positions), as its backend
    lays them out (:func:`read_kv_width`); 0 for the other modes, whose K/V are fresh."""
    if config.mode != "decode":
        return 0
    return config.batch * step_lengths(config)[1] * 2 * read_kv_width(config)


def decode_kv_copied(config: AttentionConfig) -> int:
    """Key/value elements a decode step copies before its attention reads them: all it reads
    (:func:`decode_kv_elements`), once where its backend repeats K/V to h_kv < h query
    heads (:data:`REPEATS_KV`), and as many times as a JAX step's compiled program copies
    its cache (:data:`XLA_SELF_CACHE_COPIES`, :data:`XLA_ONE_HEAD_COPIES`,
    :data:`XLA_BATCH_ONE_COPIES`); 0 otherwise."""
    if config.backend in REPEATS_KV and config.kv_heads < config.heads:
        return decode_kv_elements(config)
    if config.framework != "jax":
        return 0
    one_axis = config.kv_heads == 1 or (config.batch == 1
                                        and config.backend in XLA_BATCH_ONE_COPIES)
    copies = XLA_ONE_HEAD_COPIES.get((config.backend, config.cross), 0) if one_axis else 0
    if not config.cross:
        copies = max(copies, XLA_SELF_CACHE_COPIES.get(config.backend, 0))
    return copies * decode_kv_elements(config)


def decode_kv_bytes(config: AttentionConfig) -> int:
    """Bytes of keys/values a decode step reads every call (the m + 1 positions the cache
    holds after the write), as its backend lays them out: the h_kv-wide cache, or its h-wide
    copy for a backend that repeats K/V (:data:`REPEATS_KV`), which writes and reads that
    copy each call: the stored cache alone would miss what an MQA step's copy adds. 0 for
    the other modes, whose K/V are fresh."""
    return decode_kv_elements(config) * DTYPE_BYTES[config.dtype]


def weight_elements(config: AttentionConfig) -> int:
    """Projection weights a step reads: W_q and W_o always, W_k and W_v where it projects
    keys/values (all but a cross decode step, whose source is cached)."""
    if step_lengths(config)[2]:
        return params(config.d, config.heads, config.kv_heads, config.head_dim)
    return 2 * config.d * config.query_width


def decode_working_set_bytes(config: AttentionConfig) -> int:
    """Bytes a decode step reads every call: its K/V (:func:`decode_kv_bytes`) and its
    projection weights (:func:`weight_elements`); 0 for the other modes. The cache holds
    what it can of both between calls, so this size, not the K/V's alone, decides the part
    of the K/V reads past it (``kv_spill``)."""
    kv = decode_kv_bytes(config)
    return kv + weight_elements(config) * DTYPE_BYTES[config.dtype] if kv else 0
