"""The step's own memory (mhabench.measure.memory) and the report's kernel and memory sections, on
measurements: this CPU, and the real H200 results in tests/fixtures/gpu_results."""

from __future__ import annotations

from pathlib import Path

import pytest

from mhabench.analysis.results import load_results
from mhabench.analysis.tracks import kernel_table, step_memory_table
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost
from mhabench.measure.memory import step_bytes
from mhabench.measure.timing import prepare

GPU = Path(__file__).parent / "fixtures" / "gpu_results"


def measured(config: AttentionConfig) -> int:
    step = prepare(config)
    return min(step_bytes(config, step) for _ in range(3))  # the allocator's floor


def test_a_map_writing_step_grows_with_the_map_and_flash_does_not() -> None:
    base = AttentionConfig(framework="torch", batch=2, n=512, d=256, heads=1)
    map_growth = cost(base.replace(heads=64)).attention_map_elements * 4 - \
        cost(base).attention_map_elements * 4  # 126 MiB more map at h=64
    batched = measured(base.replace(heads=64)) - measured(base)
    fused = measured(base.replace(backend="fused", heads=64)) - \
        measured(base.replace(backend="fused"))
    assert batched > 0.9 * map_growth  # scores and softmax output: at least one map each
    assert abs(fused) < 0.05 * map_growth  # flash keeps the map in tiles


def test_step_memory_excludes_what_was_resident_before_the_step() -> None:
    config = AttentionConfig(framework="torch", backend="fused", batch=2, n=64, d=64, heads=4)
    step = prepare(config)
    ballast = bytearray(256 * 2**20)  # resident before the step: not the step's
    ballast[::4096] = b"x" * len(ballast[::4096])
    assert step_bytes(config, step) < 32 * 2**20
    del ballast


def test_gpu_fixture_kernels_flag_the_float32_gqa_fallback() -> None:
    table = kernel_table(load_results(GPU).frame)
    fallbacks = table[table["note"].str.startswith("fallback")]
    # torch SDPA with enable_gqa reaches flash (16-bit only) or math: float32 GQA/MQA fell
    # back to math on the H200; the float32 MHA cell ran memory-efficient, bf16 cuDNN.
    assert set(fallbacks["config_id"]) == {
        "torch-fused-cuda-f32-fwd-b2-n512-m512-d256-h16-kv4",
        "torch-fused-cuda-f32-fwd-b2-n512-m512-d256-h16-kv1"}
    kernels = table.set_index("config_id")["kernel"]
    assert kernels["torch-fused-cuda-f32-fwd-b2-n512-m512-d256-h16-kv16"] == "efficient"
    assert kernels["torch-fused-cuda-bf16-fwd-b2-n512-m512-d256-h16-kv4"] == "cudnn"
    assert (table[table["framework"] == "jax"]["kernel"] == "xla").all()


def test_gpu_fixture_memory_shows_what_the_fallback_writes() -> None:
    table = step_memory_table(load_results(GPU).frame).set_index("config_id")
    fallback = table.loc["torch-fused-cuda-f32-fwd-b2-n512-m512-d256-h16-kv4"]
    efficient = table.loc["torch-fused-cuda-f32-fwd-b2-n512-m512-d256-h16-kv16"]
    map_mib = 2 * 16 * 512 * 512 * 4 / 2**20
    assert fallback["measured (MiB)"] > map_mib > 4 * efficient["measured (MiB)"]
    assert fallback["model map (MiB)"] == pytest.approx(map_mib)
    assert efficient["model map (MiB)"] == 0


def test_report_shows_the_kernel_per_fused_cell_and_the_memory_model() -> None:
    from mhabench.report.build import build_report

    report = build_report(load_results(GPU), log=lambda m: None)
    sections = {s.id: s for s in report.sections}
    kernels, memory = sections["kernels"], sections["memory"]
    assert kernels.absent is None and memory.absent is None
    assert "2 fused cell(s) fell back to math" in " ".join(kernels.text)
    cells = next(t.frame for t in kernels.tables if t.name == "cells")
    assert len(cells) == len(kernel_table(load_results(GPU).frame)) > 0
    summary = next(t.frame for t in memory.tables if t.name == "summary")
    assert {"torch", "jax"} <= set(summary["framework"])
    # The machine section shows the GPU facts recorded beside asv's machine.json.
    machines = next(t.frame for t in sections["machine"].tables if t.name == "machines")
    assert "NVIDIA H200" in machines.to_string()
