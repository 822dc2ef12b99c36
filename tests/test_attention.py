"""Numerics of the attention implementations: every backend of both frameworks agrees with
every other and with the frameworks' own layers, and the chapter's semantics hold."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import requires_cuda, run_forward

from mhabench.core import backends
from mhabench.core.config import AttentionConfig
from mhabench.core.inputs import init_weights, make_inputs
from mhabench.measure import agreement
from mhabench.measure.agreement import ATOL

# Every registered backend of both frameworks (built-in ones and any plug-in loaded here).
IMPLS = [(fw, be) for fw in ("torch", "jax") for be in backends.names(fw)]
VARIANTS = {name: v for name, v in agreement.VARIANTS.items() if "mode" not in v}


def small(**kw) -> AttentionConfig:
    return AttentionConfig(**{"batch": 3, "n": 7, "d": 24, "heads": 4, **kw})


@pytest.mark.parametrize("variant", VARIANTS)
def test_all_backends_agree(variant):
    base = small(**VARIANTS[variant])
    weights, x = init_weights(base), make_inputs(base)
    expected = run_forward(base, weights, x["queries"], x["keys"], x["values"], x["valid_lens"])
    checked = 0
    for framework, backend in IMPLS:
        try:
            config = base.replace(framework=framework, backend=backend)
        except ValueError:
            continue  # CUDA-only kernels; the frameworks' own layers: MHA, h p = d
        if "cpu" not in backends.get(framework, backend).devices:
            continue
        out = run_forward(config, weights, x["queries"], x["keys"], x["values"], x["valid_lens"])
        assert out.shape == (base.batch, base.n, base.d)
        np.testing.assert_allclose(out, expected, atol=ATOL, err_msg=config.id)
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("framework, backend", IMPLS)
def test_every_backend_agrees_in_every_mode_it_runs(framework, backend):
    """The check users run on their own backend (``mhabench check``), on each registered
    one: decode, prefix and train steps included; n/a only where the config refuses."""
    rows = agreement.check(framework, backend)
    assert [r.variant for r in rows] == list(agreement.VARIANTS)
    spec = backends.get(framework, backend)
    for row in rows:
        assert row.ok, row
        mode = agreement.VARIANTS[row.variant].get("mode", "forward")
        variant = agreement.VARIANTS[row.variant]
        able = {"kv_heads": spec.gqa, "causal": spec.causal, "head_dim": spec.head_width,
                "scale": spec.scale}
        supported = "cpu" in spec.devices and mode in spec.modes_on("cpu") and all(
            can or key not in variant for key, can in able.items())
        assert (row.max_error is not None) == supported, row


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", ["loop", "batched", "fused", "reference"])
def test_per_query_valid_lens(framework, backend):
    """valid_lens of shape (batch, n): one length per query."""
    config = small(framework=framework, backend=backend, cross=True, m=10)
    weights, x = init_weights(config), make_inputs(config)
    lens = np.random.default_rng(3).integers(1, 11, size=(config.batch, config.n)).astype(np.int32)
    out = run_forward(config, weights, x["queries"], x["keys"], x["values"], lens)
    # Query i of sequence b must see only keys < lens[b, i]: cut the source and compare.
    for b in range(config.batch):
        for i in (0, config.n - 1):
            one = config.replace(batch=1, n=1, m=int(lens[b, i]))
            ref = run_forward(one, weights, x["queries"][b:b + 1, i:i + 1],
                              x["keys"][b:b + 1, :lens[b, i]], x["values"][b:b + 1, :lens[b, i]])
            np.testing.assert_allclose(out[b, i], ref[0, 0], atol=ATOL)


def _per_sequence_mismatch(config) -> float:
    """Largest difference between a masked batch and each sequence run alone (batch 1)."""
    weights, x = init_weights(config), make_inputs(config)
    lens = np.array([1, config.m], dtype=np.int32)  # very different lengths per sequence
    out = run_forward(config, weights, x["queries"], x["keys"], x["values"], lens)
    worst = 0.0
    for b in range(config.batch):
        alone = run_forward(config.replace(batch=1), weights, x["queries"][b:b + 1],
                            x["keys"][b:b + 1], x["values"][b:b + 1], lens[b:b + 1])
        worst = max(worst, float(np.abs(out[b] - alone[0]).max()))
    return worst


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_valid_lens_repeated_per_head_not_tiled(framework, monkeypatch):
    """Exercise 9.2: each head of sequence b must get sequence b's length."""
    config = small(framework=framework, backend="batched", batch=2, cross=True, m=12)
    assert _per_sequence_mismatch(config) < ATOL
    # The same check catches the tiling bug: swap repeat for tile and it must fail.
    if framework == "torch":
        import torch

        monkeypatch.setattr(torch, "repeat_interleave",
                            lambda x, repeats, dim=0: x.repeat(repeats))
    else:
        import jax.numpy as jnp

        monkeypatch.setattr(jnp, "repeat", lambda x, r, axis=0: jnp.tile(x, r))
    assert _per_sequence_mismatch(config) > 1e-2


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", ["loop", "batched", "fused"])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_heads_equal_mha_with_shared_kv_weights(framework, backend, kv_heads):
    """GQA/MQA == MHA whose query heads in one group have identical K/V weights: key/value
    head j serves the consecutive query heads j*g ... (j+1)*g - 1."""
    gqa = small(framework=framework, backend=backend, kv_heads=kv_heads, masked=True)
    mha = gqa.replace(kv_heads=gqa.heads)
    w = init_weights(gqa)
    p, g = gqa.head_dim, gqa.group_size
    expanded = dict(w)
    for name in ("W_k", "W_v"):
        heads = w[name].reshape(kv_heads, p, gqa.d)  # (h_kv, p, d)
        expanded[name] = np.repeat(heads, g, axis=0).reshape(gqa.heads * p, gqa.d)
    x = make_inputs(gqa)
    args = (x["queries"], x["keys"], x["values"], x["valid_lens"])
    np.testing.assert_allclose(run_forward(gqa, w, *args), run_forward(mha, expanded, *args),
                               atol=ATOL)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", ["loop", "batched", "fused"])
