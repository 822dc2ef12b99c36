"""The time model's features: what each kernel does, counted by the cost model.

Every count comes from :func:`mhabench.core.cost.cost` (one source of FLOPs and bytes)
and, for what a decode step reads and copies (``REPEATS_KV``, the ``XLA_*`` copy tables,
``decode_kv_copied``, ``decode_working_set_bytes``), :mod:`mhabench.analysis.decode_reads`;
here they are only arranged into the columns a fit needs. Per config (whole batch, one
step of its mode; a training step multiplies the map, weight, head and per-call terms by
the cost model's ``TRAIN_FACTOR`` as it does the FLOPs):

- ``flops``: the chapter's count (projections + scores + mixing) at one matmul rate. (A
  second rate for the score and mixing FLOPs alone was tried and dropped: its fitted
  coefficient was 0 in most groups of the quick grid and leave-out error did not move.)
- ``train_flops``: a training step's FLOPs again (0 for the other modes): the backward's
  matmuls run at their own, lower rate (transposed operands, gradients accumulated).
  With the forward's rate for all, training steps ran a median 1.3x their prediction
  (25 of 96 configs of four validate samples, 2026-12-03); with it, 1.09x (and leave-out
  median 20 % -> 18 %). A fixed per-call cost for training alone did as well on those
  but left out one cell 27x off: not taken.
- ``unaligned_flops`` and ``unaligned_map``: the ``flops`` and ``map`` counts again for a
  forward or training step whose lengths or widths are not all multiples (or divisors) of
  :data:`ALIGN` floats (one AVX-512 vector, one 64-byte cache line): n, m, d or p for the
  FLOPs, m or p (a score row, a head's contraction) for the map; 0 for aligned steps and
  for decode steps, whose time is their reads. The kernels run such shapes on slower paths
  (remainder loops, other blockings): the same steps with n and m 3 shorter and p 1
  narrower, less work, ran a median 1.19x their aligned twins' time per predicted second
  (18 pairs over six backends, per backend 1.12x for JAX fused to 1.30x for torch fused;
  ``scripts/alignment_scan.py``), and JAX fused at n = m = 500-520 ran 8-10 % slower per
  score than at 496 or 512. The sweeps' cells are all aligned and the design's almost
  never: without these terms the design's forward cells ran a median 1.09x their fit and
  the sweeps' 0.96x, and off-grid forward steps 1.09x their prediction; with them forward
  steps' median factor error went 13.2 % -> 10.6 %, all modes' 13.2 % -> 12.2 %, the 90th
  percentile 45 % -> 39 %, leave-out 14.9 % -> 12.4 % (840 validate configs of seeds
  200-265 and 301-303 re-predicted on the 16-point quick design, 2026-12-04).
- ``unaligned_rows``: the score rows (``batch * h * n``, one per query row and head) of
  those steps whose m or p is off: each row's remainder past the last whole vector is a
  scalar tail of the softmax's and the matmuls' loops, a cost per row whatever its length,
  which a count per score charges long rows for and short ones not. With it (2472
  validate configs of seeds 200-759 re-predicted on the grid of 7582fc9, 2026-12-04): the
  median relative error 10.1 % -> 9.6 %, forward steps' 8.1 % -> 7.7 % (torch batched and
  fused 10.4 % -> 8.1 % and 6.7 % -> 4.8 %), the 90th percentile 27.4 % -> 26.5 %, seeds
  whose median meets 10 % 49 -> 61 of 103; the 144 configs of seeds 754-759, drawn before
  it was tried, 10.7 % -> 9.8 %; grid leave-out 10.3 % -> 9.7 %.
- ``map``: one per score (``batch * h * n * m``): the elementwise work (scale, mask,
  softmax), which every kernel does, and the narrow-head penalty: a matmul over a
  contraction of width p runs at an efficiency about p / (p + p0), so its time is
  FLOPs / peak * (1 + p0 / p), and the extra part, score FLOPs / p = 4 * b*h*n*m, is this
  column. The JAX blockwise backend scores whole tiles of 64 keys, padding included
  (:func:`scored_keys`): counted by m alone, its forward steps' median factor error off the
  grid was 10.3 % and its training steps' 12.7 % (90th percentiles 26 %), the error falling
  with m (Spearman -0.70 for forward steps: short m pay for padding the count left out);
  counted padded, forward steps 8.5 % (90th percentile 20 %) and decode steps 10.3 % ->
  9.7 %, but training steps 14.0 % (31 %): most of those had m = 26-30 keys, one tile
  that is not padded, and ran 1.1-1.3x their prediction either way (a per-tile cost the
  grid's cells left at 0 when offered); all modes' 10.8 % -> 10.7 % (1344 validate configs
  of seeds 200-265 and 301-606 re-predicted, 2026-12-04).
- ``decode_scores``: a decode step's scores (``batch * h * m``) again: each is a p-long dot
  product with a cache row read once, a matrix-vector product per head, where a forward
  step's scores reuse their operands in matrix-matrix products (0 for the other modes).
  With the forward steps' rate alone, decode steps' median factor error off the grid was
  14.7 % (the loop backend's 15.9 % in JAX, 13.7 % in torch); with it 12.8 % (11.9 %,
  9.7 %), all modes' 12.1 % -> 11.7 %, leave-out 11.3 % -> 11.0 %; the worst config 2.8x ->
  3.1x off (a JAX batched self decode step over a 48 MB cache; 1056 validate configs of
  seeds 200-265, 301-303 and 401-409 re-predicted, 2026-12-04).
- ``spill``: the same count where the kernel writes the map to memory
  (:func:`mhabench.core.kernels.materialises`) and the map is larger than a cache size
  (flash-style kernels keep it in tiles: it never spills).
- ``kv``: key/value elements a decode step reads from its cache, ``batch * m * 2 *
  width`` (``width``: ``h_kv * p``, or ``d`` where the backend repeats K/V to every query
  head, :data:`REPEATS_KV`), which its few FLOPs leave out; 0 for the other modes, whose
  K/V are fresh activations of the projections the FLOPs count. (Counted for every mode,
  it took from the terms forward and training steps do pay: off the grid their median
  errors were 14.2 % and 13.4 %; counted for decode alone, 12.6 % and 12.4 %, decode's
  unchanged at 23 %; 768 validate configs of seeds 200-265 re-predicted, 2026-12-04.)
- ``kv_spill``: the part of those elements beyond a cache size, for decode steps whose K/V,
  as the backend reads them (the cache, or the h-wide copy a repeating backend makes), are
  larger than it (:func:`beyond`): a cache of C bytes keeps about C of them between calls,
  and only the rest comes from memory. Counted whole once the K/V outgrew the cache (a
  step at the size), decode steps just past it were over-predicted (a JAX batched cross
  decode step over 12 MB ran 0.55x its prediction). Counted past the cache, decode steps'
  median factor error went 15.2 % -> 13.6 % on 384 validate configs of seeds 701-716
  (the worst relative error 158 % -> 72 %) and 14.4 % -> 13.9 % on the 1344 older ones
  (178 % -> 141 %); grid leave-out 9.7 % -> 9.4 % (2026-12-04). Ramps over one or
  two doublings past the size did no better, nor a second term past a 0.5-2 MiB cache. A
  group fits it only where two of its cells read at least half their K/V past the cache
  (:func:`mhabench.analysis.timemodel.fit_cells`): a cell a sliver past the size cannot
  set its rate. The copies a step makes of its K/V (``kv_copy``) count here too, at the
  same rate: a copy of a cache larger than the cache reads and writes memory as the
  attention's read does. With the reads alone, JAX batched decode steps (a self step
  copies its cache 4 times) read a median 14.1 % off their prediction off the grid, a
  quarter of them more than 35 % off (self steps over 18-46 MB caches 1.5x their
  prediction, cross steps over 10-40 MB 0.4-0.7x: one rate for both); with the copies,
  11.8 % and 14 %, torch batched decode steps more than 35 % off 11 % -> 7 %, all decode
  steps 12.9 % -> 12.5 % (factor errors, 2160 validate configs of 90 seeds re-predicted on
  the grid of 7582fc9, 2026-12-04); grid leave-out 10.4 % -> 10.5 %. Which part of the
  K/V is past the cache is decided by the step's whole working set, its K/V and the
  weights it reads each call (:func:`decode_working_set_bytes`; at d = 1024 the weights
  are 16 MiB, half this machine's L3). On the 1104 validate configs of seeds 720-780
  re-predicted on the grid of 9bbe862 (2026-12-04): decode steps' median factor error
  12.3 % -> 12.1 %, their 90th percentile relative error 33 % -> 31 %, those more than 35 %
  off after each seed's drift 37 -> 35 of 391; all configs 10.5 % -> 10.1 % (part of it
  JAX's reference layer, 13 % -> 9 %, whose pooled priors are the other JAX groups'
  rates), seeds meeting both goals 10 -> 14 of 46 (the fitted cache stays at 8 MiB). Torch
  batched decode steps with 13-16 MB of weights and 7-13 MB of K/V still run 1.5-2.7x
  their prediction.
- ``kv_copy``: key/value elements a decode step copies before its attention reads them (the
  ``kv`` count once per copy, for the steps that copy; 0 for the rest), as the compiled
  steps show: a backend that repeats K/V (:data:`REPEATS_KV`) writes the h-wide copy
  whenever h_kv < h, and in a JAX self decode step XLA copies the donated cache it writes
  the new token into (:func:`decode_kv_copied`): the HLO of the batched step with h_kv = h
  and of the blockwise step holds cache-sized ``copy`` ops, the loop step's only for one K/V
  head, the fused step's none with several K/V heads (a self decode step at b 1-4, m
  300-1023, d 96-384). One rate for every K/V read left JAX batched self decode steps a
  median 2x their prediction and its cross decode steps (no copy) 0.4x (840 validate configs
  of seeds 200-265 and 301-303, re-predicted, 2026-12-04). The fused step with a single K/V
  head transposes and copies it, self and cross alike (HLO at b 1-3, m 200-3011, h 1-16):
  uncounted, those steps ran a median 1.5x their prediction (JAX fused decode median factor
  error 50 %, 13 configs); counted, 11 %, the backend's other decode steps 20 % -> 15 % and
  all decode steps 15.4 % -> 13.8 % (1344 validate configs of seeds 200-265 and 301-606
  re-predicted, 2026-12-04). Each copy counts: the batched step copies a cache 4 times, the
  blockwise step twice, while the batched GQA step only writes its repeat once
  (:data:`XLA_SELF_CACHE_COPIES`). Counted once each, JAX batched self decode steps with
  h_kv = h ran a median 1.36x their prediction off the grid and its GQA steps 0.87x (in the
  grid's fit, 1.97x and 0.74x at m = 4096); counted as the HLO copies, 1.07x and 1.06x
  (median factor error 36 % -> 10 %; all decode steps 12.9 % -> 12.5 %, leave-out 10.6 % ->
  10.0 %; the same 1344 configs). The fused step copies so at batch 1 too, with any number
  of K/V heads (:data:`XLA_BATCH_ONE_COPIES`; HLO at m 300 with h_kv 1-4, and at m 344 and
  765): uncounted, its batch-1 steps ran 1.6-1.8x their prediction; counted, JAX fused
  decode steps more than 35 % off 27 % -> 15 % (26 configs, 3 of them at batch 1: median
  factor error 65 % -> 15 %), all decode steps 13.4 % -> 12.4 % (the 960 validate configs
  of seeds 720-774 re-predicted on the grid of e00a410, 2026-12-04).
- ``weights``: projection weights the step reads, ``2 d^2 + 2 d * h_kv * p`` (W_q, W_o and,
  where the step projects keys/values, W_k and W_v; a cross decode step's are cached), once
  a call whatever the batch: a decode step's few FLOPs leave its weight traffic out (at
  d = 896 its four matrices hold 12.8 MB of float32, 13x the 1 MiB L2). With the quick grid's 16
  decode points and four validate samples (96 configs, seeds 200-203, 2026-12-03):
  decode's median error 44 % -> 33 % in leave-out and 42 % -> 38 % off the grid; all modes
  20 % -> 21 % and 17 % -> 18 %, unchanged within the samples' scatter.
- ``weights_gemm``: the ``weights`` count again wherever the projections are matrix
  products, every step but a decode step at batch 1, whose projections are matrix-vector
  products that stream each weight once. A BLAS runs a product of a few rows on its GEMM
  path, which costs more per weight than a GEMV, not in proportion to the rows: timed alone
  (one thread, median of 200 calls), ``x @ W.T`` at d = 736 took 57 us for 1 row and 104
  us for 2 in torch (73 and 149 us in JAX), where the second row's FLOPs take 13 us at
  the machine's matmul rate. Without the term the grid's torch decode cells at batch 1
  with large weights ran 0.67-0.83x their prediction and those at batch 3-4 1.25-1.4x;
  fitted, torch's groups pay 0.7-0.8e-10 s a weight at batch 1 and 2.1-2.7e-10 more
  beyond it, JAX's 0.3-0.6e-10 more. Off the grid (432 validate configs of seeds 796-815
  re-predicted on the quick grids of 3901cac and of 9434f4f on two days, 2026-12-05):
  configs more than 35 % off 17/16/20 -> 14/12/17, the 90th percentile 24.7/26.9/27.1 % ->
  22.9/25.8/25.6 %, the median 8.9/9.5/9.6 % -> 8.9/8.9/9.7 %; grid leave-out median 9.7 ->
  9.6 % and 9.8 -> 9.0 %, its worst 162 -> 301 % (a FlexAttention decode cell left out at
  m = 1560, past its fold's range, in a group of 18 cells). Seeds drawn after the term was
  chosen (816-822, 144 configs, timed on the grid of 9434f4f with it): re-predicted
  without and with it on the three grids, the median 10.2/9.5/11.7 % -> 9.0/9.0/11.0 %,
  the 90th percentile 25.0/22.9/27.6 % -> 24.6/22.4/26.8 %, but configs past 35 % 4/2/5
  -> 6/4/6: the fits charge a GEMM 2.1-2.7e-10 s a weight more, where the products timed
  alone cost about 0.75e-10 more once FLOPs are paid (33-51 us at d = 736 from 2 to 8
  rows), and a decode step at batch 2 with large weights reads up to 1.4x its time.
- ``weight_grads``: the weight gradients a training step writes, the ``weights`` count
  once (0 for the other modes): the backward's traffic over the d x d matrices is not the
  forward's twice over. Counted only as 3x the forward's weights, training steps' median
  factor error off the grid was 11.6 %; with it 10.4 %, all modes' 11.7 % -> 10.9 %, the 90th
  percentile 35 % -> 34 %, leave-out 11.0 % -> 10.5 % (1056 validate configs of seeds
  200-265, 301-303 and 401-409 re-predicted, 2026-12-04). A per-head term for training
  steps alone did as well (10.0 %, and 10.8 % for all modes) but left its worst config 3x
  off against 2.8x.
- ``loop_heads``: the loop backend's per-head passes over full-width activations,
  ``batch * d * (rows * h + projected * h_kv)``: each query head projects the (b, rows, d)
  queries through its own W_q slice and adds its (b, rows, d) share of the output into the
  sum, each key/value head reads the (b, m, d) source (narrow matmuls, p wide, run far
  below the rate of one d-wide projection); 0 for the other backends. Without it the loop
  backend's forward steps ran a median 1.27x their prediction off the grid (median error
  28 %, JAX and torch alike); with it 1.03x (torch) and 1.13x (JAX), 15-16 %; all modes
  15.5 % -> 14.9 %, the 90th percentile 52 % -> 44 % (the same 768 configs). Counted once
  per step, training too: counted 3x, the loop backend's training steps read 14.4 %
  off, against 11.6 % (the same configs).
- ``heads``: a fixed cost per head (dispatch, per-head kernel launches).
- ``const``: a fixed cost per call: the ops a step dispatches, so a training step counts
  ``TRAIN_FACTOR`` (its backward dispatches about twice its forward's ops). With one
  constant for every mode, training steps off the grid ran 24 % (self) and 46 % (cross)
  slower than predicted (medians, 192 random configs); with it, 11 % and 29 %.
- ``projects_kv``: a fixed cost per call again, for every step that projects keys and
  values (all but a cross decode step, whose source is cached): the K/V projections' ops
  and, in a self decode step, the cache write. Without it self decode steps ran a median
  1.13x their prediction and cross decode steps 0.92x; with it (and ``kv_copy``) decode's
  median factor error off the grid went 20.2 % -> 15.7 %, all modes' 15.2 % -> 13.4 %,
  the worst config 3.8x -> 2.9x off, and the leave-out median 16.6 % -> 13.2 % (the same
  840 configs). Where no cell is a cross decode step it equals ``const`` and is not fitted
  (:func:`mhabench.analysis.timemodel.fit_cells`).
- ``masked``: a fixed cost per call again, for a step with a key mask (``valid_lens``): the
  ops that build the keep mask from the lengths and apply it (compare, ``masked_fill`` or a
  select; FlexAttention builds its block mask each call). A count per score for the mask
  (``b*h*n*m`` again) did worse: the elementwise pass is ``map``'s. Without it, masked
  FlexAttention decode steps ran a median 1.6x their prediction (9 configs, 5 of them more
  than 35 % off: their grid held no masked decode step, see ``bench_design``), and the
  fit's other terms took the masked cells' cost; with it (and that step in the grid), on
  the 960 validate configs of seeds 720-774 re-predicted on the grid of e00a410
  (2026-12-04): the median relative error 10.2 % -> 9.4 %, masked steps' median factor
  error 10.7 % -> 9.3 % and the unmasked ones' 10.6 % -> 10.0 %, those FlexAttention steps
  45 % -> 24 %, configs more than 35 % off 54 -> 47 (with the batch-1 copies above), seeds
  meeting the worst goal (35 %) 9 -> 16 of 40, both goals 4 -> 9. Its cost per call on
  the quick grid of 9bbe862: 18-27 us in torch's fused, loop, reference, compiled and flex
  groups and JAX's fused, 0-8 us in JAX's batched, blockwise, loop and reference and
  torch's batched (which build the keep mask and fill the scores they write anyway).
  FlexAttention's block mask is not a fixed cost: ``block_mask`` counts it. Only where the
  step dispatches the mask's ops (:func:`masks_fused`): every JAX step runs under jit, where
  XLA fuses the compare and select into the softmax, and torch.compile's inductor fuses
  them too. Timed in pairs (``mhabench time``, 2026-12-06), masked and unmasked steps of
  JAX fused, batched, loop, blockwise and reference and of torch.compile took the same time
  at small decode, forward and training shapes (within 5 %), where eager torch backends
  took 25-60 us more (torch loop 60-250 us); yet fitted on the grid's few masked cells,
  JAX fused put 55 us a call on it and JAX batched 29 us, and masked JAX fused steps off
  the grid ran a median 1.26-1.42x their prediction. Counted only where dispatched, on the
  288 validate configs of seeds 900-911 and the 144 of seeds 920-925 (drawn before the
  change) re-predicted: configs more than 35 % off 12 -> 10 and 10 -> 7, the 90th
  percentile 26.6 -> 26.6 % and 25.9 -> 24.0 %.
- ``block_mask``: the elements of the dense (b, rows, keys) mask a backend evaluates where it
  builds a block mask from the lengths on every masked call
  (:func:`mhabench.core.cost.block_mask_elements`: FlexAttention's ``create_block_mask``,
  rows and keys padded to 128); 0 for the rest. 20 pairs of masked and unmasked
  FlexAttention steps (d 88, h 2, b 1-8, n 1-500, m 64-800; 9 repeats each, pairs
  interleaved, 2026-12-04) took 71 us to 5 ms more masked, 1.6-10 ns a padded element
  (decode steps 1.6-4.8, forward steps 3-10: their kernel also applies the mask to the
  blocks it cuts); the grid's masked FlexAttention decode cell (b 7, m 329) was fitted at
  0.32x its 1.76 ms with the fixed cost alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mhabench.analysis.decode_reads import (
    decode_kv_copied,
    decode_kv_elements,
    decode_working_set_bytes,
    weight_elements,
)
from mhabench.analysis.results import config_from_row
from mhabench.core import backends
from mhabench.core.backends import KEY_BLOCK
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import TRAIN_FACTOR, block_mask_elements, cost, padded, step_lengths

FEATURES = ("flops", "train_flops", "unaligned_flops", "map", "unaligned_map", "unaligned_rows",
            "decode_scores", "spill", "kv", "kv_spill", "kv_copy", "weights", "weights_gemm",
            "weight_grads",
            "loop_heads", "heads", "const", "projects_kv", "masked", "block_mask")
FEATURE_LABELS = {"flops": "FLOPs (flops_model)",
                  "train_flops": "training steps' FLOPs, again (the backward's rate)",
                  "unaligned_flops": "FLOPs again where n, m, d or p is not a multiple of 16",
                  "unaligned_map": "scores again where m or p is not a multiple of 16",
                  "unaligned_rows": "score rows (b*h*n) where m or p is not a multiple of 16",
                  "map": "per score (batch*h*n*m): softmax, narrow heads",
                  "decode_scores": "decode: scores again (batch*h*m, one cache row each)",
                  "spill": "attention map written beyond cache",
                  "kv": "decode: keys/values read (batch*m*2*width)",
                  "kv_spill": "decode: keys/values read or copied past the cache",
                  "kv_copy": "decode: keys/values copied before the read",
                  "weights": "projection weights read (2d^2 + 2d*h_kv*p)",
                  "weights_gemm": "weights again where the projections are matrix products "
                                  "(all but batch-1 decode steps)",
                  "weight_grads": "training: weight gradients written (2d^2 + 2d*h_kv*p)",
                  "loop_heads": "loop: per-head passes over activations (b*d*(n*h + m*h_kv))",
                  "heads": "per-head fixed cost",
                  "const": "fixed per call (train: 3x)",
                  "projects_kv": "fixed per call projecting keys/values (train: 3x)",
                  "masked": "fixed per call of a masked step (train: 3x)",
                  "block_mask": "block mask built per call (b*n*m, padded to its blocks)"}
# Lengths and widths that are multiples of this many floats run the kernels' fast paths
# (one AVX-512 vector of float32, one 64-byte cache line); see ``unaligned_flops`` above.
ALIGN = 16
# Map sizes (bytes of one batch*h*n*m map) the spill term may start at: 1 MiB to 1 GiB.
CACHE_CANDIDATES = tuple(2**k * 2**20 for k in range(11))


def feature_values(config: AttentionConfig, cache_bytes: float | None = None,
                   kv_cache_bytes: float | None = None) -> dict[str, float]:
    """The model's features for one config (see the module docstring); no spill term
    when ``cache_bytes`` is None, no K/V spill term when ``kv_cache_bytes`` is None."""
    terms = cost(config)
    factor = TRAIN_FACTOR if config.mode == "train" else 1
    # rows: query rows; keys: key positions; projected: key/value rows projected, 0 for a
    # cross decode step (its source is cached)
    rows, keys, projected = step_lengths(config)
    elements = float(terms.attention_map_elements * factor * scored_keys(config) / keys)
    # attention_map_bytes is 0 where the kernel keeps the map in tiles: it cannot spill.
    spills = cache_bytes is not None and terms.attention_map_bytes > cache_bytes
    kv = float(decode_kv_elements(config))
    copied = float(decode_kv_copied(config))
    weights = weight_elements(config)
    loop_heads = (config.batch * config.d * (rows * config.heads + projected * config.kv_heads)
                  if config.backend == "loop" else 0)
    decode = config.mode == "decode"  # one query row: its time is its cache reads
    ragged_rows = not decode and not aligned(config.m, config.head_dim)
    ragged = ragged_rows or not decode and not aligned(config.n, config.d)
    return {"flops": float(terms.flops_model),
            "train_flops": float(terms.flops_model) if config.mode == "train" else 0.0,
            "unaligned_flops": float(terms.flops_model) if ragged else 0.0,
            "map": elements,
            "unaligned_map": elements if ragged_rows else 0.0,
            "unaligned_rows": float(config.batch * config.heads * rows * factor)
            if ragged_rows else 0.0,
            "decode_scores": elements if decode else 0.0,
            "spill": elements if spills else 0.0, "kv": kv,
            "kv_spill": (kv + copied) * float(beyond(decode_working_set_bytes(config),
                                                     kv_cache_bytes)),
            "kv_copy": copied, "weights": float(weights * factor),
            "weights_gemm": float(weights * factor) if config.batch > 1 or not decode else 0.0,
            "weight_grads": float(weights) if config.mode == "train" else 0.0,
            "loop_heads": float(loop_heads),
            "heads": float(config.heads * factor), "const": float(factor),
            "projects_kv": float(factor) if projected else 0.0,
            "masked": float(factor) if config.masked and not masks_fused(config) else 0.0,
            "block_mask": float(block_mask_elements(config))}


def masks_fused(config: AttentionConfig) -> bool:
    """Whether ``config``'s backend builds and applies its key mask inside one compiled graph
    (:attr:`mhabench.core.backends.Backend.fuses_mask`): no per-call cost of its own."""
    return bool(backends.get(config.framework, config.backend).fuses_mask)


def beyond(size: np.ndarray | float, cache_bytes: float | None) -> np.ndarray | float:
    """The fraction of ``size`` bytes past a cache of ``cache_bytes`` (0 while they fit, or
    with no cache size): the part of a step's reads that comes from memory."""
    if cache_bytes is None:
        return 0.0 * size
    return np.clip(1.0 - cache_bytes / np.maximum(size, 1.0), 0.0, None)


