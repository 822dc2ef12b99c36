"""The shapes of published models: a head width apart from d, a softmax scale of its own,
every backend at such a shape, and the cost model in its general form (hand counts, torch's
FlopCounterMode, XLA's cost analysis). The named shapes, the config reader and the CLI
flags: test_model_flags.py."""

from __future__ import annotations

import numpy as np
import pytest

from mhabench.core import backends
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost, decoder_step_flops, kv_cache_bytes_per_token, params
from mhabench.core.inputs import init_weights, make_inputs
from mhabench.core.models import model_shape
from mhabench.measure import agreement
from mhabench.measure.agreement import ATOL

# hidden != heads x head width (6 x 24 = 144 over d = 96), GQA, and a scale of its own
SMALL = {"d": 96, "heads": 6, "kv_heads": 2, "head_dim": 24, "scale": 0.2}


# ----- the config ------------------------------------------------------------------------
def test_a_default_head_width_changes_no_id_and_no_old_dict():
    chapter = AttentionConfig(heads=8)
    assert chapter.head_dim == 32 and chapter.scale is None and chapter.chapter_width
    assert chapter.id == "torch-batched-cpu-f32-fwd-b8-n512-m512-d256-h8-kv8"
    # The dict of a chapter cell carries nothing new: the head width follows d and heads,
    # also in a copy with d changed (as a results frame's rows are edited).
    assert chapter.to_dict()["head_dim"] is None and chapter.to_dict()["scale"] is None
    assert AttentionConfig.from_dict({**chapter.to_dict(), "d": 512}).head_dim == 64
    # Results and profiles written before the fields existed read back as the same cell.
    old = {k: v for k, v in chapter.to_dict().items() if k not in ("head_dim", "scale")}
    assert AttentionConfig.from_dict(old) == chapter
    assert AttentionConfig.from_dict(chapter.to_dict()) == chapter
    # The default given explicitly is the same cell (one name, one cache entry).
    assert AttentionConfig(heads=8, head_dim=32, scale=32 ** -0.5) == chapter
    assert hash(AttentionConfig(heads=8, head_dim=32)) == hash(chapter)


def test_a_model_shape_names_its_width_and_scale():
    config = AttentionConfig(n=16, batch=2, **SMALL)
    assert (config.head_dim, config.query_width, config.kv_width) == (24, 144, 48)
    assert not config.chapter_width and config.softmax_scale == 0.2
    assert config.id == "torch-batched-cpu-f32-fwd-b2-n16-m16-d96-h6-kv2-p24-s0.2"
    assert AttentionConfig.from_dict(config.to_dict()) == config
    assert (config.to_dict()["head_dim"], config.to_dict()["scale"]) == (24, 0.2)
    # A head width set apart from d stays when h or d change; a defaulted one follows.
    assert config.replace(heads=12).head_dim == 24
    assert AttentionConfig(d=96, heads=6).replace(heads=12).head_dim == 8
    assert AttentionConfig(d=96, heads=6).replace(d=192).head_dim == 32
    ids = {config.id, config.replace(scale=None).id, config.replace(head_dim=16).id}
    assert len(ids) == 3


