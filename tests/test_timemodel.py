"""The calibrated time model: NNLS, recovery of known coefficients, leave-out accuracy,
and the prediction path from fit to the CLI's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures.synthetic_asv import TRUE_COEF, grid, synthetic_time, write_results

from mhabench.analysis.prediction.decode_reads import decode_working_set_bytes
from mhabench.analysis.prediction.sampling import sample_configs
from mhabench.analysis.prediction.solvers import nnls, pulled_nnls
from mhabench.analysis.prediction.timemodel import (
    FEATURES,
    CellFeatures,
    feature_values,
    fit_cells,
    fit_machine,
    fit_models,
    pool_small_groups,
    select_model,
    timing_cells,
    underdetermined,
)
from mhabench.analysis.prediction.validation import error_summary, leave_out
from mhabench.analysis.results import config_from_row, load_results
from mhabench.cli import main
from mhabench.core import backends
from mhabench.core.config import AttentionConfig

KEY = ("synth", "torch", "batched", "cpu", "float32")


def test_nnls_satisfies_kkt_where_plain_least_squares_goes_negative() -> None:
    rng = np.random.default_rng(1)
    A = rng.normal(size=(40, 4)) * [1e9, 1e3, 1.0, 1e-3]
    b = A @ np.array([2e-9, -5e-3, 0.5, 0.0]) + 0.01 * rng.normal(size=40)
    assert np.linalg.lstsq(A, b, rcond=None)[0].min() < 0
    x = nnls(A, b)
    grad = A.T @ (A @ x - b)
    assert (x >= 0).all()
    scale = np.linalg.norm(A, axis=0) * np.linalg.norm(b)
    active = x == 0
    assert active.any()
    assert (grad[active] >= -1e-9 * scale[active]).all()  # no descent into the constraint
    assert np.allclose(grad[~active] / scale[~active], 0, atol=1e-9)


def test_nnls_exact_on_nonnegative_truth() -> None:
    rng = np.random.default_rng(2)
    A = np.abs(rng.normal(size=(30, 3)))
    truth = np.array([0.3, 0.0, 2.0])
    assert np.allclose(nnls(A, A @ truth), truth, atol=1e-10)


def test_cells_read_slow_pull_a_relative_fit_less_than_an_over_prediction_costs() -> None:
    # The machine's noise is one-sided: three of 30 cells read 2x slow. The relative fit
    # stays under the slow cells' mean (a log fit would sit near their geometric mean).
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.uniform(0.1, 10, 30) * 1e6, np.ones(30)])
    truth = np.array([2e-9, 1e-3])  # FLOPs, per call
    t = X @ truth
    t[:3] *= 2
    fitted = nnls(X / t[:, None], np.ones(30))
    ratio = (X @ fitted) / (X @ truth)  # predicted over the quick truth
    assert np.median(ratio) < 1.05
    assert (ratio[:3] < 1.2).all()  # the slow cells are left under-predicted, not followed


NO_KV = {**TRUE_COEF, "kv": 0.0}
# The synthetic grid has no decode steps, so no K/V term to recover (the machine fit's
# test below recovers one from decode cells).
SPILL = {**TRUE_COEF, "spill": 3e-9, "kv": 0.0, "weights": 1e-8}


@pytest.mark.parametrize("coef, cache", [
    (NO_KV, None),  # no spill term and no K/V term: neither is fitted
    (SPILL, 8 * 2**20),  # maps over 8 MiB 2.5x per element; weights 10 ns
])
def test_fit_recovers_known_coefficients(tmp_path: Path, coef: dict, cache: float | None
                                         ) -> None:
    root = write_results(tmp_path / "r", seed=3,
                         time_of=lambda c, i: synthetic_time(c, coef, cache))
    model = fit_models(load_results(root).frame)[KEY]
    assert model.cache_bytes == cache
    for name in FEATURES:
        assert model.coef[name] == pytest.approx(coef[name], rel=1e-6, abs=1e-15), name
    assert model.separable
    assert model.r2 > 0.999999


@pytest.mark.parametrize("seed", [3, 5])
def test_fit_under_noise_predicts_the_true_times(tmp_path: Path, seed: int) -> None:
    # 5 % noise per cell: the terms the grid pins down (FLOPs, the map and its spill) come
    # back within 30 %; the per-head, weights, K/V and constant terms trade off against each
    # other at these few d, so the check is what the fit is for: the noise-free times.
    root = write_results(tmp_path / "r", noise=0.05, seed=seed,
                         time_of=lambda c, i: synthetic_time(c, SPILL, 8 * 2**20))
    frame = load_results(root).frame
    model = fit_models(frame)[KEY]
    assert model.cache_bytes == 8 * 2**20
    for name in ("flops", "map", "spill"):
        assert model.coef[name] == pytest.approx(SPILL[name], rel=0.3), name
    errors = [abs(model.predict(c) / synthetic_time(c, SPILL, 8 * 2**20) - 1)
              for c in map(config_from_row, timing_cells(frame).to_dict("records"))]
    assert np.median(errors) < 0.02 and max(errors) < 0.1
    assert model.r2 > 0.95


def test_kv_feature_counts_the_keys_and_values_each_backend_reads() -> None:
    # Decode: the FLOP count leaves the cached keys/values out; the K/V term counts them,
    # the m cached positions and the one the step has just written.
    mha = AttentionConfig(backend="fused", mode="decode", batch=4, n=1, m=4096, d=256,
                          heads=16)
    mqa = mha.replace(kv_heads=1)
    assert feature_values(mha)["kv"] == 4 * 4097 * 2 * 256
    assert feature_values(mqa)["kv"] == 4 * 4097 * 2 * 16  # one 16-wide head
    # batched copies each K/V head to its query heads: it reads h-wide K/V for MQA too.
    assert feature_values(mqa.replace(backend="batched"))["kv"] == feature_values(mha)["kv"]
    assert feature_values(mqa.replace(backend="loop"))["kv"] == feature_values(mqa)["kv"]
    # a cross decode step reads its m cached source positions
    assert feature_values(mha.replace(cross=True))["kv"] == 4 * 4096 * 2 * 256
    # Forward and training steps: their K/V are the projections' fresh outputs, which the
    # FLOPs count; no K/V term.
    train = AttentionConfig(mode="train")
    for config in (AttentionConfig(), train, AttentionConfig(cross=True, m=1024), mha.replace(
            mode="prefix")):
        assert feature_values(config)["kv"] == 0, config.mode
    # A training step dispatches its forward's ops and a backward of about twice as many:
    # its fixed per-call cost (and per-head cost) count 3x; a decode step's count once.
    for name in ("const", "heads"):
        assert feature_values(train)[name] == 3 * feature_values(AttentionConfig())[name]
        assert feature_values(mha)[name] == feature_values(AttentionConfig(heads=16))[name]


def test_weights_feature_counts_the_projection_weights_each_step_reads() -> None:
    # W_q and W_o (d x d each) every step; W_k and W_v (d x h_kv*p) where the step projects
    # keys/values: not a cross decode step, whose source keys/values are cached.
    mha = AttentionConfig(mode="decode", batch=4, n=1, m=100, d=256, heads=16)
    assert feature_values(mha)["weights"] == 4 * 256 * 256
    assert feature_values(mha.replace(kv_heads=1))["weights"] == 2 * 256 * 256 + 2 * 256 * 16
    assert feature_values(mha.replace(cross=True))["weights"] == 2 * 256 * 256
    assert feature_values(AttentionConfig(cross=True, d=64, heads=4))["weights"] == 4 * 64 * 64
    # read once a call, whatever the batch and length; a training step reads them 3x
    assert feature_values(mha.replace(batch=1, m=9))["weights"] == 4 * 256 * 256
    train = AttentionConfig(mode="train")
    assert feature_values(train)["weights"] == 3 * feature_values(AttentionConfig())["weights"]
    # and writes their gradients once: a term of its own, 0 for the other modes
    assert feature_values(train)["weight_grads"] == feature_values(AttentionConfig())["weights"]
    assert feature_values(AttentionConfig())["weight_grads"] == feature_values(mha)[
        "weight_grads"] == 0


def test_weights_gemm_counts_the_weights_of_matrix_products_not_batch_one_decode() -> None:
    # a decode step at batch 1 projects one row: matrix-vector products, no GEMM term
    dec = AttentionConfig(mode="decode", n=1, batch=1, d=256, heads=8)
    assert feature_values(dec)["weights"] > 0 and feature_values(dec)["weights_gemm"] == 0
    # two rows or more run the BLAS's GEMM path: the weights again, per step
    for config in (dec.replace(batch=2), AttentionConfig(batch=1, n=5),
                   AttentionConfig(mode="train", batch=1, n=5)):
        values = feature_values(config)
        assert values["weights_gemm"] == values["weights"] > 0, config
    # a cross decode step reads only W_q and W_o (its K/V are cached): the same count
    cross = dec.replace(batch=3, cross=True)
    assert feature_values(cross)["weights_gemm"] == feature_values(cross)["weights"] == (
        2 * 256 * 256)


def test_loop_heads_counts_the_loop_backends_per_head_passes_over_activations() -> None:
    # Each query head reads the (b, n, d) queries through its W_q slice and adds its share
    # of the (b, n, d) output; each key/value head reads the (b, m, d) source.
    loop = AttentionConfig(backend="loop", batch=2, n=100, d=256, heads=8, kv_heads=2,
                           cross=True, m=300)
    assert feature_values(loop)["loop_heads"] == 2 * 256 * (100 * 8 + 300 * 2)
    # a decode step: one query row; its own token's K/V projected (self) or none (cross)
    dec = loop.replace(mode="decode", n=1, cross=False)
    assert feature_values(dec)["loop_heads"] == 2 * 256 * (8 + 2)
    assert feature_values(dec.replace(cross=True))["loop_heads"] == 2 * 256 * 8
    # once a step, training too; the other backends project at full width: none
    assert feature_values(loop.replace(mode="train"))["loop_heads"] == feature_values(
        loop)["loop_heads"]
    for backend in ("batched", "fused"):
        assert feature_values(loop.replace(backend=backend))["loop_heads"] == 0, backend
    assert feature_values(loop.replace(framework="jax", backend="blockwise"))["loop_heads"] == 0
    assert feature_values(loop.replace(framework="jax"))["loop_heads"] == feature_values(
        loop)["loop_heads"]  # JAX's loop layer projects per head too


def test_unaligned_terms_count_steps_off_multiples_of_16_floats() -> None:
    aligned = AttentionConfig(batch=2, n=512, d=256, heads=8)  # p = 32
    assert feature_values(aligned)["unaligned_flops"] == feature_values(aligned)[
        "unaligned_map"] == 0
    values = feature_values(aligned.replace(n=500))  # self-attention: m = 500 too
    assert values["unaligned_flops"] == values["flops"] > 0
    assert values["unaligned_map"] == values["map"] > 0
    # queries alone off: the FLOPs' term, not the map's (its rows are m long, p deep)
    cross = feature_values(aligned.replace(cross=True, n=500, m=512))
    assert cross["unaligned_flops"] == cross["flops"] and cross["unaligned_map"] == 0
    narrow = feature_values(aligned.replace(d=248))  # p = 31
    assert narrow["unaligned_flops"] == narrow["flops"]
    assert narrow["unaligned_map"] == narrow["map"]
    train = feature_values(aligned.replace(mode="train", d=248))
    assert train["unaligned_map"] == train["map"] == 3 * narrow["map"]
    # ... and their score rows, one per query row and head, whatever m is
    assert feature_values(aligned)["unaligned_rows"] == cross["unaligned_rows"] == 0
    assert values["unaligned_rows"] == 2 * 8 * 500 and narrow["unaligned_rows"] == 2 * 8 * 512
    assert train["unaligned_rows"] == 3 * narrow["unaligned_rows"]
    assert feature_values(aligned.replace(cross=True, m=500))["unaligned_rows"] == 2 * 8 * 512
    # a decode step's time is its reads: no alignment term, whatever its shape; its scores
    # (one cache row each) count again at their own rate, a forward step's do not
    dec = feature_values(aligned.replace(mode="decode", n=1, m=500, d=248))
    assert dec["unaligned_flops"] == dec["unaligned_map"] == dec["unaligned_rows"] == 0
    assert dec["decode_scores"] == dec["map"] == 2 * 8 * 501  # m + 1 positions
    assert values["decode_scores"] == train["decode_scores"] == 0


def test_kv_copy_counts_the_keys_and_values_a_decode_step_copies() -> None:
    dec = AttentionConfig(backend="batched", mode="decode", batch=4, n=1, m=500, d=256,
                          heads=16, kv_heads=4)
    kv = feature_values(dec)["kv"]
    # torch: the repeating backend copies for GQA/MQA only, and no other backend copies
    assert feature_values(dec)["kv_copy"] == kv > 0
    assert feature_values(dec.replace(kv_heads=16))["kv_copy"] == 0
    for backend in ("loop", "fused"):
        assert feature_values(dec.replace(backend=backend, kv_heads=1))["kv_copy"] == 0
    # JAX self decode: XLA copies the cache of batched at h_kv = h 4 times, of blockwise
    # twice, of loop 4 times for one K/V head; JAX fused transposes and copies a single K/V
    # head, self and cross; batched GQA writes its repeat once; nothing else copies in a
    # cross step, nor outside decode
    jax = dec.replace(framework="jax", kv_heads=16)
    for backend, kv_heads, copies in (("batched", 16, 4), ("batched", 4, 1),
                                      ("blockwise", 16, 2), ("blockwise", 4, 2),
                                      ("loop", 1, 4), ("loop", 4, 0), ("fused", 1, 2),
                                      ("fused", 4, 0)):
        for cross in (False, True):
            config = jax.replace(backend=backend, kv_heads=kv_heads, cross=cross)
            copied = copies if not cross or backend == "fused" or kv_heads < 16 and (
                backend == "batched") else 0
            assert feature_values(config)["kv_copy"] == copied * feature_values(config)["kv"], (
                backend, kv_heads, cross)
    assert feature_values(jax.replace(cross=True))["kv_copy"] == 0
    assert feature_values(jax.replace(cross=True, kv_heads=4))["kv_copy"] > 0  # the repeat
    assert feature_values(AttentionConfig(framework="jax", kv_heads=2))["kv_copy"] == 0


def test_projects_kv_is_a_per_call_cost_of_every_step_but_a_cross_decode_step() -> None:
    dec = AttentionConfig(backend="fused", mode="decode", batch=2, n=1, m=100, d=64, heads=4)
    assert feature_values(dec)["projects_kv"] == 1
    assert feature_values(dec.replace(cross=True))["projects_kv"] == 0
    assert feature_values(AttentionConfig(cross=True))["projects_kv"] == 1
    assert feature_values(AttentionConfig(mode="train"))["projects_kv"] == 3


def test_projects_kv_is_fitted_only_where_cross_decode_steps_tell_it_from_const() -> None:
    truth = {**TRUE_COEF, "kv": 1e-9, "kv_copy": 2e-9, "projects_kv": 3e-5}
    forward = [AttentionConfig(framework="jax", backend="batched", batch=b, n=n, d=d,
                               heads=h)
               for b in (2, 8) for n in (128, 512) for d in (64, 256) for h in (1, 4, 16)]
    # (heads 4 and 16: at one h the decode scores, b*h*m, would be the K/V count over 32)
    decode = [AttentionConfig(framework="jax", backend="batched", mode="decode", batch=b,
                              n=1, m=m, d=256, heads=h, kv_heads=kv, cross=cross)
              for b in (1, 4) for m in (1024, 4096) for h, kv in ((16, 1), (16, 4), (4, 4))
              for cross in (False, True)]
    model = fit_cells(_cells(forward + decode, truth, None), KEY)
    for name in FEATURES:
        assert model.coef[name] == pytest.approx(truth[name], rel=1e-6, abs=1e-15), name
    # Without cross decode steps the column equals the constant's: one coefficient, the
    # constant's, takes both, and the predictions stay exact.
    selfish = [c for c in forward + decode if not c.cross]
    model = fit_cells(_cells(selfish, truth, None), KEY)
    assert "projects_kv" not in model.features and model.coef["projects_kv"] == 0
    assert model.coef["const"] == pytest.approx(truth["const"] + truth["projects_kv"])
    assert all(model.predict(c) == pytest.approx(synthetic_time(c, truth), rel=1e-6)
               for c in selfish)


def test_masked_is_a_per_call_cost_of_a_step_with_a_key_mask() -> None:
    fwd = AttentionConfig(cross=True, n=64, m=96, d=64, heads=4)
    assert feature_values(fwd)["masked"] == 0
    assert feature_values(fwd.replace(masked=True))["masked"] == 1
    assert feature_values(fwd.replace(masked=True, mode="train"))["masked"] == 3
    dec = AttentionConfig(mode="decode", batch=2, n=1, m=100, d=64, heads=4, cross=True)
    assert feature_values(dec.replace(masked=True))["masked"] == 1
    # ... of an eager torch step only: under jit (every JAX backend) and torch.compile the
    # mask is built inside the compiled graph, and FlexAttention builds its block mask per call
    for framework, backend, dispatched in (("jax", "fused", False), ("jax", "blockwise", False),
                                           ("torch", "compiled", False), ("torch", "flex", True),
                                           ("torch", "loop", True), ("torch", "reference", True)):
        config = fwd.replace(framework=framework, backend=backend, masked=True)
        assert feature_values(config)["masked"] == (1 if dispatched else 0), config.id


def test_the_masked_cost_is_fitted_apart_from_the_constant() -> None:
    # Half the cells masked: the fit recovers the mask's cost per call and the constant.
    truth = {**TRUE_COEF, "kv": 0.0, "masked": 2.5e-5}
    configs = [AttentionConfig(batch=b, n=n, m=m, d=d, heads=h, cross=True, masked=masked)
               for b in (2, 8) for n, m in ((128, 96), (512, 384)) for d in (64, 256)
               for h in (1, 4, 16) for masked in (False, True)]
    model = fit_cells(_cells(configs, truth, None), KEY)
    assert "masked" in model.features
    for name in FEATURES:
        assert model.coef[name] == pytest.approx(truth[name], rel=1e-6, abs=1e-15), name


def test_block_mask_counts_flexattention_mask_elements_padded_to_its_blocks() -> None:
    from torch.nn.attention.flex_attention import _DEFAULT_SPARSE_BLOCK_SIZE

    assert backends.get("torch", "flex").mask_block == _DEFAULT_SPARSE_BLOCK_SIZE == 128
    dec = AttentionConfig(backend="flex", mode="decode", batch=7, n=1, m=329, d=256,
                          heads=1, cross=True, masked=True)
    assert feature_values(dec)["block_mask"] == 7 * 128 * 384  # one query row: one block
    fwd = AttentionConfig(backend="flex", batch=2, n=67, m=129, d=64, heads=4, masked=True,
                          cross=True)
    assert feature_values(fwd)["block_mask"] == 2 * 128 * 256
    # a prefix step (no cache) masks causally over m + 1 rows and keys; a self decode step
    # (one query, every cached key) has no mask to build
    prefix = AttentionConfig(backend="flex", mode="prefix", batch=2, n=1, m=300, d=64, heads=4)
    assert feature_values(prefix)["block_mask"] == 2 * 384 * 384
    assert feature_values(prefix.replace(mode="decode"))["block_mask"] == 0
    # the mask is built only for a masked step, and only by a backend that builds one
    assert feature_values(fwd.replace(masked=False))["block_mask"] == 0
    for backend in ("batched", "fused", "compiled"):
        assert feature_values(fwd.replace(backend=backend))["block_mask"] == 0


def test_the_block_mask_rate_is_fitted_apart_from_the_masked_call() -> None:
    # FlexAttention cells, half of them masked at several b, n, m: the fit tells the mask's
    # cost per element from its cost per call.
    truth = {**TRUE_COEF, "kv": 0.0, "masked": 2.5e-5, "block_mask": 3e-9}
    configs = [AttentionConfig(backend="flex", batch=b, n=n, m=m, d=d, heads=h, cross=True,
                               masked=masked)
               for b in (1, 6) for n, m in ((64, 96), (300, 700)) for d in (64, 256)
               for h in (1, 4, 16) for masked in (False, True)]
    model = fit_cells(_cells(configs, truth, None), KEY)
    assert {"masked", "block_mask"} <= set(model.features)
    for name in FEATURES:
        assert model.coef[name] == pytest.approx(truth[name], rel=1e-6, abs=1e-15), name


def test_kv_spill_counts_the_decode_reads_past_the_cache() -> None:
    # The K/V as the backend reads them (the h_kv-wide cache, or the h-wide copy batched
    # writes and reads each call), read and copied alike, past the cache: which part is past
    # it, the whole working set decides, the K/V and the weights read each call.
    dec = AttentionConfig(backend="batched", mode="decode", batch=4, n=1, m=4096, d=256,
                          heads=16)  # 32 MiB (and one position) of float32 K/V cache
    kv = feature_values(dec)["kv"]
    reads = decode_working_set_bytes(dec)
    assert reads == 4 * kv + 2**20  # and 1 MiB of weights: W_q, W_k, W_v, W_o, 256 x 256
    past = feature_values(dec, kv_cache_bytes=8 * 2**20)["kv_spill"]
    assert past == pytest.approx(kv * (1 - 8 * 2**20 / reads))  # all but what a cache keeps
    assert 0.75 * kv < past < 0.76 * kv  # 8 of 33 MiB kept
    mqa = dec.replace(kv_heads=1)  # 2 MiB stored, 32 MiB read after repeat_interleave
    # the repeat writes the 32 MiB copy it then reads: twice the elements move past the cache
    assert feature_values(mqa)["kv_copy"] == pytest.approx(kv)
    assert feature_values(mqa, kv_cache_bytes=8 * 2**20)["kv_spill"] == pytest.approx(
        2 * kv * (1 - 8 * 2**20 / decode_working_set_bytes(mqa)))
    # a JAX batched self step copies its donated cache 4 times (XLA_SELF_CACHE_COPIES)
    jax_dec = dec.replace(framework="jax")
    assert feature_values(jax_dec)["kv_copy"] == pytest.approx(4 * kv)
    assert feature_values(jax_dec, kv_cache_bytes=8 * 2**20)["kv_spill"] == pytest.approx(
        5 * past)
    fused = mqa.replace(backend="fused")  # reads the 2 MiB cache as it is
    assert feature_values(fused, kv_cache_bytes=8 * 2**20)["kv_spill"] == 0
    assert feature_values(fused, kv_cache_bytes=2 * 2**20)["kv_spill"] == pytest.approx(
        feature_values(fused)["kv"] * (1 - 2 * 2**20 / decode_working_set_bytes(fused)))
    assert decode_working_set_bytes(fused) < 3 * 2**20  # with 0.5 MiB of narrower W_k, W_v
    assert feature_values(dec, kv_cache_bytes=64 * 2**20)["kv_spill"] == 0
    assert feature_values(dec)["kv_spill"] == 0  # no cache size: no term
    fwd = dec.replace(mode="forward", n=64, cross=True)  # forward K/V are fresh activations
    assert feature_values(fwd, kv_cache_bytes=2**20)["kv_spill"] == 0
    # the fit's matrix counts the same
    table = CellFeatures.of(pd.DataFrame([{**vars(c), "config_id": c.id}
                                          for c in (dec, mqa, jax_dec, fused, fwd)]))
    column = table.matrix(None, 8 * 2**20)[:, FEATURES.index("kv_spill")]
    assert list(column) == pytest.approx([feature_values(c, None, 8 * 2**20)["kv_spill"]
                                          for c in (dec, mqa, jax_dec, fused, fwd)])


def _cells(configs: list[AttentionConfig], coef: dict, kv_cache: float) -> pd.DataFrame:
    rows = [{**vars(c), "config_id": c.id, "flops_model": 0.0,
             "value": sum(coef[f] * v for f, v in feature_values(c, None, kv_cache).items())}
            for c in configs]
    return pd.DataFrame(rows)


def test_machine_fit_recovers_the_kv_cache_size_shared_by_its_groups() -> None:
    coef = {**TRUE_COEF, "kv": 1e-9, "kv_spill": 4e-9}
    forward = [AttentionConfig(backend="fused", batch=b, n=n, d=d, heads=h)
               for b in (2, 8) for n in (128, 512) for d in (64, 256) for h in (1, 4, 16)]
    # Decode caches of just over 1/8 to 32 MiB (b*(m+1)*kv_heads*128 bytes), timed with a
    # 4 MiB cache: the reads past it tell that size from its neighbours.
    decode = [AttentionConfig(backend="fused", mode="decode", batch=b, n=1, m=m, d=256,
                              heads=16, kv_heads=kv)
              for b in (1, 4) for m in (1024, 4096) for kv in (1, 4, 16)]
    groups = {("synth", "torch", "fused", "cpu", "float32"):
              _cells(forward + decode, coef, 4 * 2**20),
              ("synth", "jax", "fused", "cpu", "float32"):
              _cells(forward + decode, {**coef, "kv_spill": 2e-9}, 4 * 2**20)}
    models = fit_machine(groups)
    for key, model in models.items():
        assert model.kv_cache_bytes == 4 * 2**20
        truth = coef if key[1] == "torch" else {**coef, "kv_spill": 2e-9}
        for name in FEATURES:
            assert model.coef[name] == pytest.approx(truth[name], rel=1e-6, abs=1e-15), name
    # Without decode cells there is nothing to place a K/V cache size by: none.
    forward_only = {k: g[g["mode"] == "forward"] for k, g in groups.items()}
    assert all(m.kv_cache_bytes is None for m in fit_machine(forward_only).values())


def test_reads_past_the_cache_need_cells_that_mostly_spill() -> None:
    """A decode cell a sliver past the K/V cache size cannot set the rate of reads past it:
    fitted to such a cell alone, the term would take any value and predict a long cache
    thousands of times its time. With no two cells reading most of their K/V past the
    cache the term is not fitted; with two it is."""
    forward = [AttentionConfig(backend="fused", batch=b, n=n, d=d, heads=h)
               for b in (2, 8) for n in (128, 512) for d in (64, 256) for h in (1, 4, 16)]
    # b*(m+1)*2*256*4 bytes: m = 4096 is 2 KiB past an 8 MiB cache, the rest fit in it
    decode = [AttentionConfig(backend="fused", mode="decode", batch=1, n=1, m=m, d=256,
                              heads=16, kv_heads=kv)
              for m in (512, 1024, 2048, 4096) for kv in (4, 16)]
    coef = {**TRUE_COEF, "kv": 1e-9, "kv_spill": 4e-9}
    cells = _cells(forward + decode, coef, 8 * 2**20)
    sliver = cells["config_id"] == decode[-1].id
    cells.loc[sliver, "value"] *= 1.2  # its process read it 20 % slow
    model = fit_cells(cells, KEY, 8 * 2**20)
    assert "kv_spill" not in model.features and model.coef["kv_spill"] == 0
    long_cache = decode[-1].replace(batch=8)  # 67 MB, 7/8 of it past the cache
    assert model.predict(long_cache) < 2 * synthetic_time(long_cache, coef)
    # two cells reading most of their K/V past the cache set the term
    spilled = [c.replace(batch=b) for c in decode[-1:] for b in (4, 8)]
    model = fit_cells(_cells(forward + decode + spilled, coef, 8 * 2**20), KEY, 8 * 2**20)
    assert model.coef["kv_spill"] == pytest.approx(4e-9, rel=1e-6)


def test_a_prior_settles_what_the_cells_cannot_tell_apart() -> None:
    # Two identical columns: the cells fix only their sum (1.0); the prior fixes the split.
    A = np.column_stack([np.ones(20), np.ones(20)])
    fitted = pulled_nnls(A, np.array([0.8, 0.2]))
    assert fitted.sum() == pytest.approx(1.0, rel=0.02)
    assert fitted == pytest.approx([0.8, 0.2], abs=0.02)
    # ... and gives way to the cells where they tell: a prior at twice the one column's
    # coefficient moves it by under a few %
    assert pulled_nnls(A[:, :1], np.array([2.0]))[0] == pytest.approx(1.0, rel=0.05)
    # a column without a prior (0) is fitted by the cells alone
    assert pulled_nnls(A[:, :1], np.array([0.0]))[0] == pytest.approx(1.0, rel=1e-9)


def test_a_group_with_few_cells_per_term_takes_its_frameworks_rates() -> None:
    """A group whose cells cannot tell its per-call cost from its per-head cost (all at
    h = 8 and d = 256) is pulled toward the median of the framework's well-fitted groups,
    and predicts other head counts; fitted alone, it puts the cost on any of the terms."""
    wide = [AttentionConfig(backend="fused", batch=b, n=n, d=d, heads=h)
            for b in (1, 4) for n in (64, 256) for d in (128, 512) for h in (1, 4, 16)]
    coef = {**TRUE_COEF, "kv": 0.0}
    groups = {("synth", "torch", be, "cpu", "float32"):
              _cells([c.replace(backend=be) for c in wide], coef, None)
              for be in ("batched", "fused", "loop")}
    small = ("synth", "torch", "flex", "cpu", "float32")
    groups[small] = _cells([AttentionConfig(backend="flex", batch=b, n=n, d=256, heads=8)
                            for b, n in ((1, 32), (1, 64), (1, 128), (1, 512), (2, 32),
                                         (2, 64), (2, 128))], coef, None)
    models = fit_machine(groups)
    assert [k[2] for k, m in models.items() if m.pooled] == ["flex"]
    alone = fit_cells(groups[small], small)
    far = AttentionConfig(backend="flex", batch=2, n=128, d=256, heads=64)
    truth = synthetic_time(far, coef)
    assert models[small].predict(far) == pytest.approx(truth, rel=0.05)
    assert abs(alone.predict(far) / truth - 1) > 0.15  # what the prior fixes
    # the models of well-fitted groups are left as they were
    assert pool_small_groups({k: m for k, m in models.items() if k != small}, groups) == {
        k: m for k, m in models.items() if k != small}


def test_a_mode_seen_only_without_cross_attention_is_an_extrapolation_with_it() -> None:
    """Fitted on cross-attention forward steps and self-attention decode steps: a cross
    decode step lies outside what the fit saw (each field alone was seen), and validate's
    default draws never give one."""
    forward = [AttentionConfig(backend="fused", batch=b, n=n, m=2 * n, d=d, heads=h,
                               cross=True)
               for b in (2, 8) for n in (128, 512) for d in (64, 256) for h in (1, 4, 16)]
    decode = [AttentionConfig(backend="fused", mode="decode", batch=b, n=1, m=m, d=256,
                              heads=16, kv_heads=kv)
              for b in (1, 4) for m in (1024, 4096) for kv in (1, 4, 16)]
    cells = _cells(forward + decode, {**TRUE_COEF, "kv": 1e-9, "kv_spill": 0.0}, 4 * 2**20)
    model = fit_cells(cells, KEY)
    assert model.seen["mode/cross"] == ("decode/self", "forward/cross")
    self_decode = AttentionConfig(backend="fused", mode="decode", batch=2, n=1, m=2048,
                                  d=256, heads=16, kv_heads=4)
    assert model.extrapolation(self_decode) == []
    assert model.extrapolation(self_decode.replace(cross=True)) == [
        "mode/cross=decode/cross not fitted (only decode/self, forward/cross)"]
    # a field never seen alone is said once, not again as a pair
    assert model.extrapolation(self_decode.replace(mode="train", n=256, m=256)) == [
        "mode=train not fitted (only decode, forward)"]
    sample = sample_configs({KEY: model}, {KEY: cells}, 40, seed=2)
    assert {(c.mode, c.cross) for _, c in sample} == {("decode", False), ("forward", True)}
    wide = sample_configs({KEY: model}, {KEY: cells}, 40, seed=2, wide=True)
    assert ("decode", True) in {(c.mode, c.cross) for _, c in wide}


def test_leave_out_meets_target_and_beats_one_flop_rate(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", noise=0.05, seed=4)
    errors = leave_out(load_results(root).frame)
    assert len(errors) == len(load_results(root).frame.query("kind == 'time' and "
                                                             "config_id.notna()"))
    summary = error_summary(errors).iloc[0]
    assert summary["median_rel_error"] <= 0.15
    assert summary["flop_rate_median_rel_error"] > 2 * summary["median_rel_error"]
    assert summary["worst_rel_error"] >= summary["median_rel_error"]


def test_predicts_configs_outside_the_grid(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", noise=0.0)
    models = fit_models(load_results(root).frame)
    config = AttentionConfig(batch=4, n=384, d=128, heads=32)  # none of these in the grid
    assert config.batch not in grid()[2] and config.n not in grid()[3]
    model = select_model(models, config)
    assert model.predict(config) == pytest.approx(synthetic_time(config), rel=1e-6)
    assert sum(model.terms(config).values()) == pytest.approx(model.predict(config))


def test_select_model_names_what_is_missing(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r")
    models = fit_models(load_results(root).frame)
    with pytest.raises(ValueError, match="jax/batched/cpu/float32.*fitted: torch/batched"):
        select_model(models, AttentionConfig(framework="jax"))
    with pytest.raises(ValueError, match="no time model .* machine 'other'"):
        select_model(models, AttentionConfig(), machine="other")


def test_predict_cli_json_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = write_results(tmp_path / "r", noise=0.02, seed=5)
    argv = ["predict", "--results", str(root), "--batch", "4", "-n", "384", "-d", "128",
            "--heads", "32", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    config = AttentionConfig(batch=4, n=384, d=128, heads=32)
    model = select_model(fit_models(load_results(root).frame), config)
    assert out["id"] == config.id and out["machine"] == "synth"
    assert out["predicted_s"] == pytest.approx(model.predict(config))
    assert out["predicted_s"] == pytest.approx(sum(out["terms"].values()))
    assert out["predicted_s"] == pytest.approx(synthetic_time(config), rel=0.1)


def test_cell_features_match_feature_values_at_every_cache_size() -> None:
    configs = [AttentionConfig(backend=b, mode=mode, batch=bt, n=1 if mode == "decode" else n,
                               m=m, d=256, heads=h, kv_heads=kv)
               for b in ("batched", "fused") for mode in ("forward", "train", "decode")
               for bt, n, m in ((2, 512, 512), (8, 1024, 1024)) for h, kv in ((16, 4), (4, 4))]
    cells = pd.DataFrame([{**vars(c), "config_id": c.id} for c in configs])
    table = CellFeatures.of(cells)
    for cache, kv_cache in ((None, None), (2**20, None), (None, 2**20), (8 * 2**20, 2**22)):
        expected = [[feature_values(c, cache, kv_cache)[f] for f in FEATURES] for c in configs]
        assert np.array_equal(table.matrix(cache, kv_cache), np.array(expected))


@pytest.mark.parametrize("heads, features, reduced", [
    # forward steps only: the K/V term (decode) is 0 on every cell, never fitted
    ((1, 2, 4, 8, 16, 32, 64), ("flops", "map", "weights", "heads", "const"), False),
    # 5 cells: the full model's 5 non-zero terms would be exact; the base terms less K/V
    ((1, 2, 4, 8, 16), ("flops", "map", "heads", "const"), False),
    ((1, 2, 4, 8), ("flops", "map", "const"), True),
    ((1, 2, 4), ("flops", "const"), True),
])
def test_a_group_never_fits_as_many_coefficients_as_it_has_cells(
        tmp_path: Path, heads: tuple[int, ...], features: tuple[str, ...], reduced: bool
        ) -> None:
    root = write_results(tmp_path / "r", params=grid()[:2] + [[2], [128], [256], list(heads)]
                         + grid()[6:])
    model = fit_models(load_results(root).frame)[KEY]
    assert model.features == features and model.cells == len(heads)
    assert len(model.features) < model.cells
    assert model.reduced == reduced
    assert all(model.coef[f] == 0 for f in FEATURES if f not in features)


def test_a_group_too_small_for_any_model_is_reported_not_fitted(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = write_results(tmp_path / "r", params=grid()[:2] + [[2], [128], [256], [1, 8]]
                         + grid()[6:])
    frame = load_results(root).frame
    assert KEY not in fit_models(frame) and underdetermined(frame) == {KEY: 2}
    assert main(["predict", "--results", str(root), "--heads", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 timed cell(s), fewer than the 3" in err[0]
    assert "under-determined, not fitted" in err[0]


def test_predict_marks_every_extrapolation(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    root = write_results(tmp_path / "r", noise=0.02, seed=6)  # batch 2-8, n 128-512, d 64-256
    model = fit_models(load_results(root).frame)[KEY]
    assert model.ranges == {"batch": (2, 8), "n": (128, 512), "m": (128, 512), "d": (64, 256),
                            "heads": (1, 64), "kv_heads": (1, 64)}
    inside = AttentionConfig(batch=4, n=384, d=192, heads=3)  # off the grid, inside the box
    assert model.extrapolation(inside) == []
    outside = AttentionConfig(batch=1, n=1024, d=192, heads=3, kv_heads=1, masked=True,
                              mode="train")
    assert model.extrapolation(outside) == [
        "batch=1 outside fitted 2-8", "n=1024 outside fitted 128-512",
        "m=1024 outside fitted 128-512", "mode=train not fitted (only forward)",
        "masked=True not fitted (only False)"]
    assert main(["predict", "--results", str(root), "--batch", "1", "-n", "1024", "-d", "192",
                 "--heads", "3", "--kv-heads", "1", "--masked", "--mode", "train",
                 "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["extrapolation"] == model.extrapolation(outside)
    warnings = [line for line in captured.err.splitlines() if "extrapolation" in line]
    assert len(warnings) == 5 and all(w.startswith("mhabench predict: warning:")
                                      for w in warnings)
    assert main(["predict", "--results", str(root), "--batch", "4", "-n", "384", "-d", "192",
                 "--heads", "3"]) == 0
    captured = capsys.readouterr()
    assert "EXTRAPOLATED" not in captured.out and "extrapolation" not in captured.err
    # causal cells never enter a fit: a causal config is predicted as its full step, and
    # says so
    assert model.extrapolation(inside.replace(causal=True)) == [
        "causal=True not fitted (only False)"]
    assert main(["predict", "--results", str(root), "--batch", "4", "-n", "384", "-d", "192",
                 "--heads", "3", "--causal"]) == 0
    assert "extrapolation: causal=True not fitted (only False)" in capsys.readouterr().err


def test_the_jax_blockwise_backend_scores_its_padded_key_tiles() -> None:
    from mhabench.analysis.prediction.features import scored_keys
    from mhabench.core.backends import KEY_BLOCK

    fwd = AttentionConfig(framework="jax", backend="blockwise", n=100, m=KEY_BLOCK + 1,
                          cross=True)
    assert scored_keys(fwd) == 2 * KEY_BLOCK  # a second tile, mostly padding
    assert feature_values(fwd)["map"] == feature_values(fwd.replace(m=2 * KEY_BLOCK))["map"]
    assert scored_keys(fwd.replace(m=KEY_BLOCK - 5)) == KEY_BLOCK - 5  # one shorter tile
    assert scored_keys(fwd.replace(framework="torch", backend="batched")) == KEY_BLOCK + 1
    assert scored_keys(fwd.replace(backend="fused")) == KEY_BLOCK + 1
    # a self decode step's cache holds m + 1 keys
    dec = fwd.replace(mode="decode", n=1, m=2 * KEY_BLOCK, cross=False)
    assert scored_keys(dec) == 3 * KEY_BLOCK
    assert feature_values(dec)["decode_scores"] == dec.batch * dec.heads * 3 * KEY_BLOCK
