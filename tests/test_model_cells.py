"""Published models' cells: the results loader spreads a ``model`` parameter into its shape,
and the report's Models section and Findings line give the numbers the cells hold (every
expected figure computed here by hand from the models' published shapes)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from fixtures.synthetic_asv import write_benchmarks

from mhabench.analysis.model_cells import (
    BY_BYTES,
    BY_MODEL,
    TERM_GROUPS,
    decode_shares,
    widths_beyond,
)
from mhabench.analysis.prediction.features import FEATURES
from mhabench.analysis.prediction.timemodel import TimeModel
from mhabench.analysis.results import load_results
from mhabench.cluster.merge import merge
from mhabench.core.config import AttentionConfig
from mhabench.core.models import model_shape
from mhabench.report.build import build_report, write_report
from mhabench.report.types import Section

FIXTURE = Path(__file__).parent / "fixtures" / "asv_results"
QUIET = {"log": lambda m: None}
PREFILL = "bench_models.ModelPrefill.time_step"
DECODE = "bench_models.ModelDecode.time_step"
# The classes' parameter names (benchmarks/bench_models.py; importing it configures the
# process, so the tests name them here).
PREFILL_NAMES = ["framework", "backend", "model", "mode", "batch", "n", "causal", "device",
                 "dtype", "threads"]
DECODE_NAMES = ["framework", "backend", "model", "mode", "batch", "n", "m", "device", "dtype",
                "threads"]
MODELS = ["llama-3.1-8b", "gemma-2-9b"]
WHERE = [["cpu"], ["float32"], [1]]
# Seconds of a step by model (its d), step and length, times a factor per framework and
# backend: PyTorch's fused call is its fastest, JAX's batched layer its and the fastest.
BASE = {(4096, "forward", 512): 0.4, (4096, "forward", 2048): 2.0, (4096, "decode", 4096): 0.04,
        (3584, "forward", 512): 0.3, (3584, "forward", 2048): 1.6, (3584, "decode", 4096): 0.03}
FACTOR = {("torch", "fused"): 1.0, ("torch", "batched"): 1.25, ("jax", "fused"): 1.5,
          ("jax", "batched"): 0.5}


def step_time(c: AttentionConfig) -> float:
    length = c.m if c.mode == "decode" else c.n
    return BASE[(c.d, c.mode, length)] * FACTOR[(c.framework, c.backend)]


def model_benchmarks(models: list[str] = MODELS) -> dict:
    both = [["torch", "jax"], ["batched", "fused"], models]
    return {PREFILL: (PREFILL_NAMES, [*both, ["forward"], [1], [512, 2048], [True], *WHERE]),
            DECODE: (DECODE_NAMES, [*both, ["decode"], [1], [1], [4096], *WHERE])}


@pytest.fixture(scope="module")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmarks(tmp_path_factory.mktemp("models") / "results", model_benchmarks(),
                            step_time)


@pytest.fixture(scope="module")
def sections(models_root: Path) -> dict[str, Section]:
    return {s.id: s for s in build_report(load_results(models_root), **QUIET).sections}


def table(section: Section, name: str) -> pd.DataFrame:
    return next(t.frame for t in section.tables if t.name == name)


def test_every_time_model_term_is_in_one_group() -> None:
    grouped = [f for names in TERM_GROUPS.values() for f in names]
    assert sorted(grouped) == sorted(FEATURES)


def test_a_model_parameter_loads_as_its_shape_with_its_name(models_root: Path) -> None:
    results = load_results(models_root)
    assert results.warnings == []
    rows = results.frame[results.frame["benchmark"] == DECODE]
    gemma = rows[rows["param_model"] == "gemma-2-9b"].iloc[0]
    # Gemma-2-9B: d 3584, 16 query heads and 8 key/value heads of 256 (h p = 4096 != d)
    assert (gemma["d"], gemma["heads"], gemma["kv_heads"], gemma["head_dim"]) == (
        3584, 16, 8, 256)
    assert gemma["config_id"] == "torch-batched-cpu-f32-dec-b1-n1-m4096-d3584-h16-kv8-p256"
    assert gemma["cell"].startswith("framework=torch, backend=batched, model=gemma-2-9b, "
                                    "d=3584, heads=16, kv_heads=8, head_dim=256, scale=0.0625")
    llama = rows[rows["param_model"] == "llama-3.1-8b"].iloc[0]
    assert (llama["d"], llama["heads"], llama["kv_heads"]) == (4096, 32, 8)
    assert pd.isna(llama["head_dim"])  # 32 x 128 = d: the chapter's split


def test_an_unknown_model_is_a_warning_naming_the_known_ones(tmp_path: Path) -> None:
    root = write_benchmarks(tmp_path / "r", model_benchmarks(), step_time)
    text = (root / "benchmarks.json").read_text().replace("'gemma-2-9b'", "'gemma-9-9b'")
    (root / "benchmarks.json").write_text(text)
    for path in (root / "synth").glob("*-virtualenv-py3.11.json"):
        path.write_text(path.read_text().replace("'gemma-2-9b'", "'gemma-9-9b'"))
    results = load_results(root)
    assert any("model 'gemma-9-9b' is not known" in w and "llama-3.1-8b" in w
               for w in results.warnings), results.warnings
    assert set(results.frame["param_model"].dropna()) == {"llama-3.1-8b"}


def test_the_models_section_gives_the_fastest_backend_and_the_numbers(
        sections: dict[str, Section]) -> None:
    summary = table(sections["models"], "summary")
    assert len(summary) == 2 * 3 * 2  # models x (two prompts, one decode step) x frameworks
    assert set(summary.loc[summary["framework"] == "torch", "fastest backend"]) == {"fused"}
    assert set(summary.loc[summary["framework"] == "jax", "fastest backend"]) == {"batched"}
    assert (summary["backends timed"] == 2).all()
    row = summary[(summary["model"] == "llama-3.1-8b") & (summary["step"] == "prefill")
                  & (summary["n or m"] == 2048) & (summary["framework"] == "jax")].iloc[0]
    assert row["time (ms)"] == pytest.approx(2.0 * 0.5 * 1e3)
    # the projections' share of Llama-3.1-8B's 512-token causal prompt, by hand: q and o
    # 2 n d (h p) each, k and v 2 n d (h_kv p) each; scores and mixing 4 n^2 (h p); the map's
    # scale, max, exp, sum, normalise and causal select 6 h n^2
    n, d, h, kv, p = 512, 4096, 32, 8, 128
    proj = 2 * 2 * n * d * h * p + 2 * 2 * n * d * kv * p
    total = proj + 4 * n * n * h * p + 6 * h * n * n
    prompt = summary[(summary["model"] == "llama-3.1-8b") & (summary["n or m"] == 512)]
    assert prompt["projections (% of FLOPs)"].tolist() == pytest.approx(
        [100 * proj / total] * 2)
    assert 90 < 100 * proj / total < 91
    # KV cache per token: 2 h_kv p values of 4 bytes
    kv_bytes = summary.groupby("model")["KV cache (bytes/token)"].unique()
    assert kv_bytes["llama-3.1-8b"].tolist() == [2 * 8 * 128 * 4]
    assert kv_bytes["gemma-2-9b"].tolist() == [2 * 8 * 256 * 4]
    shapes = table(sections["models"], "shapes").set_index("model")
    assert shapes.loc["gemma-2-9b", "p"] == 256 and shapes.loc["gemma-2-9b", "scale"] == 1 / 16


def test_a_decode_step_without_a_time_model_is_bound_by_the_larger_read(
        sections: dict[str, Section]) -> None:
    """One decode cell per framework, backend and model: too few for a time model, so the
    bound is the bytes read. Llama-3.1-8B over 4096 cached tokens: weights 2 d^2 + 2 d (h_kv
    p) floats; K/V (m + 1) x 2 x width, the width h_kv p for the fused call and h p for the
    batched layer, which repeats each key/value head for its query heads."""
    cells = table(sections["models"], "cells")
    decode = cells[(cells["step"] == "decode") & (cells["model"] == "llama-3.1-8b")]
    weights = (2 * 4096 * 4096 + 2 * 4096 * 1024) * 4
    for backend, width in (("fused", 8 * 128), ("batched", 32 * 128)):
        row = decode[(decode["backend"] == backend) & (decode["framework"] == "torch")].iloc[0]
        kv = 4097 * 2 * width * 4
        assert row["bound from"] == BY_BYTES and row["bound by"] == "projection weights"
        assert row["projection weights (% of time)"] == pytest.approx(100 * weights
                                                                      / (weights + kv))
        assert row["KV read (MiB)"] == pytest.approx(kv / 2**20)
    assert decode["the map (% of time)"].isna().all()


def test_a_fitted_time_model_splits_a_decode_step_by_its_terms() -> None:
    """Seconds per weight read and per K/V element read, by hand: the bound is the group
    with the larger product; a long cache turns the bytes bound to the KV cache."""
    coef = dict.fromkeys(FEATURES, 0.0) | {"weights": 1e-10, "kv": 4e-10, "const": 1e-3}
    model = TimeModel(("m", "torch", "fused", "cpu", "float32"), coef, None, None, 10, 1.0,
                      0.0, True, 0.0)
    config = AttentionConfig(framework="torch", backend="fused", mode="decode", batch=1, n=1,
                             m=4096, **model_shape("llama-3.1-8b").fields())
    shares, source = decode_shares(config, model)
    weights, kv = 1e-10 * (2 * 4096 * 4096 + 2 * 4096 * 1024), 4e-10 * 4097 * 2 * 1024
    total = weights + kv + 1e-3
    assert source == BY_MODEL
    assert shares["projection weights"] == pytest.approx(100 * weights / total)
    assert shares["KV cache read"] == pytest.approx(100 * kv / total)
    assert shares["per call and head"] == pytest.approx(100 * 1e-3 / total)
    assert shares["the map"] == 0.0
    long = config.replace(m=65536)
    shares, source = decode_shares(long, None)
    assert source == BY_BYTES and shares["KV cache read"] > 50  # 512 MiB against 160 MiB


def test_a_time_model_fitted_on_narrower_cells_gives_way_to_the_bytes_read() -> None:
    """A model whose cells stop at d = 256 (the chapter's grids) learnt its byte terms from
    weights that stay in cache: at Llama's d = 4096 the bound is the bytes read; inside its
    ranges the model's own split."""
    coef = dict.fromkeys(FEATURES, 0.0) | {"kv": 4e-10, "const": 1e-3}
    narrow = TimeModel(("m", "torch", "fused", "cpu", "float32"), coef, None, None, 10, 1.0,
                       0.0, True, 0.0, ranges={"d": (64, 256), "m": (512, 4096)})
    config = AttentionConfig(framework="torch", backend="fused", mode="decode", batch=1, n=1,
                             m=4096, **model_shape("llama-3.1-8b").fields())
    assert widths_beyond(narrow, config) == ["d=4096 > 256"]
    shares, source = decode_shares(config, narrow)
    assert source == BY_BYTES and shares["projection weights"] > 50  # 160 MiB against 32
    wide = replace(narrow, ranges={"d": (64, 8192), "m": (512, 4096)})
    shares, source = decode_shares(config, wide)
    assert source == BY_MODEL and shares["KV cache read"] > 50  # the model's own split
    assert widths_beyond(wide, config.replace(m=8192)) == ["m=8192 > 4096"]


def test_the_findings_line_names_each_models_fastest_steps(
        sections: dict[str, Section]) -> None:
    finding = next(f for f in sections["findings"].findings if f.target == "models")
    (line,) = finding.answers.values()
    assert line.startswith("cpu float32, batch 1: llama-3.1-8b: prefill n=512 200 ms (JAX "
                           "batched), prefill n=2048 1 s (JAX batched), decode over m=4096 "
                           "20 ms (JAX batched), bound by projection weights (56% by the "
                           "bytes read); KV cache 8.00 KiB/token; gemma-2-9b: "), line
    assert line.endswith("; KV cache 16.0 KiB/token.")


def test_the_report_builds_on_the_fixture_with_and_without_model_cells(tmp_path: Path) -> None:
    """The tiny-grid fixture has no model cells: the section says so in one line. With a
    few merged in as the fixture's machine, it has its tables, and the report writes."""
    plain = {s.id: s for s in build_report(load_results(FIXTURE), **QUIET).sections}
    assert plain["models"].absent and "\n" not in plain["models"].absent
    assert not plain["models"].tables
    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    extra = write_benchmarks(tmp_path / "extra", model_benchmarks(["gemma-2-9b"]), step_time,
                             machine="fixture-machine",
                             commit="de7f73d51f1484d618c37ef38608d26060d2a90a")
    shutil.copy(root / "fixture-machine" / "machine.json", extra / "fixture-machine")
    merge(extra, root)
    report = build_report(load_results(root), **QUIET)
    models = next(s for s in report.sections if s.id == "models")
    assert models.absent is None and set(table(models, "summary")["model"]) == {"gemma-2-9b"}
    paths = write_report(report, tmp_path / "out" / "report.html")
    assert "models--summary.csv" in {p.name for p in paths["tables"].iterdir()}
    assert "gemma-2-9b" in paths["markdown"].read_text()
