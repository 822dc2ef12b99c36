"""The asv suite: its configuration, every benchmark module on the tiny grid, skips that
show n/a instead of failing, and asv's timings against mhabench.measure.timing.measure.

Benchmark modules read MHABENCH_* and narrow the CPU affinity at import, so everything
that imports them runs in a subprocess with its own environment.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mhabench.core import backends

ROOT = Path(__file__).resolve().parents[1]
ASV = [sys.executable, "-m", "asv"]


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 600,
        **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, text=True,
                          capture_output=True, timeout=timeout, **kwargs)


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter; no framework is imported up front
    (MHABENCH_PREIMPORT): a cell imports its own when it runs, and checks that only read
    the classes import none (8 s a process less)."""
    return run([sys.executable, "-c", textwrap.dedent(code)],
               env={"MHABENCH_PREIMPORT": "none", **env}, timeout=300)


# ----- fast checks of the suite's logic (no asv) -------------------------------------------
CELLS = """
    import json
    from benchmarks import (bench_calibration, bench_cross, bench_decode, bench_gqa,
                            bench_heads, bench_kernels, bench_scaling, bench_train)
    from mhabench.bench.methods import AttentionBenchmark

    def outcome(cls, cell):
        try:
            cls().setup(*cell)
        except NotImplementedError as err:
            return "n/a: " + str(err)
        return "ok"

    # as asv collects them: the attention classes each module defines
    classes = [c for m in (bench_cross, bench_decode, bench_gqa, bench_heads, bench_kernels,
                           bench_scaling, bench_train) for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, AttentionBenchmark)
               and c.__module__ == m.__name__]
"""