@pytest.mark.parametrize("cross", [False, True])
def test_each_backends_own_packing_loads_and_returns_the_shared_layout(framework, backend,
                                                                       cross):
    """Backends store their kernels packed or per head, loaded once from the shared
    (out, in) layout; reading them back gives the same weights."""
    config = small(framework=framework, backend=backend, kv_heads=2, cross=cross,
                   m=9 if cross else None)
    w = init_weights(config)
    if framework == "torch":
        from mhabench.layers.torch.steps import build_model

        model = build_model(config)
        back = {name: model.weight(name).detach().numpy() for name in w}
    else:
        from mhabench.layers.jax.steps import build_model

        back = build_model(config).weights()
    for name, value in w.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_mqa_has_one_kv_head(framework):
    config = small(framework=framework, kv_heads=1)
    w = init_weights(config)
    assert w["W_k"].shape == w["W_v"].shape == (config.head_dim, config.d)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", ["batched", "fused"])
def test_cross_attention_permutations(framework, backend):
    """Exercise 10.1: output has the query length; permuting keys and values together
    leaves it unchanged, permuting the keys alone does not."""
    config = small(framework=framework, backend=backend, cross=True, n=5, m=9)
    w, x = init_weights(config), make_inputs(config)
    q, src = x["queries"], x["keys"]
    perm = np.random.default_rng(0).permutation(config.m)
    out = run_forward(config, w, q, src, src)
    assert out.shape == (config.batch, 5, config.d)
    np.testing.assert_allclose(run_forward(config, w, q, src[:, perm], src[:, perm]), out,
                               atol=ATOL)
    keys_only = run_forward(config, w, q, src[:, perm], src)
    assert np.abs(keys_only - out).max() > 1e-2


