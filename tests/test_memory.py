"""The step's own memory (mhabench.measure.memory) and the report's kernel and memory sections, on
measurements: this CPU, and the real H200 results in tests/fixtures/gpu_results."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mhabench.analysis.results import load_results
from mhabench.analysis.tracks import kernel_table, step_memory_table
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost
from mhabench.measure.memory import HEAP, TORCH_PROFILER, rss_step_bytes, step_bytes, step_memory
from mhabench.measure.timing import prepare

GPU = Path(__file__).parent / "fixtures" / "gpu_results"
MIB = 2**20
TORCH_CPU = AttentionConfig(framework="torch", backend="fused", batch=2, n=64, d=64, heads=4)


def measured(config: AttentionConfig) -> int:
    """One cell's live peak, checked to read the same in three calls of its step."""
    step = prepare(config)
    readings = {step_bytes(config, step) for _ in range(3)}
    assert len(readings) == 1, (config.id, readings)
    return readings.pop()


def test_a_map_writing_step_grows_with_the_map_and_flash_does_not() -> None:
    base = AttentionConfig(framework="torch", batch=2, n=512, d=256, heads=1)
    map_growth = cost(base.replace(heads=64)).attention_map_elements * 4 - \
        cost(base).attention_map_elements * 4  # 126 MiB more map at h=64
    batched = measured(base.replace(heads=64)) - measured(base)
    fused = measured(base.replace(backend="fused", heads=64)) - \
        measured(base.replace(backend="fused"))
    # Two maps live at once: the scores and their scaled copy, then the scaled scores and
    # the softmax weights; the reading holds no third, whatever the heap's history.
    assert 1.95 * map_growth < batched < 2.05 * map_growth
    assert abs(fused) < 0.05 * map_growth  # flash keeps the map in tiles