def scored_keys(config: AttentionConfig) -> int:
    """Keys each query row of a step scores: its key positions
    (:func:`~mhabench.core.cost.step_lengths`), padded to whole tiles of
    :data:`~mhabench.core.backends.KEY_BLOCK` keys (fewer where there are fewer keys) by the
    JAX blockwise backend, which scores the padding too."""
    keys = step_lengths(config)[1]
    if config.framework != "jax" or config.backend != "blockwise":
        return keys
    return padded(keys, min(KEY_BLOCK, keys))


def aligned(*sizes: int) -> bool:
    """Whether every size is a multiple of :data:`ALIGN` or divides it (heads 4 or 8 wide
    fill a vector together)."""
    return all(size % ALIGN == 0 or ALIGN % size == 0 for size in sizes)


@dataclass(frozen=True)
class CellFeatures:
    """The features of a set of cells, computed once: the matrix without the spill terms,
    and what decides the spill terms for any cache size (so a fit can try every size
    without rebuilding configs)."""

    base: np.ndarray  # one row of FEATURES per cell; spill columns zero
    map_bytes: np.ndarray  # bytes of each cell's map as its kernel writes it (0: tiles)
    working_set: np.ndarray  # bytes each decode cell reads (decode_working_set_bytes); else 0

    @classmethod
    def of(cls, cells: pd.DataFrame) -> CellFeatures:
        configs = [config_from_row(r) for r in cells.to_dict("records")]
        base = np.array([[feature_values(c)[f] for f in FEATURES] for c in configs],
                        dtype=float).reshape(-1, len(FEATURES))
        maps = [cost(c).attention_map_bytes for c in configs]
        reads = [decode_working_set_bytes(c) for c in configs]
        return cls(base, np.array(maps, dtype=float), np.array(reads, dtype=float))

    def matrix(self, cache_bytes: float | None = None,
               kv_cache_bytes: float | None = None) -> np.ndarray:
        """The same as :func:`feature_values` row by row, for these cache sizes."""
        X = self.base.copy()
        if cache_bytes is not None:
            spills = self.map_bytes > cache_bytes
            X[spills, FEATURES.index("spill")] = X[spills, FEATURES.index("map")]
        X[:, FEATURES.index("kv_spill")] = kv_moved(X) * beyond(self.working_set,
                                                                 kv_cache_bytes)
        return X


def kv_moved(X: np.ndarray) -> np.ndarray:
    """Per row of a feature matrix: the K/V elements a decode step reads and copies, the
    count whose part past the cache is ``kv_spill``."""
    return X[:, FEATURES.index("kv")] + X[:, FEATURES.index("kv_copy")]


def feature_matrix(cells: pd.DataFrame, cache_bytes: float | None = None,
                   kv_cache_bytes: float | None = None) -> np.ndarray:
    """One row of :data:`FEATURES` per cell (cells hold the config columns)."""
    return CellFeatures.of(cells).matrix(cache_bytes, kv_cache_bytes)
