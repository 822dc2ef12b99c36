"""Decoding one token at a time (Exercises 7.2 and 8); each class times distinct work.

- ``KVCacheDecode``: a real self-attention decode step (mode=decode): the new token's q, k
  and v are projected, k and v written into a KV cache preallocated for m + 1 positions,
  and q attends over all m + 1; each call starts from the same fill level m. For MHA, GQA
  and MQA: what fewer KV-cache bytes per step buy.
- ``PrefixDecode``: the same token without a cache (mode=prefix, the baseline Exercise 8
  implies): causal attention over the whole prefix of m + 1 tokens, recomputed per token.
- ``CrossDecodeSource`` (Exercise 7.2): one new query cross-attends to a source of m tokens
  whose key/value projections are cached (mode=decode, cross) or recomputed every step
  (mode=forward, cross, n=1).

The framework layers have no cached-key/value step, so there is no ``reference`` here.
"""

from mhabench.bench.common import FRAMEWORKS, GRID, WHERE, grid, parameters
from mhabench.bench.methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep

# The loop backend's decode is a Python loop over heads: full grid only, but for the KV
# cache's time cells on the quick grid (below).
DECODE_BACKENDS = grid(tiny=["loop", "batched", "fused"], quick=["batched", "fused"],
                       full=["loop", "batched", "fused"])
# The quick grid times the loop backend's cached decode too (time only, 12 cells, a few
# seconds of asv run): the calibration design keeps the loop backend at h <= 16, where its
# caches are at most 6 MiB, so no other cell tells the time model what a loop decode step
# over a cache beyond the CPU's caches costs (it slices each query head's keys and values
# out of the cache; without these cells JAX loop steps over 7-34 MB caches ran 1.6-3.1x
# their prediction off the grid).
KV_DECODE_BACKENDS = grid(tiny=DECODE_BACKENDS, quick=["loop", "batched", "fused"],
                          full=DECODE_BACKENDS)
BATCH = [grid(tiny=2, quick=4, full=8)]
D = [grid(tiny=32, quick=256, full=1024)]
HEADS = grid(tiny=4, quick=16, full=16)
KV_HEADS = grid(tiny=[HEADS, 1], quick=[HEADS, HEADS // 4, 1], full=[HEADS, HEADS // 4, 1])
SOURCE = grid(tiny=[16], quick=[512, 4096], full=[128, 1024, 4096, 16384])
# Exercise 7.2 recomputes the source's K/V projections every step: one length in quick.
CROSS_SOURCE = grid(tiny=[16], quick=[1024], full=[128, 1024, 4096, 16384])
# The no-cache step recomputes an (m + 1)^2 map per token: shorter prefixes.
PREFIX = grid(tiny=[16], quick=[512], full=[128, 1024, 4096])


class KVCacheDecode(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=KV_DECODE_BACKENDS, mode=["decode"], batch=BATCH, n=[1],
        m=SOURCE, d=D, heads=[HEADS], kv_heads=KV_HEADS, **WHERE)
    keep_memory = staticmethod(lambda c: GRID != "quick" or c.backend != "loop")


class PrefixDecode(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=DECODE_BACKENDS, mode=["prefix"], batch=BATCH, n=[1],
        m=PREFIX, d=D, heads=[HEADS], kv_heads=grid(tiny=[HEADS], quick=[HEADS], full=KV_HEADS),
        **WHERE)


class CrossDecodeSource(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=DECODE_BACKENDS, mode=["decode", "forward"], cross=[True],
        batch=BATCH, n=[1], m=CROSS_SOURCE, d=D, heads=[HEADS], **WHERE)
