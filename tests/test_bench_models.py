"""The asv classes of published models' shapes (benchmarks/bench_models.py): discovered on
every grid, each cell's config is its model's shape, the quick grid keeps to its budget,
and the tiny grid's cells run.

The benchmark modules configure the process when imported (threads, affinity, a memory
cap), so everything that imports them runs in a fresh interpreter."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.benchmark_ids import discovered

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("bench_models.ModelPrefill", "bench_models.ModelDecode")


def run_python(code: str, env: dict[str, str]) -> dict:
    """``code`` (which prints one JSON line last) in a fresh interpreter, no framework
    imported up front."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "MHABENCH_PREIMPORT": "none", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("grid", ["quick", "full"])
def test_asv_discovers_both_classes(grid: str) -> None:
    """(The tiny grid's ids are the committed listing's, tests/test_benchmark_ids.py.)"""
    found = {b["name"]: b for b in discovered(grid)}
    for cls in CLASSES:
        bench = found[f"{cls}.time_step"]
        assert bench["param_names"][:3] == ["framework", "backend", "model"]
        assert len(bench["skipped"]) < len(list(itertools.product(*bench["params"])))


CELLS = """
    import itertools, json
    from benchmarks.bench_models import ModelDecode, ModelPrefill
    from mhabench.bench.cells import config_of
    from mhabench.core.cost import cost
    from mhabench.core.models import model_shape
    out = []
    for cls in (ModelPrefill, ModelDecode):
        skip = set(cls.skip_params)
        for cell in itertools.product(*cls.params):
            if cell in skip:
                continue
            params = dict(zip(cls.param_names, cell))
            c = config_of(cls.param_names, cell)
            shape = model_shape(params["model"]).fields()
            assert all(getattr(c, k) == v or k == "scale" and v == c.softmax_scale
                       for k, v in shape.items()), (params, c)
            out.append({"cls": cls.__name__, "model": params["model"], "mode": c.mode,
                        "causal": c.causal, "backend": c.backend, "framework": c.framework,
                        "n": c.n, "m": c.m, "batch": c.batch,
                        "tflop": cost(c).flops_total / 1e12})
    print(json.dumps(out))
"""


def test_the_quick_grid_times_four_models_within_its_budget() -> None:
    cells = run_python(CELLS, {"MHABENCH_GRID": "quick"})
    prefill = [c for c in cells if c["cls"] == "ModelPrefill"]
    decode = [c for c in cells if c["cls"] == "ModelDecode"]
    assert {c["model"] for c in cells} == {"llama-3.1-8b", "qwen2.5-7b", "qwen3-32b",
                                           "gemma-2-9b"}
    assert all(c["mode"] == "forward" and c["causal"] and c["batch"] == 1 for c in prefill)
    assert {c["backend"] for c in prefill} == {"fused"}
    # longer prompts are the full grid's: the quick grid keeps to its time
    assert sorted((c["model"], c["n"], c["framework"]) for c in prefill) == sorted(
        (m, 512, fw) for m in ("llama-3.1-8b", "qwen2.5-7b", "qwen3-32b", "gemma-2-9b")
        for fw in ("torch", "jax"))
    assert all(c["mode"] == "decode" and c["m"] == 4096 for c in decode)
    assert {(c["framework"], c["backend"]) for c in decode} == {
        (fw, b) for fw in ("torch", "jax") for b in ("batched", "fused")}


def test_the_full_grid_times_each_distinct_shape_once_and_no_reference_layer() -> None:
    cells = run_python(CELLS, {"MHABENCH_GRID": "full", "MHABENCH_DEVICES": "cpu"})
    models = {c["model"] for c in cells}
    assert "llama-3.1-8b" in models and "mistral-7b" not in models  # the same shape
    assert len(models) == 6
    assert "reference" not in {c["backend"] for c in cells}
    longest = [c for c in cells if c["cls"] == "ModelPrefill" and c["n"] == 8192]
    assert longest and all(c["tflop"] <= 2 and c["backend"] != "loop" for c in longest)


def test_the_tiny_grids_cells_run_and_an_over_budget_cell_is_na() -> None:
    code = """
    import itertools, json
    from benchmarks.bench_models import ModelDecode, ModelPrefill
    out = {}
    for cls in (ModelPrefill, ModelDecode):
        for cell in itertools.product(*cls.params):
            bench = cls()
            try:
                bench.setup(*cell)
                bench.time_step(*cell)
                out[f"{cls.__name__} {cell[0]}"] = bench.cfg.id
            except NotImplementedError as err:
                out[f"{cls.__name__} {cell[0]}"] = "n/a: " + str(err)
    print(json.dumps(out))
    """
    out = run_python(code, {"MHABENCH_GRID": "tiny"})
    assert out == {
        "ModelPrefill torch": "torch-fused-cpu-f32-fwd-b1-n16-m16-d3584-h16-kv8-p256-causal",
        "ModelPrefill jax": "jax-fused-cpu-f32-fwd-b1-n16-m16-d3584-h16-kv8-p256-causal",
        "ModelDecode torch": "torch-fused-cpu-f32-dec-b1-n1-m16-d3584-h16-kv8-p256",
        "ModelDecode jax": "jax-fused-cpu-f32-dec-b1-n1-m16-d3584-h16-kv8-p256"}
    small = run_python(code, {"MHABENCH_GRID": "tiny", "MHABENCH_MEMORY_BUDGET_GB": "0.01"})
    assert all(v.startswith("n/a: ") and "over the cpu budget" in v for v in small.values())