def _copy_both_error(framework: str, heads: int, weights_per_head) -> float:
    """The chapter's copy-both task through MultiHeadAttention: two source positions with
    position-only keys, one query; best linear readout of [v1; v2] from the output."""
    c, d, n_examples = 8, 20, 4000
    config = AttentionConfig(framework=framework, backend="batched", batch=n_examples, n=1,
                             m=2, d=d, heads=heads, cross=True)
    p = d // heads
    rng = np.random.default_rng(0)
    v1, v2 = rng.standard_normal((n_examples, c)), rng.standard_normal((n_examples, c))
    src = np.zeros((n_examples, 2, d), np.float32)
    src[:, 0, :c], src[:, 1, :c] = v1, v2
    src[:, 0, c], src[:, 1, c + 1] = 1.0, 1.0  # position markers
    query = np.zeros((n_examples, 1, d), np.float32)
    query[:, 0, c + 2] = 1.0
    w = {name: np.zeros((d, d), np.float32) for name in ("W_q", "W_k", "W_v")}
    w["W_o"] = np.eye(d, dtype=np.float32)
    for i, (a1, a2) in enumerate(weights_per_head):
        w["W_q"][i * p, c + 2] = np.sqrt(p)  # q . k / sqrt(p) = the logit below
        w["W_k"][i * p, c], w["W_k"][i * p, c + 1] = np.log(a1), np.log(a2)
        w["W_v"][i * p:i * p + c, :c] = np.eye(c)  # each head moves the content
    out = run_forward(config, w, query, src, src)[:, 0]  # (N, d)
    target = np.concatenate([v1, v2], axis=1)
    readout = np.linalg.lstsq(out, target, rcond=None)[0]
    return float(np.linalg.norm(out @ readout - target) / np.linalg.norm(target))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_copy_both_one_head_loses_half_two_heads_recover(framework):
    for a in (0.5, 0.7, 0.9):
        assert _copy_both_error(framework, 1, [(a, 1 - a)]) == pytest.approx(0.5 ** 0.5,
                                                                             abs=0.02)
    two = _copy_both_error(framework, 2, [(0.88, 0.12), (0.12, 0.88)])
    assert two < 1e-3


def test_train_gradients_agree_across_backends_and_frameworks():
    """Training steps take the gradients w.r.t. the parameters and the input; both agree
    across backends and frameworks (same upstream gradient)."""
    import torch
    from flax import nnx

    from mhabench.core.inputs import make_upstream
    from mhabench.layers.jax.steps import build_model as jax_model
    from mhabench.layers.jax.steps import make_step as jax_step
    from mhabench.layers.torch.steps import build_model

    base = small(mode="train", masked=True, kv_heads=2)
    grads = {}
    for backend in ("loop", "batched", "fused"):
        config = base.replace(backend=backend)
        model = build_model(config).train()
        x = make_inputs(config)
        q = torch.from_numpy(x["queries"]).requires_grad_()
        out = model(q, q, q, torch.from_numpy(x["valid_lens"]))
        out.backward(torch.from_numpy(make_upstream(config, 2)))
        grads[backend] = {**{k: g.numpy() for k, g in model.weight_grads().items()},
                          "input": q.grad.numpy()}
        jconfig = config.replace(framework="jax")
        _, param_grads, input_grads = jax_step(jconfig)()
        graphdef, _, rest = nnx.split(jax_model(jconfig), nnx.Param, ...)
        jgrads = {**nnx.merge(graphdef, param_grads, rest).weights(),
                  "input": np.asarray(input_grads[0])}
        assert set(jgrads) == set(grads[backend]) == {"W_q", "W_k", "W_v", "W_o", "input"}
        for name, value in grads[backend].items():
            np.testing.assert_allclose(jgrads[name], value, atol=1e-4, err_msg=name)
    for name in grads["batched"]:
        np.testing.assert_allclose(grads["loop"][name], grads["batched"][name], atol=1e-4)
        np.testing.assert_allclose(grads["fused"][name], grads["batched"][name], atol=1e-4)