def test_the_live_peak_counts_only_the_steps_own_live_blocks() -> None:
    import torch

    resident = [torch.ones(16 * MIB // 4)]  # allocated before the step

    def step() -> torch.Tensor:
        resident.clear()  # freeing what was resident gives the step nothing
        a = torch.ones(8 * MIB // 4)
        b = torch.ones(4 * MIB // 4)
        del a  # freed before the next allocation: 12 MiB is the peak, not 13
        return b + 1  # 4 MiB

    reading = step_memory(TORCH_CPU, step)
    assert reading.source == TORCH_PROFILER
    assert reading.bytes == 12 * MIB


def test_a_training_step_reads_the_same_after_freeing_earlier_gradients() -> None:
    """A training step drops the gradients the previous call made: those frees must not
    count, whether or not that previous call ran under the profiler too."""
    config = AttentionConfig(framework="torch", mode="train", batch=2, n=128, d=64, heads=4)
    grads = 4 * config.d * config.d * 4  # the step's new weight gradients, at least
    assert measured(config) > grads


def test_the_rss_reading_excludes_what_was_resident_before_the_step() -> None:
    step = prepare(TORCH_CPU)
    ballast = bytearray(256 * MIB)  # resident before the step: not the step's
    ballast[::4096] = b"x" * len(ballast[::4096])
    assert rss_step_bytes(TORCH_CPU, step) < 32 * MIB
    del ballast


def test_a_jax_step_reads_the_c_allocators_live_peak_compiled_or_not() -> None:
    """A plug-in's step need not expose a compiled function: the reading is the live peak
    of the call's large blocks (a 64 MiB block freed before the next one: one, not two)."""
    import numpy as np

    def step() -> np.ndarray:
        first = np.ones(16 * MIB, np.float32)  # 64 MiB, every page written
        del first
        return np.ones(16 * MIB, np.float32)

    reading = step_memory(TORCH_CPU.replace(framework="jax"), step)
    assert reading.source == HEAP
    assert 64 * MIB <= reading.bytes < 66 * MIB


_PLUG = str(Path(__file__).resolve().parent / "probes" / "plugged_heap.py")


def test_inside_fresh_large_blocks_a_free_heap_chunk_cannot_take_a_large_block() -> None:
    done = subprocess.run([sys.executable, _PLUG], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    # mapped fresh while plugged; from the heap's free chunk again once the policy is back
    assert done.stdout.split() == ["True", "False"]


_FIRST_STEP = """
    from mhabench.core.config import AttentionConfig
    from mhabench.measure import memory, timing
    config = AttentionConfig(framework="jax", backend="blockwise", mode="train", batch=1,
                             n=1024, d=64, heads=8)
    step = timing.prepare(config)  # the process's first step, as in asv's memory process
    reading = memory.step_memory(config, step)
    print(reading.bytes, memory.xla_buffer_bytes(step))
"""


def test_a_jax_step_reads_at_least_its_buffer_plan_when_first_in_its_process() -> None:
    """XLA:CPU's planned temporaries (blockwise's score tiles) reach the heap reading or not
    by what ran before: as a process's first step it read 0.1 MiB of a 12.2 MiB plan."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_FIRST_STEP)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reading, plan = (int(v) for v in done.stdout.split()[-2:])
    assert plan > 8 * MIB, plan  # tiles of (n, 64) scores for 8 heads, forward and backward
    assert reading >= plan, (reading, plan)


def test_a_donated_kv_cache_is_not_counted_as_new_memory() -> None:
    """The JAX decode step writes its 32 MiB KV cache in place (donated): XLA's plan lists
    it among the outputs and as aliased; the reading counts what the step adds."""
    from mhabench.measure.memory import xla_buffer_bytes

    config = AttentionConfig(framework="jax", backend="fused", mode="decode", batch=4, n=1,
                             m=4096, d=256, heads=16)
    step = prepare(config)
    cache = 2 * 4 * 4096 * 256 * 4  # k and v, float32
    analysis = step.compiled.memory_analysis()
    assert analysis.alias_size_in_bytes >= cache  # the plan does see the donation
    assert xla_buffer_bytes(step) < cache // 4
    assert step_bytes(config, step) < cache // 4


_FRESH = """
    from mhabench.core.config import AttentionConfig
    from mhabench.measure import memory, timing
    timing.configure_process()
    for fields in {configs}:
        config = AttentionConfig.from_dict(fields)
        step = timing.prepare(config, 1, settle=False)  # as asv's memory process has it
        print(memory.step_bytes(config, step), memory.rss_step_bytes(config, step))
"""


# timing: asv takes each memory reading alone; beside two more jobs on 2 cores one JAX
# reading in five came out 1.6 % off (4.1 MiB more; the cause is not established).
@pytest.mark.slow
@pytest.mark.timing
def test_one_cell_reads_the_same_in_fresh_processes(tmp_path: Path) -> None:
    """torch batched (h = 16) and JAX batched (h = 64), each in five fresh processes: the
    live peak agrees within 1 %. torch's holds the two maps its step keeps at once; JAX's
    at least the one map its YNNPACK fusion writes outside XLA's buffer plan (the RSS
    reading, taken after it in the same process, is only printed)."""
    base = AttentionConfig(backend="batched", batch=2, n=512, d=256)
    configs = [base.replace(framework="torch", heads=16), base.replace(framework="jax", heads=64)]
    code = textwrap.dedent(_FRESH.format(configs=[c.to_dict() for c in configs]))
    # JAX's compile cache, as the asv suite keeps it: the first process compiles
    env = {**os.environ, "MHABENCH_THREADS": "1", "JAX_COMPILATION_CACHE_DIR": str(tmp_path),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    readings = []
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        lines = done.stdout.splitlines()[-len(configs):]
        readings.append([tuple(int(v) for v in line.split()) for line in lines])
    for i, config in enumerate(configs):
        live = [r[i][0] for r in readings]
        assert max(live) <= 1.01 * min(live), (config.id, readings)
    maps = [cost(c).attention_map_elements * 4 for c in configs]
    torch_live, jax_live = (min(r[i][0] for r in readings) for i in range(2))
    assert 2 * maps[0] <= torch_live < 2 * maps[0] + 16 * MIB, readings
    assert jax_live >= maps[1], readings


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


def test_report_sets_the_rss_reading_beside_the_live_peak(tmp_path: Path) -> None:
    """The memory section's cross-check, on the real CPU fixture with an RSS reading added
    beside every live peak: the same, plus 8 MiB in torch batched cells."""
    import itertools
    import json
    import shutil

    from mhabench.report.build import build_report

    root = tmp_path / "results"
    shutil.copytree(Path(__file__).parent / "fixtures" / "asv_results", root)
    spec = json.loads((root / "benchmarks.json").read_text())
    live_names = [n for n in spec if n.endswith(".track_step_bytes")]
    for name in live_names:
        spec[name.replace("track_step_bytes", "track_step_rss_bytes")] = {
            **spec[name], "name": name.replace("track_step_bytes", "track_step_rss_bytes")}
    (root / "benchmarks.json").write_text(json.dumps(spec))
    for path in (root / "fixture-machine").glob("*.json"):
        data = json.loads(path.read_text())
        if "results" not in data:
            continue
        for name in [n for n in data["results"] if n in live_names]:
            row = list(data["results"][name])
            names = spec[name]["param_names"]
            values = []
            for value, cell in zip(row[0], itertools.product(*row[1]), strict=True):
                fields = dict(zip(names, cell, strict=True))
                bump = fields["framework"] == "'torch'" and fields["backend"] == "'batched'"
                values.append(value + 8 * MIB if bump and value == value else value)  # not NaN
            data["results"][name.replace("track_step_bytes", "track_step_rss_bytes")] = [
                values, *row[1:]]
        path.write_text(json.dumps(data))
    report = build_report(load_results(root), log=lambda m: None)
    memory = next(s for s in report.sections if s.id == "memory")
    rss = next(t.frame for t in memory.tables if t.name == "rss")
    assert len(rss) == len(step_memory_table(load_results(root).frame))  # one row a cell
    torch_batched = (rss["framework"] == "torch") & (rss["backend"] == "batched")
    assert ((rss["RSS - live (MiB)"] - 8).abs() < 1e-9).eq(torch_batched).all()
    more = int(torch_batched.sum())
    assert 0 < more < len(rss)
    assert f"RSS reads more in {more} (torch/batched {more};" in memory.text[-1]
    assert f"in {len(rss) - more} of {len(rss)} CPU cells" in memory.text[-1]
