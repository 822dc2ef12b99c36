"""The config type's validation and ids, and the cost model against the chapter and
against two independent FLOP counters (torch's FlopCounterMode, XLA's cost analysis)."""

from __future__ import annotations

import pytest

from mhabench.core.config import AttentionConfig, UnavailableError, preset
from mhabench.core.cost import cost, decoder_step_flops, kv_cache_bytes_per_token, params
from mhabench.measure.timing import check_available


@pytest.mark.parametrize("kwargs, message", [
    ({"framework": "tf"}, "framework='tf' is not allowed; choose one of torch, jax"),
    ({"backend": "flash"}, "backend='flash' is not allowed for framework='torch'; "
                           "choose one of loop, batched"),
    ({"device": "tpu"}, "device='tpu' is not allowed; choose one of cpu, cuda"),
    ({"dtype": "float16"}, "dtype='float16' is not allowed; choose one of float32, bfloat16"),
    ({"mode": "backward"}, "mode='backward' is not allowed; choose one of forward, train"),
    ({"heads": 3}, "heads=3 must divide d=256; allowed heads: 1, 2, 4, 8"),
    ({"heads": 8, "kv_heads": 3}, "kv_heads=3 must divide heads=8; allowed kv_heads: 1, 2, 4, 8"),
    ({"batch": 0}, "batch=0 is not allowed; it must be a positive integer"),
    ({"n": -4}, "n=-4 is not allowed; it must be a positive integer"),
    ({"d": 2.5}, "d=2.5 is not allowed; it must be a positive integer"),
    ({"heads": True}, "heads=True is not allowed"),
    ({"m": 100}, "m=100 differs from n=512 in self-attention; set cross=True"),
    ({"dropout": 1.0}, "dropout=1.0 is not allowed; it must be in [0, 1)"),
    ({"masked": "yes"}, "masked='yes' is not allowed; use True or False"),
    ({"backend": "reference", "kv_heads": 2}, "backend='reference' (the framework's own layer)"
                                              " supports MHA only, but kv_heads=2"),
    ({"backend": "reference", "mode": "decode", "n": 1, "m": 8},
     "backend='reference' (the framework's own layer) does not run mode='decode'"),
    ({"mode": "prefix", "n": 1, "m": 8, "backend": "reference"}, "mode='prefix' needs loop"),
    ({"mode": "decode", "n": 4, "m": 8}, "n=4 is not allowed with mode='decode'; a decode step"),
    ({"mode": "prefix", "n": 2}, "n=2 is not allowed with mode='prefix'"),
    ({"mode": "prefix", "n": 1, "m": 8, "cross": True}, "cross=True is not allowed with "
                                                         "mode='prefix'"),
    ({"mode": "decode", "n": 1, "m": 8, "masked": True}, "masked=True is not allowed with "
                                                          "mode='decode' self-attention"),
    ({"dropout": 0.1}, "dropout=0.1 is not allowed with mode='forward': dropout acts in "
                       "mode='train' only"),
    ({"mode": "decode", "n": 1, "dropout": 0.5}, "dropout=0.5 is not allowed with "
                                                 "mode='decode'"),
    ({"framework": "jax", "backend": "fused", "mode": "train", "dropout": 0.1},
     "dropout=0.1 is not allowed with framework='jax', backend='fused'"),
])
def test_invalid_configs_name_the_value_and_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError) as info:
        AttentionConfig(**kwargs)
    assert message in str(info.value)
    assert "\n" not in str(info.value)  # one line


def test_unknown_field_from_dict():
    with pytest.raises(ValueError, match=r"unknown config field\(s\) \['hedas'\]"):
        AttentionConfig.from_dict({"hedas": 4})


