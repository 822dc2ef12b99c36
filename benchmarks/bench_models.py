"""Published models' attention: one layer at batch 1, prefill and a decode step.

The chapter's shape (d = 256, p = d/h) is far from what people run: here one attention layer
of a named model (``mhabench.core.models``: Llama-3.1, Qwen3, Gemma-2 and the rest; d 3584
to 8192, GQA, head widths apart from d/h, Gemma's softmax scale) at batch 1, as a
generator runs it:

- ``ModelPrefill``: the prompt, a causal forward pass over n tokens (mode forward,
  causal self-attention);
- ``ModelDecode``: one new token over a KV cache of m tokens (mode decode).

A cell's ``model`` parameter is the model's name, which sets d, heads, kv_heads, head_dim and
scale (``mhabench.core.grids.cell_fields``; the results loader spreads it the same way and
keeps the name as ``param_model``). Mistral-7B's shape is Llama-3.1-8B's: timed once. The
backends are those that run the shapes: the framework's own layer runs MHA only (every model
here shares key/value heads), a backend the registry refuses for a shape (a plug-in without
a scale keyword at Gemma-3's scale) is n/a with its reason, and so is a cell over the
memory budget.

The grids: tiny (CI) one model at 16 tokens through the fused calls; quick four models
(Llama-3.1-8B, Qwen2.5-7B, Qwen3-32B, Gemma-2-9B), prompts of 512 tokens through the fused
calls and decode steps over 4096 cached tokens through batched and fused; full every
distinct model, prompts up to 8192 tokens within a CPU budget of FLOPs per step and caches
up to 16384, every backend but the framework's own layer. A GPU (``MHABENCH_DEVICES`` with
cuda) takes longer prompts and caches. Memory
(``track_step_bytes``) on the full grid only: the weights (0.2-1 GB in float32) are most
of it. The kernel (``track_kernel``) where the grid records kernels but on tiny: four
processes of CI's minute are the class's share there.
"""

from typing import Any

from mhabench.bench.axes import BACKENDS, FRAMEWORKS, NEWER, RECORD_KERNELS, WHERE
from mhabench.bench.cells import on_cpu, on_cuda, skip_cells
from mhabench.bench.common import CPU, CUDA, DEVICES, GRID, grid
from mhabench.bench.methods import (
    AttentionBenchmark,
    device_seconds,
    kernel_code,
    prepare,
    record_load,
    rss_bytes,
    settle,
    step_bytes,
)
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost
from mhabench.core.models import MODELS
from mhabench.measure.profiler.kernel_detect import library_call

# One name per distinct shape (mistral-7b is llama-3.1-8b's), in the table's order.
DISTINCT = [name for i, (name, shape) in enumerate(MODELS.items())
            if shape.fields() not in [m.fields() for m in list(MODELS.values())[:i]]]
NAMES = grid(tiny=["gemma-2-9b"],
             quick=["llama-3.1-8b", "qwen2.5-7b", "qwen3-32b", "gemma-2-9b"], full=DISTINCT)
# The framework's own layer runs MHA only and every model shares key/value heads; the loop
# backend's per-head passes (h = 64 at Qwen3-32B) are for the full grid. The quick grid's
# prompts go through the fused calls (and plug-ins) alone: its budget.
MODEL_BACKENDS = grid(tiny=["fused"],
                      quick=[b for b in BACKENDS if b not in ("loop", "reference")],
                      full=[b for b in (*BACKENDS, *NEWER) if b != "reference"])
PREFILL_BACKENDS = grid(tiny=MODEL_BACKENDS,
                        quick=[b for b in MODEL_BACKENDS if b != "batched"],
                        full=MODEL_BACKENDS)
# Prompt lengths and cache lengths per device.
PREFILL = {"cpu": grid(tiny=[16], quick=[512], full=[512, 2048, 8192]),
           "cuda": grid(tiny=[16], quick=[2048, 8192], full=[2048, 8192, 32768])}
CACHE = {"cpu": grid(tiny=[16], quick=[4096], full=[1024, 4096, 16384]),
         "cuda": grid(tiny=[16], quick=[4096, 32768], full=[4096, 32768, 131072])}


def lengths(table: dict[str, list[int]]) -> list[int]:
    """The lengths of every device this grid runs, as one parameter axis."""
    return sorted({x for device in DEVICES for x in table[device]})


# A CPU's budget: past the shortest prompt (the full grid's), a step of at most this many
# FLOPs (the cost model's count), and no loop backend: the 8192-token prompts of the models
# up to d = 4096 (1.5-1.8 TFLOP).
CPU_PREFILL_FLOPS = 2e12


def prefill_runs(c: AttentionConfig) -> bool:
    """Its device's prompt lengths, within a CPU's budget."""
    lengths_here = PREFILL[c.device]
    return c.n in lengths_here and (
        c.device != "cpu" or c.n == lengths_here[0]
        or c.backend != "loop" and cost(c).flops_total <= CPU_PREFILL_FLOPS)


def decode_runs(c: AttentionConfig) -> bool:
    """Its device's cache lengths."""
    return c.m in CACHE[c.device]


class ModelPrefill(AttentionBenchmark):
    """The prompt: causal self-attention over n tokens, batch 1, one layer."""

    param_names = ["framework", "backend", "model", "mode", "batch", "n", "causal",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, PREFILL_BACKENDS, NAMES, ["forward"], [1], lengths(PREFILL), [True],
              *WHERE]
    skip_params = skip_cells(param_names, params, prefill_runs)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    if GRID == "full":
        def track_step_bytes(self, *params: Any) -> int:
            return step_bytes(self)

        track_step_bytes.unit = "bytes"

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, prefill_runs,
                                                      on_cpu)

    if RECORD_KERNELS and GRID != "tiny":
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, prefill_runs,
                                              library_call)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, prefill_runs,
                                                      on_cuda)


class ModelDecode(AttentionBenchmark):
    """One new token over a KV cache of m tokens, batch 1, one layer."""

    param_names = ["framework", "backend", "model", "mode", "batch", "n", "m",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, MODEL_BACKENDS, NAMES, ["decode"], [1], [1], lengths(CACHE),
              *WHERE]
    skip_params = skip_cells(param_names, params, decode_runs)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    if GRID == "full":
        def track_step_bytes(self, *params: Any) -> int:
            return step_bytes(self)

        track_step_bytes.unit = "bytes"

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, decode_runs,
                                                      on_cpu)

    if RECORD_KERNELS and GRID != "tiny":
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, decode_runs,
                                              library_call)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, decode_runs,
                                                      on_cuda)
