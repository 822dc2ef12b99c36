"""What a timed step does besides the layer's own work, and the same semantics in both
frameworks: no profiler labels and no weight packing inside a step outside profiling
(counted by op dispatch in torch, read from the step's jaxpr in JAX); dropout only in
training, with fresh masks every step; bfloat16 against float32 in every backend."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_forward

from mhabench.core.config import AttentionConfig
from mhabench.core.inputs import init_weights, make_inputs

# One config per kind of step; decode and prefix take 1 new token after m = 9.
STEPS = {"forward": {}, "cross": {"cross": True, "m": 9}, "train": {"mode": "train"},
         "train-dropout": {"mode": "train", "dropout": 0.3},
         "decode": {"mode": "decode", "n": 1, "m": 9, "kv_heads": 2},
         "decode-cross": {"mode": "decode", "n": 1, "m": 9, "cross": True},
         "prefix": {"mode": "prefix", "n": 1, "m": 9, "kv_heads": 1}}
BACKENDS = ("loop", "batched", "fused", "reference")


def step_configs(framework: str) -> list[AttentionConfig]:
    configs = []
    for fields in STEPS.values():
        for backend in BACKENDS:
            try:
                configs.append(AttentionConfig(**{"framework": framework, "backend": backend,
                                                  "batch": 2, "n": 5, "d": 16, "heads": 4,
                                                  **fields}))
            except ValueError:  # e.g. reference has no decode step, JAX fused no dropout
                continue
    return configs


# ----- torch: the ops a step dispatches --------------------------------------------------
# What may touch a parameter's storage inside a step: matmuls and views of it (free).
TORCH_WEIGHT_OPS = {"linear", "matmul", "mm", "bmm", "addmm", "t", "numpy_T", "transpose",
                    "permute", "slice", "select", "split", "split_with_sizes", "view",
                    "expand", "alias", "detach"}


def torch_dispatched(config: AttentionConfig) -> list[tuple[str, bool]]:
    """(op name, touches a parameter) for every op one warmed-up step of ``config``
    dispatches."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from mhabench.layers.torch import steps as torch_steps

    built = []
    build = torch_steps.build_model
    try:  # keep a handle on the model make_step builds
        torch_steps.build_model = lambda *a, **k: built.append(build(*a, **k)) or built[-1]
        step = torch_steps.make_step(config)
    finally:
        torch_steps.build_model = build
    step()
    params = {p.untyped_storage().data_ptr() for p in built[0].parameters()}

    class Log(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[tuple[str, bool]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            touches = any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr()
                          in params for t in tree_leaves((args, kwargs)))
            self.ops.append((func.__name__ if hasattr(func, "__name__") else str(func),
                             touches))
            return func(*args, **(kwargs or {}))

    with Log() as log:
        step()
    return [(str(name), touches) for name, touches in log.ops]


def op_base(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("config", step_configs("torch"), ids=lambda c: c.id)
def test_torch_step_dispatches_no_labels_and_no_weight_packing(config):
    ops = torch_dispatched(config)
    assert ops, "the step dispatched nothing"
    labels = [name for name, _ in ops if "record_function" in name]
    assert not labels, f"{len(labels)} profiler label ops inside the step: {labels[:4]}"
    on_weights = {op_base(name) for name, touches in ops if touches}
    assert on_weights, "no op read a parameter: the check sees nothing"
    assert on_weights <= TORCH_WEIGHT_OPS, on_weights - TORCH_WEIGHT_OPS


def test_the_torch_check_sees_labels_and_packing(monkeypatch):
    """The op log above catches both faults it guards against: labels outside profiling
    and a step that concatenates its weights."""
    import torch
    from torch.autograd import profiler

    from mhabench.layers.torch import attention as torch_attention

    config = AttentionConfig(backend="loop", batch=2, n=5, d=16, heads=4)
    monkeypatch.setattr(torch_attention, "region", profiler.record_function)
    labels = [n for n, _ in torch_dispatched(config) if "record_function" in n]
    assert len(labels) == 2 * (5 * config.heads + 1)  # enter and exit: 5 per head + K/V
    monkeypatch.undo()

    def packing_linear(self, x):  # W_q of the loop backend packed with W_k on every call
        return torch.nn.functional.linear(x, torch.cat([self.weight, self.weight])[:4])

    monkeypatch.setattr(torch.nn.Linear, "forward", packing_linear)
    packed = {op_base(n) for n, touches in torch_dispatched(config.replace(backend="batched"))
              if touches}
    assert "cat" in packed


def test_torch_labels_appear_while_a_profiler_records():
    import torch

    from mhabench.layers.torch.steps import make_step

    step = make_step(AttentionConfig(backend="loop", batch=2, n=5, d=16, heads=2))
    with torch.profiler.profile() as prof:
        step()
    names = {e.key for e in prof.key_averages()}
    assert {"projections", "scores", "softmax", "mixing", "output"} <= names


# ----- JAX: what the compiled step does with its parameters ------------------------------
def _sub_jaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if hasattr(item, "consts") and hasattr(item, "jaxpr"):  # ClosedJaxpr
                yield item.jaxpr
            elif hasattr(item, "eqns"):
                yield item


def ops_on(jaxpr, tracked: set) -> set[str]:
    """Primitives that consume one of the ``tracked`` variables (or a reshape/transpose of
    one), looking inside nested jaxprs (pjit, custom_jvp, ...)."""
    from jax.extend.core import Literal

    found: set[str] = set()
    for eqn in jaxpr.eqns:
        uses = [i for i, v in enumerate(eqn.invars) if not isinstance(v, Literal) and v in tracked]
        if not uses:
            continue
        subs = [s for s in _sub_jaxprs(eqn) if len(s.invars) == len(eqn.invars)]
        for sub in subs:
            found |= ops_on(sub, {sub.invars[i] for i in uses})
        if not subs:
            found.add(str(eqn.primitive))
            if str(eqn.primitive) in ("reshape", "transpose", "convert_element_type"):
                tracked |= set(eqn.outvars)
    return found


def jax_weight_ops(config: AttentionConfig, step=None) -> set[str]:
    import jax
    from flax import nnx

    from mhabench.layers.jax.steps import build_model, make_step

    step = make_step(config) if step is None else step
    params = jax.tree.leaves(nnx.split(build_model(config), nnx.Param, ...)[1])
    jaxpr = step.compiled.jaxpr.jaxpr  # parameters are the leaves of the first argument
    return ops_on(jaxpr, set(jaxpr.invars[:len(params)]))


@pytest.mark.parametrize("config", step_configs("jax"), ids=lambda c: c.id)
def test_jax_step_only_multiplies_its_weights(config):
    """XLA has no views: a slice or concatenation of a parameter is a copy on every call."""
    assert jax_weight_ops(config) == {"dot_general"}


def test_the_jax_check_sees_packing(monkeypatch):
    import jax.numpy as jnp

    from mhabench.layers.jax import attention as jax_attention

    def packing(self, x):  # as the old fused path did: concatenate kernels on every call
        w = self.W_qkv.kernel[...]
        w = jnp.concatenate([w, w], axis=1)[:, :w.shape[1]]
        q, k, v = jnp.split(x @ w, 3, axis=-1)
        b, n = x.shape[:2]
        return (q.reshape(b, n, self.heads, self.p), self._split_heads(k, self.heads),
                self._split_heads(v, self.heads))

    monkeypatch.setattr(jax_attention.MultiHeadAttention, "_project_packed", packing)
    ops = jax_weight_ops(AttentionConfig(framework="jax", backend="fused", batch=2, n=5,
                                         d=16, heads=4))
    assert "concatenate" in ops


# ----- dropout: only in training, fresh masks each step, both frameworks ------------------
def to_numpy(value) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().double().numpy()
    return np.asarray(value, dtype=np.float64)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_is_deterministic_with_dropout_configured(framework, backend):
    """A layer built with dropout (for training) runs deterministically outside training,
    in every backend: the same output as a layer without dropout."""
    if (framework, backend) == ("jax", "fused"):
        pytest.skip("jax.nn.dot_product_attention has no dropout (the config refuses it)")
    train = AttentionConfig(framework=framework, backend=backend, batch=2, n=6, d=16,
                            heads=4, mode="train", dropout=0.5, masked=True)
    weights, x = init_weights(train), make_inputs(train)
    args = (x["queries"], x["keys"], x["values"], x["valid_lens"])
    plain = run_forward(train.replace(dropout=0.0, mode="forward"), weights, *args)
    np.testing.assert_allclose(run_forward(train, weights, *args), plain, atol=1e-5)
    np.testing.assert_allclose(run_forward(train, weights, *args), plain, atol=1e-5)


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_train_steps_draw_fresh_dropout_masks(framework, backend):
    """Two consecutive training steps give different outputs (new masks; the JAX key is a
    compiled argument threaded from step to step), and differ from no dropout."""
    from mhabench.measure.timing import prepare

    if (framework, backend) == ("jax", "fused"):
        pytest.skip("jax.nn.dot_product_attention has no dropout (the config refuses it)")
    config = AttentionConfig(framework=framework, backend=backend, batch=2, n=6, d=16,
                             heads=4, mode="train", dropout=0.5)
    step = prepare(config, warmup=0)
    first, second = (to_numpy(out[0] if framework == "jax" else out)
                     for out in (step(), step()))
    none = prepare(config.replace(dropout=0.0), warmup=0)()
    none = to_numpy(none[0] if framework == "jax" else none)
    assert np.abs(first - second).max() > 1e-2
    assert np.abs(first - none).max() > 1e-2 and np.abs(second - none).max() > 1e-2


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_reference_layers_get_the_dropout_rate(framework):
    config = AttentionConfig(framework=framework, backend="reference", batch=2, n=6, d=16,
                             heads=4, mode="train", dropout=0.25)
    if framework == "torch":
        from mhabench.layers.torch.steps import build_model

        assert build_model(config).mha.dropout == 0.25
    else:
        from mhabench.layers.jax.steps import build_model

        assert build_model(config).mha.dropout_rate == 0.25


# ----- bfloat16 ------------------------------------------------------------------------
# bfloat16 keeps 8 significant bits (unit roundoff u = 2^-8 = 0.0039). Inputs, weights,
# projections and outputs are each rounded once, softmax runs in float32 (except flax's
# own layer), so the output is stated to be within 1 % relative (2.5 u, Frobenius norm) of
# float32, and each element within 0.03 + 0.03 |float32 value|.
BF16_RELATIVE, BF16_ATOL, BF16_RTOL = 0.01, 0.03, 0.03


@pytest.mark.parametrize("variant", [{}, {"masked": True, "kv_heads": 2},
                                     {"cross": True, "m": 40}])
def test_bfloat16_agrees_with_float32_in_every_backend(variant):
    base = AttentionConfig(batch=3, n=33, d=64, heads=4, **variant)
    weights, x = init_weights(base), make_inputs(base)
    args = (x["queries"], x["keys"], x["values"], x["valid_lens"])
    checked = 0
    for framework in ("torch", "jax"):
        for backend in BACKENDS:
            if backend == "reference" and base.kv_heads != base.heads:
                continue
            f32 = base.replace(framework=framework, backend=backend)
            exact = run_forward(f32, weights, *args)
            bf16 = run_forward(f32.replace(dtype="bfloat16"), weights, *args)
            rel = np.linalg.norm(bf16 - exact) / np.linalg.norm(exact)
            assert rel < BF16_RELATIVE, (f32.id, rel)
            np.testing.assert_allclose(bf16, exact, atol=BF16_ATOL, rtol=BF16_RTOL,
                                       err_msg=f32.id)
            checked += 1
    assert checked >= 6


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("backend", ["loop", "batched", "fused"])
def test_bfloat16_decode_step_agrees_with_float32(framework, backend):
    from mhabench.measure.timing import prepare

    config = AttentionConfig(framework=framework, backend=backend, batch=3, n=1, m=40, d=64,
                             heads=4, kv_heads=2, mode="decode")
    exact = to_numpy(prepare(config)())
    bf16 = to_numpy(prepare(config.replace(dtype="bfloat16"))())
    assert np.linalg.norm(bf16 - exact) / np.linalg.norm(exact) < BF16_RELATIVE
    np.testing.assert_allclose(bf16, exact, atol=BF16_ATOL, rtol=BF16_RTOL)
