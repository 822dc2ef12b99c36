"""The flex backend (FlexAttention under torch.compile): grouped heads go in unrepeated,
per-query lengths and rows with no valid key match the reference, a prepared step compiles
once, a recompile inside a later call raises, and train mode runs on CUDA only (no CPU
backward).
(Its outputs in every mode it runs: tests/test_attention.py, via the registry.)"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import requires_cuda  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

from mhabench.core.config import AttentionConfig  # noqa: E402
from mhabench.core.inputs import init_weights  # noqa: E402
from mhabench.layers.torch.flex import CompiledFlex, flex_attend  # noqa: E402
from mhabench.layers.torch.steps import build_model  # noqa: E402
from mhabench.measure.timing import prepare  # noqa: E402

RECOMPILE = "Detected recompile"


def tiny(**kw) -> AttentionConfig:
    return AttentionConfig(**{"batch": 3, "n": 8, "d": 16, "heads": 4, "backend": "flex",
                              **kw})


def outputs(config: AttentionConfig, x: torch.Tensor, lens: torch.Tensor | None,
            kv: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """flex's and batched's outputs for the same weights and inputs (flex called twice:
    the second call runs under the stance)."""
    kv = x if kv is None else kv
    result = {}
    for backend in ("batched", "flex"):
        model = build_model(config.replace(backend=backend), init_weights(config)).eval()
        with torch.inference_mode():
            for _ in range(2 if backend == "flex" else 1):
                result[backend] = model(x, kv, kv, lens).numpy()
    return result


def test_grouped_heads_reach_flex_unrepeated():
    """The layer hands flex_attention h_kv key/value heads (enable_gqa), not h."""
    config = tiny(kv_heads=2, masked=True)
    model = build_model(config).eval()
    seen = []
    attend, takes_groups = model.core
    assert takes_groups

    def spy(q, k, v, valid_lens, causal=False, scale=None):
        seen.append((q.shape[1], k.shape[1], v.shape[1]))
        return attend(q, k, v, valid_lens, causal=causal, scale=scale)

    model.core = (spy, True)
    x = torch.randn(3, 8, 16)
    with torch.inference_mode():
        model(x, x, x, torch.tensor([8, 5, 1]))
    assert seen == [(4, 2, 2)]


def test_flex_attend_with_grouped_heads_equals_repeated_heads():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 5, 8, generator=gen) for h in (6, 2, 2))
    lens = torch.tensor([5, 2])
    grouped = CompiledFlex()(q, k, v, lens)
    with torch.inference_mode():  # eager (unfused) flex on the repeated heads
        repeated = flex_attend(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), lens)
    np.testing.assert_allclose(grouped.numpy(), repeated.numpy(), atol=1e-5)


def test_per_query_valid_lens():
    config = tiny(kv_heads=2, cross=True, m=10)
    gen = torch.Generator().manual_seed(2)
    x, kv = torch.randn(3, 8, 16, generator=gen), torch.randn(3, 10, 16, generator=gen)
    lens = torch.randint(1, 11, (3, 8), generator=gen)
    got = outputs(config, x, lens, kv)
    np.testing.assert_allclose(got["flex"], got["batched"], atol=1e-5)
    # The lengths matter: per-row lengths (the first query's) give another output.
    other = outputs(config, x, lens[:, 0], kv)
    assert np.abs(other["flex"] - got["flex"]).max() > 1e-2


@pytest.mark.parametrize("per_query", [False, True])
def test_a_row_with_no_valid_key_matches_the_reference(per_query):
    """valid_len 0: the reference's -1e6 fill makes the row uniform over all keys; bare
    flex_attention gives 0 there, flex_attend gives the reference's answer."""
    config = tiny(cross=True, m=10)
    gen = torch.Generator().manual_seed(3)
    x, kv = torch.randn(3, 8, 16, generator=gen), torch.randn(3, 10, 16, generator=gen)
    lens = torch.tensor([0, 4, 10])
    if per_query:
        lens = torch.tensor([[0] * 8, [4, 0, 3, 0, 10, 1, 2, 0], [10] * 8])
    got = outputs(config, x, lens, kv)
    np.testing.assert_allclose(got["flex"], got["batched"], atol=1e-5)
    q, k, v = (torch.randn(3, 4, n, 4, generator=gen) for n in (8, 10, 10))
    with torch.inference_mode():
        out = flex_attend(q, k, v, lens)
        row_lens = torch.tensor([0, 4, 10])
        bare = flex_attention(q, k, v, block_mask=create_block_mask(
            lambda b, h, i, j: j < row_lens[b], 3, None, 8, 10, device="cpu"))
    mean = v.mean(dim=2, keepdim=True).expand(3, 4, 8, 4)
    np.testing.assert_allclose(out[0].numpy(), mean[0].numpy(), atol=1e-6)
    assert bare[0].abs().max() == 0  # the case flex_attend exists to fix