def test_defaults_and_ids_are_stable_and_distinct():
    c = AttentionConfig(heads=8)
    assert (c.m, c.kv_heads, c.head_dim, c.variant) == (512, 8, 32, "mha")
    assert c.id == "torch-batched-cpu-f32-fwd-b8-n512-m512-d256-h8-kv8"
    assert AttentionConfig.from_dict(c.to_dict()) == c
    step = c.replace(n=1, m=64, mode="decode")  # the decode family: distinct work, ids
    variants = [c, c.replace(kv_heads=1), c.replace(kv_heads=2), c.replace(cross=True, m=64),
                c.replace(masked=True), c.replace(framework="jax"), c.replace(mode="train"),
                c.replace(dtype="bfloat16"), c.replace(heads=16), step,
                step.replace(cross=True), step.replace(mode="prefix"),
                step.replace(mode="forward", cross=True), c.replace(mode="train", dropout=0.1)]
    assert len({v.id for v in variants}) == len(variants)
    assert [v.id.split("-")[4] for v in variants[-5:-1]] == ["dec", "dec", "prefix", "fwd"]
    assert [v.variant for v in variants[:3]] == ["mha", "mqa", "gqa"]
    # Changing h of an MHA config keeps it MHA; changing n of self-attention keeps m = n.
    assert c.replace(heads=64).kv_heads == 64 and c.replace(n=128).m == 128
    # A decode step keeps m (the tokens before the new one) when n becomes 1.
    assert step.replace(batch=2).m == 64 and c.replace(n=1, mode="decode").m == 512


def test_cuda_without_gpu_is_reported_clearly():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UnavailableError, match="device='cuda' is not available to torch"):
        check_available(AttentionConfig(device="cuda"))


def test_presets():
    sweep = preset("chapter", "jax", "fused")
    assert [c.heads for c in sweep] == [1, 8, 64]
    assert {(c.framework, c.backend, c.batch, c.n, c.d) for c in sweep} == {
        ("jax", "fused", 8, 512, 256)}
    with pytest.raises(ValueError, match="unknown preset 'nope'; choose one of chapter"):
        preset("nope")


# ----- the cost model -------------------------------------------------------------------
@pytest.mark.parametrize("n, d", [(512, 256), (100, 64), (7, 4096)])
def test_chapter_flop_count_is_independent_of_heads(n, d):
    for h in (1, 2, 4):
        c = cost(AttentionConfig(batch=1, n=n, d=d, heads=h))
        assert c.flops_model == 8 * n * d**2 + 4 * n**2 * d
        assert c.flops_projections == 8 * n * d**2 and c.flops_attention == 4 * n**2 * d
        # The elementwise map work is what grows with h.
        assert c.flops_elementwise == 5 * h * n * n


def test_parameters_match_the_chapter():
    for h in (1, 2, 4, 8):
        assert cost(AttentionConfig(d=256, heads=h)).params == 262144
    # MQA/GQA shrink only W_k and W_v (Exercise 8.1).
    assert params(256, 8, 1) == 2 * 256**2 + 2 * 256 * 32


def test_kv_cache_bytes_exercise_8_2():
    assert kv_cache_bytes_per_token(4096, 32, 32, 2) == 16384  # MHA
    assert kv_cache_bytes_per_token(4096, 32, 8, 2) == 4096  # GQA, g = 8
    assert kv_cache_bytes_per_token(4096, 32, 1, 2) == 512  # MQA
    c = cost(AttentionConfig(d=4096, heads=32, kv_heads=8, dtype="bfloat16"))
    assert c.kv_cache_bytes_per_token == 4096


def test_cross_attention_terms_exercise_7_1():
    n, m, d = 10, 30, 64
    c = cost(AttentionConfig(batch=1, n=n, m=m, d=d, heads=4, cross=True))
    assert c.flops_projections == 4 * n * d * d + 4 * m * d * d  # n-terms and m-terms
    assert c.flops_attention == 4 * n * m * d  # the nm term


def test_decoder_step_with_and_without_cache_exercise_7_2():
    d, m = 512, 1000
    cached, recomputed = decoder_step_flops(d, m), decoder_step_flops(d, m, cached=False)
    assert cached == 4 * d * d + 4 * m * d
    assert recomputed == cached + 4 * m * d * d
    assert recomputed / cached == pytest.approx(339.6, abs=0.1)
    # The config-level decode mode agrees with the per-token formula (batch 1, 1 token).
    step = AttentionConfig(batch=1, n=1, m=m, d=d, heads=8, mode="decode", cross=True)
    assert cost(step).flops_model == cached
    assert cost(step.replace(mode="forward")).flops_model == recomputed