def test_cuda_cells_skip_with_the_reason_on_a_machine_without_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: its cuda cells run")
    code = CELLS + """
    out = {}
    for cls in classes:
        cell = [values[0] for values in cls.params]
        cell[cls.param_names.index("device")] = "cuda"
        out[cls.__name__] = outcome(cls, cell)
    for cls in (bench_calibration.MatmulPeak, bench_calibration.CopyBandwidth):
        out[cls.__name__] = outcome(cls, ["jax", "cuda", "float32", 8, 1])
    print(json.dumps(out))
    """
    done = run_python(code, {"MHABENCH_GRID": "tiny", "MHABENCH_DEVICES": "cpu,cuda"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert len(out) == 12  # ten attention classes and two calibration classes
    for name, result in out.items():
        assert result.startswith("n/a: device='cuda' is not available"), (name, result)


def test_unsupported_variants_and_budget_skip_and_supported_cells_run() -> None:
    code = CELLS + """
    heads = bench_heads.HeadsAtFixedWidth
    gqa = bench_gqa.MhaGqaMqa
    cross = bench_cross.SelfVsCross
    print(json.dumps({
        "mha": outcome(heads, ["torch", "fused", 2, 32, 32, 4, "cpu", "float32", 1]),
        "reference_gqa": outcome(gqa, ["jax", "reference", 2, 32, 32, 4, 1, "cpu",
                                       "float32", 1]),
        "self_n_ne_m": outcome(cross, ["torch", "batched", False, 2, 8, 64, 32, 4, "cpu",
                                       "float32", 1]),
    }))
    """
    done = run_python(code, {"MHABENCH_GRID": "tiny"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["mha"] == "ok"
    assert "supports MHA only" in out["reference_gqa"]
    assert "set cross=True" in out["self_n_ne_m"]

    tiny_budget = run_python(CELLS + """
    print(outcome(bench_heads.HeadsAtFixedWidth,
                  ["torch", "batched", 2, 32, 32, 4, "cpu", "float32", 1]))
    """, {"MHABENCH_GRID": "tiny", "MHABENCH_MEMORY_BUDGET_GB": "0.000001"})
    assert "over the cpu budget" in tiny_budget.stdout, tiny_budget.stdout + tiny_budget.stderr


@pytest.mark.parametrize("grid", ["tiny", "quick", "full"])
def test_every_cell_names_its_config_through_its_parameters(grid: str) -> None:
    """Parameter names are AttentionConfig fields plus threads, and the config built from
    a cell carries exactly the cell's values (what makes results self-describing)."""
    code = CELLS + """
    import itertools
    from mhabench.core.config import AttentionConfig
    from mhabench.bench.cells import config_of
    fields = set(AttentionConfig.__dataclass_fields__)
    checked = 0
    for cls in classes:
        assert set(cls.param_names) <= fields | {"threads"}, cls.param_names
        assert {"batch", "n", "d", "heads", "device", "dtype"} <= set(cls.param_names)
        for cell in itertools.product(*cls.params):
            try:
                config = config_of(cls.param_names, cell)
            except ValueError:
                continue
            values = config.to_dict()
            assert all(values[k] == v for k, v in zip(cls.param_names, cell) if k != "threads")
            checked += 1
    heads = dict(zip(bench_heads.HeadsAtFixedWidth.param_names,
                     bench_heads.HeadsAtFixedWidth.params))
    print(json.dumps({"checked": checked, "heads": heads["heads"],
                      "backends": heads["backend"], "threads": heads["threads"]}))
    """
    done = run_python(code, {"MHABENCH_GRID": grid, "MHABENCH_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["checked"] > 20
    # The chapter's four everywhere; the newer backends on the quick grid (the default run)
    # and the full one; tiny (CI smoke) takes the one that compiles in under a second.
    every_newer = [b for b in ("compiled", "flex", "blockwise") if b in backends.names()]
    newer = {"tiny": ["blockwise"], "quick": every_newer, "full": every_newer}[grid]
    assert len(out["heads"]) >= 3 and out["backends"] == ["loop", "batched", "fused",
                                                          "reference", *newer]
    assert out["threads"] == [2]  # MHABENCH_THREADS is recorded as a parameter


def test_the_quick_grid_runs_the_newer_backends_in_the_sweep_a_gqa_and_a_cross_cell() -> None:
    """torch.compile, FlexAttention and JAX blockwise: the chapter's shape at h = 1, 8, 64,
    a grouped-query cell and a cross-attention cell, among the cells asv does not skip."""
    code = CELLS + """
    import itertools
    from mhabench.bench.cells import config_of
    seen = {}
    for cls in classes:
        for method in ("time_step", "track_step_bytes", "track_step_rss_bytes"):
            if not hasattr(cls, method):  # the RSS cross-check: only where the grid takes a cell
                continue
            skip = set(getattr(getattr(cls, method), "skip_params", cls.skip_params))
            for cell in itertools.product(*cls.params):
                c = None if cell in skip else config_of(cls.param_names, cell)
                if c is None or c.device != "cpu":
                    continue
                kinds = seen.setdefault(f"{method} {c.backend}", set())
                if 1 < c.kv_heads < c.heads:
                    kinds.add("gqa")
                if c.cross:
                    kinds.add("cross")
                # the sweep's shape: the chapter's n and d (batch 2 on the quick grid)
                if (cls.__name__, c.n, c.d, c.cross, c.mode) == ("HeadsAtFixedWidth", 512,
                                                                 256, False, "forward"):
                    kinds.add(f"h={c.heads}")
    print(json.dumps({b: sorted(k) for b, k in seen.items()}))
    """
    done = run_python(code, {"MHABENCH_GRID": "quick"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    for name in ("compiled", "flex", "blockwise"):
        assert {"h=1", "h=8", "h=64", "gqa", "cross"} <= set(out.get(f"time_step {name}", [])), (
            name, out)
        # their memory is the sweep's (the budget): no memory process for the other cells
        assert set(out.get(f"track_step_bytes {name}", [])) == {"h=1", "h=8", "h=64"}, (
            name, out)
    for name in ("batched", "fused"):  # the chapter's backends keep every memory cell
        assert {"h=1", "h=8", "h=64", "gqa", "cross"} <= set(
            out.get(f"track_step_bytes {name}", [])), (name, out)
    # the RSS cross-check: the chapter's backends' Exercise 6.4 sweep at h > 1 (the budget)
    for name in ("loop", "batched", "fused", "reference"):
        assert out[f"track_step_rss_bytes {name}"] == ["h=64", "h=8"], (name, out)
    assert not any(f"track_step_rss_bytes {name}" in out for name in ("compiled", "flex",
                                                                       "blockwise")), out


def test_a_cell_that_outgrows_memory_fails_as_that_cell() -> None:
    """The budget lets a 2 GiB map through (budget 100 GiB); the address-space cap the
    suite sets at import (1 GiB here) makes that one step fail with an error the process
    survives, instead of the machine's OOM killer."""
    code = CELLS + """
    import resource
    print(resource.getrlimit(resource.RLIMIT_AS)[0])
    big = ["torch", "batched", 8, 2048, 256, 16, "cpu", "float32", 1]
    bench = bench_heads.HeadsAtFixedWidth()
    try:
        bench.setup(*big)
        bench.time_step(*big)
        print("ran")
    except (MemoryError, RuntimeError) as err:
        print("failed:", str(err).splitlines()[0][:120])
    """
    done = run_python(code, {"MHABENCH_GRID": "tiny", "MHABENCH_MEMORY_LIMIT_GB": "1",
                             "MHABENCH_MEMORY_BUDGET_GB": "100"})
    assert done.returncode == 0, done.stderr[-2000:]
    limit, outcome = done.stdout.splitlines()[-2:]
    assert int(limit) == 2**30
    assert outcome.startswith("failed:") and "alloc" in outcome, outcome
    bad = run_python("import mhabench.bench.common",
                     {"MHABENCH_MEMORY_LIMIT_GB": "lots"})
    assert "MHABENCH_MEMORY_LIMIT_GB='lots' is not allowed" in bad.stderr


@pytest.mark.parametrize(("var", "value"), [("MHABENCH_GRID", "huge"),
                                            ("MHABENCH_DEVICES", "tpu"),
                                            ("MHABENCH_DTYPES", "float16"),
                                            ("MHABENCH_PREIMPORT", "tensorflow")])
def test_bad_environment_is_named_at_import(var: str, value: str) -> None:
    done = run_python("import mhabench.bench.common", {var: value})
    assert done.returncode != 0
    assert f"{var}={value!r} is not allowed" in done.stderr


# ----- asv end to end ---------------------------------------------------------------------
@pytest.mark.slow
def test_asv_check_passes_on_the_real_config(asv_home: dict[str, str]) -> None:
    done = run(ASV + ["check", "--python=same"], env={**asv_home, "MHABENCH_GRID": "full"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No problems found" in done.stdout


@pytest.mark.slow
def test_every_benchmark_module_runs_on_the_tiny_grid(tiny_asv_run) -> None:
    """A smoke of every benchmark once on the tiny grid (conftest's ``tiny_asv_run``)."""
    log = tiny_asv_run.log
    assert tiny_asv_run.returncode == 0, log[-5000:]
    assert " failed" not in log, log[-5000:]
    for module in ("bench_calibration", "bench_compile", "bench_cross", "bench_decode",
                   "bench_gqa", "bench_heads", "bench_kernels", "bench_scaling", "bench_train"):
        assert f"{module}." in log


@pytest.mark.slow
@pytest.mark.timing
def test_asv_times_match_mhabench_measure(tmp_path: Path) -> None:
    """asv's timing code (asv_runner with the suite's own classes and quick-grid settings,
    machine-load records on, as in every asv run) and mhabench.measure.timing.measure time
    the same cells alike, interleaved in one process so machine drift hits both
    (tests/support/asv_vs_measure.py): ForwardVsTrain's batched and fused cells (both frameworks,
    forward and train: 8 of its 16) within 5 % geometric mean, 15 % per cell; the design's
    torch decode points (0.2-5 ms steps) within 15 % geometric mean: writing the load record
    between samples had them read 1.9-2.2x. Proves the step synchronises, no compile time,
    setup or bookkeeping leaks into asv's clock, and both report the steady state. Six short
    rounds: with three, a burst of the VM's drift over two of them put one cell of 16 at
    1.28x in one CI-clone run of 3."""
    load = tmp_path / "load"
    cells = {}
    # One process per family, as asv gives each cell its own: the decode points' heap and
    # caches then never precede the sweep's cells.
    for family, pattern in (("sweep", r"ForwardVsTrain\.time_step\('\w+', '(batched|fused)'"),
                            ("decode", r"Design\.time_step\('torch', '(batched|fused)', "
                                       r"\{'mode': 'decode'")):
        done = run([sys.executable, str(ROOT / "tests" / "support" / "asv_vs_measure.py"), pattern,
                    "--rounds", "6"],
                   env={"MHABENCH_GRID": "quick", "MHABENCH_THREADS": "1",
                        "MHABENCH_LOAD_DIR": str(load)}, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        cells[family] = [json.loads(line) for line in done.stdout.splitlines()
                         if line.startswith("{")][:-1]
        print("\n".join(f"{r['ratio']:.3f} (all rounds {r['ratio_as_read']:.3f}, "
                        f"{r['rounds_kept']} kept) {r['config']}" for r in cells[family]))
    assert list(load.rglob("*.json")), "no machine-load record was written"
    sweep, decode = cells["sweep"], cells["decode"]
    assert len(sweep) == 8 and len(decode) >= 2 and all("-dec-" in r["config"] for r in decode)
    assert all(r["asv_samples"] >= 6 * 8 for r in sweep + decode)  # the quick grid's 8 a round
    assert 0.95 <= statistics.geometric_mean(r["ratio"] for r in sweep) <= 1.05, sweep
    assert all(0.85 <= r["ratio"] <= 1.15 for r in sweep), [(r["config"], r["ratio"])
                                                             for r in sweep]
    assert 0.87 <= statistics.geometric_mean(r["ratio"] for r in decode) <= 1.15, decode


def test_main_job_keeps_earlier_results_and_writes_a_new_report() -> None:
    text = (ROOT / "scripts" / "main-job").read_text()
    asv_run = text.split("asv run", 1)[1].split("\n\n", 1)[0]
    assert "--append-samples" in asv_run and "--record-samples" in asv_run
    assert "--quick" not in asv_run  # --quick would overwrite stored results
    assert "mhabench report" in text and "$(date -u" in text  # a new file each run
    # the report pools this commit's samples, the new one among them
    assert 'validation="reports/validation-$stamp.json"' in text
    assert 'stamp="$commit-' in text and '--validation reports/validation-"$commit"-*.json' in text


def test_asv_discovery_imports_no_framework_up_front() -> None:
    """asv's discovery process (``benchmark.py discover``) forks no cell: the default
    imports neither framework there; the forkserver (``run_server``) imports both."""
    code = """
    import json, sys
    sys.argv = ["/env/lib/asv/benchmark.py", sys.argv[1], "benchmarks", "out.json"]
    import mhabench.bench.common as common
    print(json.dumps([common.PREIMPORT, "jax" in sys.modules]))
    """
    seen = {}
    for command in ("discover", "run_server"):
        done = run([sys.executable, "-c", textwrap.dedent(code), command])
        assert done.returncode == 0, done.stderr
        seen[command] = json.loads(done.stdout.splitlines()[-1])
    assert seen == {"discover": [["none"], False],
                    "run_server": [["torch", "jax", "compiler"], True]}