@pytest.mark.parametrize("kwargs, message", [
    ({"d": 96, "heads": 7}, "heads=7 must divide d=96; allowed heads: 1, 2, 3, 4, 6, 8, 12, "
                            "16, 24, 32, 48, 96; or set head_dim"),
    ({"d": 96, "heads": 6, "kv_heads": 4, "head_dim": 24},
     "kv_heads=4 must divide heads=6; allowed kv_heads: 1, 2, 3, 6"),
    ({"head_dim": 0}, "head_dim=0 is not allowed; it must be a positive integer"),
    ({"head_dim": 12.5}, "head_dim=12.5 is not allowed"),
    ({"scale": 0}, "scale=0 is not allowed; it must be a positive number"),
    ({"scale": float("nan")}, "scale=nan is not allowed"),
    ({"scale": True}, "scale=True is not allowed"),
    ({"backend": "reference", "heads": 8, "head_dim": 16},
     "backend='reference' (the framework's own layer) needs heads x head_dim = d, but "
     "heads=8 x head_dim=16 != d=256; use loop or batched"),
    ({"backend": "reference", "scale": 0.5},
     "backend='reference' (the framework's own layer) runs the default scale "
     "1/sqrt(head_dim) only, not scale=0.5"),
])
def test_bad_widths_and_scales_name_the_value(kwargs, message):
    with pytest.raises(ValueError) as info:
        AttentionConfig(**kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_heads_need_not_divide_d_once_the_head_width_is_given():
    config = AttentionConfig(d=100, heads=8, kv_heads=2, head_dim=16)
    assert config.query_width == 128 and config.id.endswith("-p16")
    # The flax layer takes its head width through qkv_features; torch's needs h p = d.
    assert AttentionConfig(framework="jax", backend="reference", d=100, heads=4,
                           head_dim=16).head_dim == 16


# ----- every backend at a model's shape --------------------------------------------------
def numpy_attention(config: AttentionConfig, weights: dict, x: dict) -> np.ndarray:
    """Grouped-query attention written out in float64 from the shared weights: the check
    that the batched layer (the agreement tests' reference) computes it."""
    b, n, m, h, g, p = (config.batch, config.n, config.m, config.heads, config.group_size,
                        config.head_dim)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    q = (x["queries"] @ w["W_q"].T).reshape(b, n, h, p)
    k = (x["keys"] @ w["W_k"].T).reshape(b, m, config.kv_heads, p)
    v = (x["values"] @ w["W_v"].T).reshape(b, m, config.kv_heads, p)
    out = np.empty((b, n, h, p))
    for head in range(h):
        scores = q[:, :, head] @ k[:, :, head // g].transpose(0, 2, 1) * config.softmax_scale
        if x["valid_lens"] is not None:
            scores = np.where(np.arange(m)[None, None, :] < x["valid_lens"][:, None, None],
                              scores, -1e6)
        weights_ = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, :, head] = (weights_ / weights_.sum(-1, keepdims=True)) @ v[:, :, head // g]
    return out.reshape(b, n, h * p) @ w["W_o"].T


@pytest.mark.parametrize("extra", [{}, {"masked": True}, {"cross": True, "m": 11}])
def test_the_batched_layer_computes_a_models_attention(extra):
    config = AttentionConfig(batch=2, n=7, **SMALL, **extra)
    weights, x = init_weights(config), make_inputs(config)
    assert weights["W_q"].shape == (144, 96) and weights["W_o"].shape == (96, 144)
    expected = numpy_attention(config, weights, x)
    got = agreement.forward_output(config, weights, x["queries"], x["keys"], x["values"],
                                   x["valid_lens"])
    assert got.shape == (2, 7, 96)
    np.testing.assert_allclose(got, expected, atol=ATOL)
    # ... and the scale is really applied: the default one gives another output
    other = agreement.forward_output(config.replace(scale=None), weights, x["queries"],
                                     x["keys"], x["values"], x["valid_lens"])
    assert np.abs(other - expected).max() > 100 * ATOL


def test_the_flax_layer_agrees_at_a_head_width_apart_from_d():
    rows = agreement.check("jax", "reference", variants=("general-mha", "general"))
    assert rows[0].max_error is not None and rows[0].ok, rows[0]
    assert rows[1].max_error is None and "supports MHA only" in rows[1].reason
    torch_rows = agreement.check("torch", "reference", variants=("general-mha",))
    assert torch_rows[0].max_error is None and "needs heads x head_dim = d" in torch_rows[0].reason


def test_a_plugin_gets_the_scale_only_through_its_keyword(monkeypatch):
    monkeypatch.setattr(backends, "_REGISTRY", dict(backends._REGISTRY))
    seen = []

    def scaled(q, k, v, valid_lens, scale=None):
        seen.append(scale)
        return q

    def unscaled(q, k, v, valid_lens):
        return q

    backends.register_attention("scaled", "torch", scaled)
    backends.register_attention("unscaled", "torch", unscaled)
    assert backends.get("torch", "scaled").scale and not backends.get("torch", "unscaled").scale
    AttentionConfig(backend="unscaled", **SMALL | {"scale": None})  # the default: fine
    with pytest.raises(ValueError, match=r"backend='unscaled' runs the default scale "
                       r"1/sqrt\(head_dim\) only \(its attention function takes no scale "
                       r"keyword\), not scale=0.2; use loop or batched"):
        AttentionConfig(backend="unscaled", **SMALL)
    q = np.zeros((1, 2, 3, 4))
    backends.call_attention(scaled, q, q, q, None)
    backends.call_attention(scaled, q, q, q, None, scale=0.2)
    assert seen == [None, 0.2]  # default: not passed, so the function's own default holds
    # A whole-layer plug-in reads the config itself: only where it says it can.
    backends.register(backends.Backend("layer", "torch", build=lambda config, weights: None))
    with pytest.raises(ValueError, match="needs heads x head_dim = d"):
        AttentionConfig(backend="layer", **SMALL | {"scale": None})


# ----- the cost model in its general form ------------------------------------------------
def test_the_general_form_reduces_to_the_chapters():
    chapter = AttentionConfig(batch=1, n=64, d=96, heads=6)
    explicit = cost(AttentionConfig(batch=1, n=64, d=96, heads=6, head_dim=16))
    n, d = 64, 96
    assert explicit == cost(chapter) and explicit.form == "chapter"
    assert explicit.flops_model == 8 * n * d**2 + 4 * n**2 * d
    assert cost(chapter.replace(kv_heads=2)).form == "general"
    assert params(96, 6, 6) == params(96, 6, 6, head_dim=16) == 4 * 96**2


def test_llama_3_1_8b_against_a_hand_count():
    """d 4096, 32 query heads and 8 key/value heads of 128 (h p = d, but GQA), n 4096."""
    config = AttentionConfig(batch=1, n=4096, dtype="bfloat16", **model_shape(
        "llama-3.1-8b").fields())
    c = cost(config)
    q_proj = 2 * 4096 * 4096 * 4096  # 2 n d (h p) = 137,438,953,472
    o_proj = 2 * 4096 * 4096 * 4096  # 2 n (h p) d
    kv_proj = 2 * 2 * 4096 * 4096 * 1024  # 2 * 2 n d (h_kv p) = 68,719,476,736
    assert c.flops_projections == q_proj + o_proj + kv_proj == 343_597_383_680
    scores_mixing = 2 * 4096 * 4096 * 4096 + 2 * 4096 * 4096 * 4096  # 2 n n (h p) each
    assert c.flops_attention == scores_mixing == 274_877_906_944
    assert c.flops_model == 618_475_290_624
    assert c.flops_elementwise == 5 * 32 * 4096 * 4096  # c h n m
    assert c.params == 2 * 4096 * 4096 + 2 * 4096 * 1024 == 41_943_040
    assert c.kv_cache_bytes_per_token == 2 * 8 * 128 * 2 == 4096  # K and V, bf16
    assert c.form == "general"
    # One decode step over 4096 cached tokens: the new token's projections, then scores
    # and mixing over 4097 positions, reading 4097 x 2 x 1024 cached bf16 values.
    step = cost(config.replace(n=1, m=4096, mode="decode"))
    assert step.flops_projections == 2 * 4096 * 4096 * 2 + 2 * 2 * 4096 * 1024
    assert step.flops_attention == 4 * 4097 * 4096
    assert step.kv_cache_bytes_read == 4097 * 2 * 1024 * 2
    assert cost(config.replace(mode="train")).flops_model == 3 * 618_475_290_624


def test_qwen3_32b_against_a_hand_count():
    """d 5120, 64 query heads and 8 key/value heads of 128: h p = 8192 != d."""
    config = AttentionConfig(batch=1, n=4096, **model_shape("qwen3-32b").fields())
    c = cost(config)
    q_proj = 2 * 4096 * 5120 * 8192  # 2 n d (h p) = 343,597,383,680
    o_proj = 2 * 4096 * 8192 * 5120  # 2 n (h p) d
    kv_proj = 2 * 2 * 4096 * 5120 * 1024  # 2 * 2 n d (h_kv p) = 85,899,345,920
    assert c.flops_projections == q_proj + o_proj + kv_proj == 773_094_113_280
    assert c.flops_attention == 4 * 4096 * 4096 * 8192 == 549_755_813_888
    assert c.flops_model == 1_322_849_927_168
    # the chapter's 8nd^2 + 4n^2 d at d = 5120 would be another count
    assert c.flops_model != 8 * 4096 * 5120**2 + 4 * 4096**2 * 5120
    assert c.params == 2 * 5120 * 8192 + 2 * 5120 * 1024 == 94_371_840
    assert c.kv_cache_bytes_per_token == 2 * 8 * 128 * 4  # float32
    assert kv_cache_bytes_per_token(5120, 64, 8, 2, head_dim=128) == 4096
    assert decoder_step_flops(5120, 100, 64, 8, head_dim=128) == (
        2 * 5120 * 8192 * 2 + 4 * 100 * 8192)
    assert c.form == "general"


# The models' head structure at a width a test can hold: the heads, key/value heads and
# h p / d of Llama-3.1-8B (32, 8, 1) and Qwen3-32B (64, 8, 1.6), heads 8 wide.
SCALED = {"llama-3.1-8b": {"d": 256, "heads": 32, "kv_heads": 8, "head_dim": 8},
          "qwen3-32b": {"d": 320, "heads": 64, "kv_heads": 8, "head_dim": 8, "scale": 0.3}}
MODES = [{"mode": "forward"}, {"mode": "train"}, {"mode": "decode", "n": 1, "m": 40},
         {"mode": "prefix", "n": 1, "m": 40}]


@pytest.mark.parametrize("backend", ["batched", "loop"])
@pytest.mark.parametrize("mode", MODES, ids=lambda f: f["mode"])
@pytest.mark.parametrize("model", SCALED)
def test_general_form_equals_torch_flop_counter(model, mode, backend):
    from torch.utils.flop_counter import FlopCounterMode

    from mhabench.layers.torch.steps import make_step

    config = AttentionConfig(backend=backend, batch=2, **{"n": 16, **SCALED[model], **mode})
    step = make_step(config)
    with FlopCounterMode(display=False) as counter:
        step()
    assert counter.get_total_flops() == cost(config).flops_model


@pytest.mark.parametrize("backend", ["batched", "fused"])
@pytest.mark.parametrize("mode", MODES, ids=lambda f: f["mode"])
@pytest.mark.parametrize("model", SCALED)
def test_general_form_against_xla_cost_analysis(model, mode, backend):
    from mhabench.layers.jax.steps import make_step

    config = AttentionConfig(framework="jax", backend=backend, batch=2,
                             **{"n": 16, **SCALED[model], **mode})
    analysis = make_step(config).compiled.cost_analysis()
    xla = (analysis[0] if isinstance(analysis, list) else analysis)["flops"]
    c = cost(config)
    assert 1.0 < xla / c.flops_model < 1.06
    if backend == "batched" and config.mode in ("forward", "prefix"):
        assert (xla - c.flops_model) / c.flops_elementwise == pytest.approx(1.0, abs=0.05)