def test_decode_steps_count_the_step_they_run():
    """Self decode: the new token's q, k, v and o projections, scores and mixing over the
    m cached positions plus its own; cross decode: no K/V projection, m source positions;
    prefix: causal self-attention over m + 1 tokens, the full map computed."""
    b, m, d, h, kv = 2, 100, 64, 8, 2
    kv_width = kv * d // h
    step = AttentionConfig(batch=b, n=1, m=m, d=d, heads=h, kv_heads=kv, mode="decode")
    c = cost(step)
    assert c.flops_projections == b * (4 * d * d + 4 * d * kv_width)
    assert c.flops_attention == b * 4 * (m + 1) * d
    assert c.attention_map_elements == b * h * (m + 1)
    assert c.kv_cache_bytes_read == b * (m + 1) * 2 * kv_width * 4
    cross = cost(step.replace(cross=True))
    assert cross.flops_projections == b * 4 * d * d and cross.flops_attention == b * 4 * m * d
    assert cross.kv_cache_bytes_read == b * m * 2 * kv_width * 4
    length = m + 1
    prefix = cost(step.replace(mode="prefix"))
    assert prefix.flops_model == b * (4 * length * d * d + 4 * length * d * kv_width
                                      + 4 * length * length * d)
    recomputed = step.replace(mode="forward", cross=True)
    assert prefix.kv_cache_bytes_read == 0 and cost(recomputed).kv_cache_bytes_read == 0
    # MQA reads h times fewer cache bytes per step than MHA (Exercise 8).
    mha, mqa = step.replace(kv_heads=h), step.replace(kv_heads=1)
    assert cost(mha).kv_cache_bytes_read == h * cost(mqa).kv_cache_bytes_read


def test_attention_map_bytes_by_backend():
    c = AttentionConfig(batch=8, n=512, d=256, heads=64)
    assert cost(c).attention_map_elements == 8 * 64 * 512 * 512
    assert cost(c).attention_map_bytes == 8 * 64 * 512 * 512 * 4
    assert cost(c.replace(backend="fused")).attention_map_bytes == 0
    assert cost(c.replace(mode="train")).flops_model == 3 * cost(c).flops_model
    # The chapter's shape: a training step is 3 x (8nd^2 + 4n^2 d) = 24nd^2 + 12n^2 d.
    n, d = 512, 256
    assert cost(c.replace(batch=1, mode="train")).flops_model == 24 * n * d**2 + 12 * n**2 * d


CHECKED = [{}, {"cross": True, "m": 48}, {"kv_heads": 2}, {"kv_heads": 1, "masked": True}]
# Each mode's own shape: decode and prefix take one new token after m = 40 earlier ones.
STEPS = [{"mode": mode, **variant} for mode in ("forward", "train") for variant in CHECKED] + [
    {"mode": "decode", "n": 1, "m": 40}, {"mode": "decode", "n": 1, "m": 40, "kv_heads": 1},
    {"mode": "decode", "n": 1, "m": 40, "cross": True, "kv_heads": 2},
    {"mode": "prefix", "n": 1, "m": 40, "kv_heads": 2}]


def step_config(framework: str, backend: str, fields: dict) -> AttentionConfig:
    return AttentionConfig(**{"framework": framework, "backend": backend, "batch": 2, "n": 32,
                              "d": 64, "heads": 4, **fields})


@pytest.mark.parametrize("backend", ["batched", "loop"])
@pytest.mark.parametrize("fields", STEPS, ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()))
def test_model_equals_torch_flop_counter(backend, fields):
    """Every mode's count equals torch's FlopCounterMode (matmuls) on the step that runs:
    train takes the input's gradient too, so each matmul costs exactly 3x."""
    from torch.utils.flop_counter import FlopCounterMode

    from mhabench.layers.torch.steps import make_step

    config = step_config("torch", backend, fields)
    step = make_step(config)
    with FlopCounterMode(display=False) as counter:
        step()
    assert counter.get_total_flops() == cost(config).flops_model


@pytest.mark.parametrize("backend", ["batched", "fused"])
@pytest.mark.parametrize("fields", STEPS, ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()))
def test_xla_cost_analysis_is_model_plus_elementwise(backend, fields):
    from mhabench.layers.jax.steps import make_step

    config = step_config("jax", backend, fields)
    analysis = make_step(config).compiled.cost_analysis()
    xla = (analysis[0] if isinstance(analysis, list) else analysis)["flops"]
    c = cost(config)
    # XLA counts a few % more than the chapter's model ...
    assert 1.0 < xla / c.flops_model < 1.06
    # ... and, where the map is large enough to matter (not one decode query), the model's
    # elementwise term explains that difference to within 5 %.
    if backend == "batched" and config.mode in ("forward", "train"):
        assert (xla - c.flops_model) / c.flops_elementwise == pytest.approx(1.0, abs=0.05)