def test_torch_fused_runs_cpu_flash_kernel():
    """4-D inputs reach the flash kernel on CPU, not the slow math fallback."""
    import torch

    from mhabench.layers.torch.steps import make_step

    for masked in (False, True):
        step = make_step(small(backend="fused", masked=masked, n=64))
        with torch.profiler.profile() as prof:
            step()
        names = {e.key for e in prof.key_averages()}
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names, names
        assert not any("math" in name for name in names), names


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", ["loop", "batched", "fused", "reference"])
def test_cuda_matches_cpu(framework, backend):
    from mhabench.core.config import UnavailableError
    from mhabench.measure.timing import check_available

    config = small(framework=framework, backend=backend, masked=True, device="cuda")
    try:
        check_available(config)
    except UnavailableError as exc:  # e.g. torch sees the GPU but this jax is CPU-only
        pytest.skip(str(exc))
    w, x = init_weights(config), make_inputs(config)
    args = (x["queries"], x["keys"], x["values"], x["valid_lens"])
    np.testing.assert_allclose(run_forward(config, w, *args),
                               run_forward(config.replace(device="cpu"), w, *args), atol=1e-3)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_causal_is_the_chapters_masked_softmax_with_one_length_per_query(framework):
    """causal=True: query i sees keys 0..i, what the chapter's masked softmax gives with
    valid_lens[b, i] = i + 1 (no causal flag); and it is not the unmasked layer."""
    config = small(framework=framework, causal=True)
    weights, x = init_weights(config), make_inputs(config)
    out = run_forward(config, weights, x["queries"], x["keys"], x["values"], None)
    plain = config.replace(causal=False)
    lens = np.tile(np.arange(1, config.n + 1, dtype=np.int32), (config.batch, 1))
    by_lens = run_forward(plain, weights, x["queries"], x["keys"], x["values"], lens)
    np.testing.assert_allclose(out, by_lens, atol=ATOL)
    unmasked = run_forward(plain, weights, x["queries"], x["keys"], x["values"], None)
    assert np.abs(out - unmasked)[:, :-1].max() > 1e-3  # the last query sees every key
    np.testing.assert_allclose(out[:, -1], unmasked[:, -1], atol=ATOL)


def test_causal_refuses_what_it_cannot_mean():
    for extra, says in (({"cross": True, "m": 9}, "cross=True"),
                        ({"masked": True}, "masked=True"),
                        ({"mode": "decode", "n": 1, "m": 9}, "mode='decode'")):
        with pytest.raises(ValueError, match=f"causal=True is not allowed with {says}"):
            small(causal=True, **extra)
    assert small(causal=True).id.endswith("-causal")


def test_a_plugin_without_a_causal_keyword_gets_no_causal_cells():
    import subprocess
    import sys

    code = """
from mhabench.api import AttentionConfig, register_attention
def attend(q, k, v, valid_lens):
    return q
register_attention('nocausal', 'torch', attend)
AttentionConfig(backend='nocausal')  # every other cell is fine
try:
    AttentionConfig(backend='nocausal', causal=True)
except ValueError as err:
    print(err)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "causal=True is not allowed with framework='torch', backend='nocausal'" in done.stdout
    assert "takes no causal mask; use" in done.stdout


def test_jax_weights_load_through_the_flax_api_of_the_release():
    """A release sweep reaches Flax releases without ``Variable.set_value`` (0.11, 0.12.0):
    the layer sets a kernel through it where the class has it, else through the ``value``
    setter (the older releases' API; the sweep runs those releases for real)."""
    from mhabench.layers.jax.attention import assign

    class Older:  # Flax 0.11's Variable: a value attribute, no set_value
        value = None

    class Newer:
        def set_value(self, value):
            self.given = value

    old, new = Older(), Newer()
    assign(old, 3.0)
    assign(new, 4.0)
    assert old.value == 3.0 and new.given == 4.0 and not hasattr(new, "value")
