"""The kernel that ran: detected from torch's profiler and JAX's compiled HLO, predicted by
the config, and followed by the cost model's map bytes and memory budget."""

from __future__ import annotations

import pytest
from conftest import requires_cuda

from mhabench.core.config import AttentionConfig, UnavailableError
from mhabench.core.cost import cost
from mhabench.core.kernel_codes import KERNEL_CODES, expected_kernel, materialises
from mhabench.measure.profiler.kernel_detect import (
    detect_kernel,
    kernel_from_hlo,
    kernel_from_torch_ops,
)
from mhabench.measure.timing import check_runnable, prepare


def small(**kw) -> AttentionConfig:
    return AttentionConfig(**{"batch": 2, "n": 64, "d": 64, "heads": 8, **kw})


@pytest.mark.parametrize("kw", [{}, {"kv_heads": 2}, {"kv_heads": 1, "masked": True},
                                {"mode": "train"}, {"backend": "reference"},
                                {"mode": "train", "dropout": 0.1}])
def test_torch_cpu_kernel_is_detected_and_predicted(kw) -> None:
    config = small(framework="torch", **{"backend": "fused", **kw})
    ran = detect_kernel(config, prepare(config))
    assert ran == expected_kernel(config)
    # GQA reaches the flash kernel on the CPU; dropout in training falls back to math.
    assert ran == ("math" if config.dropout else "flash")


def test_jax_fused_on_cpu_is_xla_and_counted_as_materialising() -> None:
    config = small(framework="jax", backend="fused")
    assert detect_kernel(config, prepare(config)) == expected_kernel(config) == "xla"
    terms = cost(config)
    assert terms.attention_map_bytes == terms.attention_map_elements * 4 > 0
    assert cost(config, kernel="flash").attention_map_bytes == 0


def test_budget_skips_a_jax_fused_cell_whose_map_does_not_fit(monkeypatch) -> None:
    # 8 x 64 x 8192^2 float32 map = 128 GiB: the old model let this through as "fused".
    big = AttentionConfig(framework="jax", backend="fused", batch=8, n=8192, d=256, heads=64)
    monkeypatch.setenv("MHABENCH_MEMORY_BUDGET_GB", "16")
    with pytest.raises(UnavailableError, match="over the cpu budget"):
        check_runnable(big)
    torch_flash = big.replace(framework="torch")
    check_runnable(torch_flash)  # flash keeps the map in tiles: within budget


def test_parsers_read_op_names_and_hlo() -> None:
    assert kernel_from_torch_ops(["aten::linear", "aten::_scaled_dot_product_flash_attention"
                                  "_for_cpu"]) == "flash"
    assert kernel_from_torch_ops(["aten::_scaled_dot_product_efficient_attention"]) == \
        "efficient"
    assert kernel_from_torch_ops(["aten::bmm", "aten::softmax"]) is None
    hlo = 'custom-call(...), custom_call_target="__cudnn$fmhaSoftmax", backend_config=...'
    assert kernel_from_hlo(hlo) == "cudnn"
    assert kernel_from_hlo("fusion(...), kind=kLoop, calls=%fused_computation") == "xla"
    assert sorted(KERNEL_CODES.values()) == sorted(set(KERNEL_CODES.values()))
    with pytest.raises(ValueError, match="kernel='fast' is not known"):
        materialises("fast")


CUDA_CELLS = [(dtype, heads, kv, masked) for dtype in ("float32", "bfloat16")
              for heads, kv in ((8, 8), (8, 2), (64, 64)) for masked in (False, True)]


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize(("dtype", "heads", "kv_heads", "masked"), CUDA_CELLS)
def test_cuda_kernel_prediction_never_understates_the_map(dtype, heads, kv_heads,
                                                          masked) -> None:
    """On a GPU the prediction (used for memory budgets) may say math where a fused kernel
    ran, never the reverse; the detected kernel is printed for the record."""
    config = AttentionConfig(framework="torch", backend="fused", device="cuda", dtype=dtype,
                             batch=2, n=256, d=256, heads=heads, kv_heads=kv_heads,
                             masked=masked)
    ran = detect_kernel(config, prepare(config))
    print(f"{config.id}: expected {expected_kernel(config)}, ran {ran}")
    assert materialises(expected_kernel(config)) or not materialises(ran), ran


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_jax_fused_runs_the_predicted_kernel(dtype) -> None:
    config = AttentionConfig(framework="jax", backend="fused", device="cuda", dtype=dtype,
                             batch=2, n=256, d=256, heads=8)
    try:
        step = prepare(config)
    except UnavailableError as exc:  # torch sees the GPU but this jax is CPU-only
        pytest.skip(str(exc))
    ran = detect_kernel(config, step)
    print(f"{config.id}: expected {expected_kernel(config)}, ran {ran}")
    assert ran == expected_kernel(config)


# ----- forced kernels (backends fused_<kernel>): no silent fallback -------------------------
@pytest.mark.parametrize(("framework", "backend", "kernel"), [
    ("torch", "fused_flash", "flash"), ("torch", "fused_math", "math"),
    ("jax", "fused_xla", "xla")])
def test_a_forced_kernel_is_the_one_that_runs(framework, backend, kernel) -> None:
    for variant in ({}, {"kv_heads": 2, "masked": True}):
        config = small(framework=framework, backend=backend, **variant)
        assert expected_kernel(config) == kernel
        assert detect_kernel(config, prepare(config)) == kernel  # auto picks flash on CPU


def test_a_forced_kernel_that_cannot_take_the_cell_is_refused_with_the_reason() -> None:
    # The CPU flash kernel has no dropout: forced, the cell fails to build (asv: n/a);
    # the library's choice would fall back to math.
    config = small(backend="fused_flash", mode="train", dropout=0.1)
    with pytest.raises(ValueError, match="cannot run this cell: .*dropout"):
        prepare(config)
    assert detect_kernel(config.replace(backend="fused"), prepare(config.replace(
        backend="fused"))) == "math"
    for framework, backend in (("torch", "fused_efficient"), ("torch", "fused_cudnn"),
                               ("jax", "fused_cudnn")):
        with pytest.raises(ValueError, match="runs on cuda only, not device='cpu'"):
            small(framework=framework, backend=backend)


@requires_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["fused_flash", "fused_efficient", "fused_cudnn",
                                     "fused_math"])
@pytest.mark.parametrize(("dtype", "kv_heads"), [("float32", 8), ("bfloat16", 8),
                                                 ("bfloat16", 2)])
def test_cuda_forced_kernels_run_or_say_why(backend, dtype, kv_heads) -> None:
    config = AttentionConfig(framework="torch", backend=backend, device="cuda", dtype=dtype,
                             batch=2, n=256, d=256, heads=8, kv_heads=kv_heads)
    try:
        step = prepare(config)
    except ValueError as exc:
        print(f"{config.id}: n/a: {exc}")
        assert "cannot run this cell" in str(exc)
        return
    ran = detect_kernel(config, step)
    print(f"{config.id}: ran {ran}")
    assert ran == backend.removeprefix("fused_")
