"""The compiled backend (torch.compile of the batched layout): recompiles are errors, a
prepared step compiles once, train gradients match the eager layout, and the cold compile
time is measurable. (Its outputs in every mode: tests/test_attention.py, via the registry.)"""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mhabench.core.config import AttentionConfig  # noqa: E402
from mhabench.core.inputs import init_weights  # noqa: E402
from mhabench.layers.torch.decode import KVCache  # noqa: E402
from mhabench.layers.torch.steps import build_model, make_step  # noqa: E402
from mhabench.measure.compile_time import compile_seconds  # noqa: E402
from mhabench.measure.timing import prepare  # noqa: E402

RECOMPILE = "Detected recompile"


def tiny(**kw) -> AttentionConfig:
    return AttentionConfig(**{"batch": 2, "n": 8, "d": 16, "heads": 4,
                              "backend": "compiled", **kw})


def unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("backend", ["batched", "compiled"])
def test_a_call_that_would_recompile_raises(backend):
    """After the first call, a new input shape is a recompile: an error for compiled; the
    same calls on the eager layout run (so the error is the compiled backend's own)."""
    config = tiny(backend=backend)
    model = build_model(config).eval()
    x, longer = torch.randn(2, 8, 16), torch.randn(2, 9, 16)
    with torch.inference_mode():
        model(x, x, x)
        model(x, x, x)
        if backend == "compiled":
            with pytest.raises(RuntimeError, match=RECOMPILE):
                model(longer, longer, longer)
        else:
            assert model(longer, longer, longer).shape == (2, 9, 16)


@pytest.mark.parametrize("mode", ["forward", "train", "decode", "prefix"])
def test_a_prepared_step_compiles_once_and_runs_under_the_stance(mode):
    config = tiny(mode=mode, **({"n": 1, "m": 9} if mode in ("decode", "prefix") else {}))
    step = prepare(config)
    graphs = unique_graphs()
    for _ in range(10):
        step()
    assert unique_graphs() == graphs


def test_a_prepared_step_runs_under_the_profiler_without_recompiling(tmp_path):
    """The profiler's flag is no guard of the compiled graph (the labels of the eager
    layers are left out of it), so ``mhabench profile`` traces a compiled step."""
    from mhabench.measure.profiler.profiling import profile_config

    config = tiny()
    step = prepare(config)
    graphs = unique_graphs()
    run = profile_config(config, tmp_path, steps=2)
    assert unique_graphs() == graphs
    assert any(run.rglob("*.pt.trace.json*"))
    step()


def test_a_decode_loop_that_advances_the_cache_raises():
    """The compiled decode step specialises on the cache position: the timed step rewinds
    it (one graph); a generation loop that moved it on would recompile per token."""
    config = tiny(mode="decode", n=1, m=9)
    model = build_model(config).eval()
    token = torch.randn(2, 1, 16)
    with torch.inference_mode():
        cache = KVCache.prefilled(*model.project_kv(torch.randn(2, 9, 16),
                                                    torch.randn(2, 9, 16)), capacity=11)
        model.decode_step(token, cache)
        with pytest.raises(RuntimeError, match=RECOMPILE):
            model.decode_step(token, cache)


def test_train_weight_gradients_match_the_eager_layout():
    """The compiled forward's backward (AOT autograd) against the eager layout's."""
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    lens = torch.tensor([3, 8])
    grads = {}
    for backend in ("batched", "compiled"):
        config = tiny(backend=backend, mode="train", masked=True, kv_heads=2)
        model = build_model(config, init_weights(config)).train()
        for _ in range(2):  # the second call runs under the stance
            model.zero_grad(set_to_none=True)
            x.grad = None
            model(x, x, x, lens).sum().backward()
        grads[backend] = {**model.weight_grads(), "x": x.grad.clone()}
    for name, grad in grads["batched"].items():
        np.testing.assert_allclose(grads["compiled"][name].numpy(), grad.numpy(), atol=1e-4,
                                   err_msg=name)


@pytest.mark.timing
def test_compile_seconds_is_the_cold_compile_and_a_warm_call_is_cheap():
    config = tiny()
    cold = compile_seconds(config)
    assert cold > 0.2
    # Warm: the graph of this config is in dynamo's cache now; a new layer reuses it.
    step = make_step(config)
    start = time.perf_counter()
    step()
    assert time.perf_counter() - start < cold / 10
    # The eager layout compiles nothing: its first call costs about a steady one.
    assert compile_seconds(config.replace(backend="batched")) < cold / 10


def test_jax_steps_compile_once_and_refuse_other_shapes():
    """JAX's side of "recompiles are errors": a prepared step is compiled ahead of time, so
    timed calls add no backend compile (JAX's own compile events), and the compiled
    function refuses inputs of another shape instead of compiling again."""
    import jax

    from mhabench.layers.jax.steps import make_step as jax_step

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: compiles.append(event)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    config = tiny(framework="jax", backend="batched")
    step = jax_step(config)
    assert compiles  # building the step compiled it (the listener sees JAX compile)
    before = len(compiles)
    for _ in range(5):
        step()
    assert len(compiles) == before
    compiled, wrong = step.compiled, np.zeros((3, 8, 16), np.float32)
    with pytest.raises(TypeError):
        compiled(*[wrong] * 4)
    assert len(compiles) == before
    cold = compile_seconds(config)
    assert cold > 0  # trace + lower + compile with JAX's caches off