def test_causal_prefix_matches_the_reference():
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, n, 4, generator=gen) for n in (3, 6, 6))
    lens = torch.tensor([6, 2])
    got = CompiledFlex()(q, k, v, lens, causal=True)
    keep = torch.arange(6)[None, None, :] <= torch.arange(3, 6)[None, :, None]
    keep = keep & (torch.arange(6)[None, None, :] < lens[:, None, None])  # (2, 3, 6)
    scores = (q @ k.transpose(-1, -2) / 2).masked_fill(~keep[:, None], -1e6)
    np.testing.assert_allclose(got.numpy(), (scores.softmax(-1) @ v).numpy(), atol=1e-5)


@pytest.mark.parametrize("backend", ["batched", "flex"])
def test_a_call_that_would_recompile_raises(backend):
    """After the first call, new lengths' shape is a recompile: an error for flex; the
    same calls on the eager layout run (so the error is flex's own)."""
    config = tiny(backend=backend)
    model = build_model(config).eval()
    x = torch.randn(3, 8, 16)
    with torch.inference_mode():
        model(x, x, x, torch.tensor([8, 3, 1]))
        model(x, x, x, torch.tensor([2, 5, 7]))  # new values, same shape: no recompile
        per_query = torch.full((3, 8), 4)
        if backend == "flex":
            with pytest.raises(RuntimeError, match=RECOMPILE):
                model(x, x, x, per_query)
        else:
            assert model(x, x, x, per_query).shape == (3, 8, 16)


@pytest.mark.parametrize("mode", ["decode", "prefix"])
def test_a_prepared_step_compiles_once(mode):
    from torch._dynamo.utils import counters

    config = tiny(mode=mode, n=1, m=9)
    step = prepare(config)
    graphs = counters["stats"]["unique_graphs"]
    for _ in range(5):
        step()
    assert counters["stats"]["unique_graphs"] == graphs


def test_train_mode_runs_on_cuda_only():
    """No backward for FlexAttention on CPU: the config refuses train there, rather than a
    timed step raising or falling back; on CUDA (FlexAttention's Triton backward) it is
    a config like any other."""
    with pytest.raises(ValueError, match="does not run mode='train' on device='cpu'"):
        tiny(mode="train")
    assert tiny(mode="train", device="cuda").mode == "train"
    q = torch.randn(1, 1, 4, 4, requires_grad=True)
    with pytest.raises(Exception, match="backward on CPU"):
        CompiledFlex()(q, q, q, torch.tensor([2]))


@requires_cuda
def test_train_gradients_agree_with_the_reference_on_cuda():
    """Every variant of the agreement check on a GPU, train (gradients) included."""
    from mhabench.measure import agreement

    rows = agreement.check("torch", "flex", device="cuda")
    assert all(row.ok for row in rows), [r for r in rows if not r.ok]
    assert next(r for r in rows if r.variant == "train").max_error is not None
