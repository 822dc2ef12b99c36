"""Backends are plug-ins (mhabench.core.backends): the README's example backend, loaded from
outside mhabench, passes ``mhabench check``, appears in a tiny asv run of the real suite
and in the report; an entry point finds it too; a wrong attention fails the check."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PLUGIN = {"MHABENCH_BACKENDS": "plain_attention", "PYTHONPATH": str(EXAMPLES)}


def run(cmd: list[str], env: dict[str, str], cwd: Path = ROOT, timeout: float = 600
        ) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, text=True,
                          capture_output=True, timeout=timeout)


def mhabench(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "mhabench.cli", *args], env)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_readme_example_passes_the_agreement_check(framework: str) -> None:
    done = mhabench("check", "--framework", framework, "--backend", "plain", "--json",
                    env=PLUGIN)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["variant"] for r in rows} >= {"self", "gqa", "mqa", "decode", "prefix", "train"}
    assert all(r["ok"] and r["max_error"] is not None for r in rows), rows


def test_a_wrong_attention_fails_the_check(tmp_path: Path) -> None:
    # The example without the 1/sqrt(p) scale: every variant must disagree. It claims
    # grouped key/value heads (the default) but does not handle them: those variants raise.
    (tmp_path / "unscaled.py").write_text(
        "import plain_attention as p\n"
        "from mhabench.api import register_attention\n"
        "def attend(q, k, v, valid_lens):\n"
        "    return p.torch_attend(q * q.shape[-1] ** 0.5, k, v, valid_lens)\n"
        "register_attention('unscaled', 'torch', attend)\n")
    env = {"MHABENCH_BACKENDS": "unscaled", "PYTHONPATH": f"{tmp_path}{os.pathsep}{EXAMPLES}"}
    done = mhabench("check", "--backend", "unscaled", env=env)
    assert done.returncode == 2
    assert "torch/unscaled disagrees with torch/batched in self, cross" in done.stderr
    assert "prefix        n/a" in done.stdout  # no causal keyword: no prefix mode
    assert "gqa           FAIL  raised RuntimeError" in done.stdout
    refused = mhabench("time", "--backend", "unscaled", "--mode", "prefix", "-n", "1", "-m",
                       "8", env=env)
    assert refused.returncode == 2
    assert "backend='unscaled' does not run mode='prefix'" in refused.stderr


def test_an_entry_point_registers_the_backend(tmp_path: Path) -> None:
    # What `pip install` of a package with a [project.entry-points."mhabench.backends"]
    # table leaves on the path: a dist-info folder with entry_points.txt.
    info = tmp_path / "user_attention-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-attention\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text("[mhabench.backends]\nplain = plain_attention\n")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{EXAMPLES}", "MHABENCH_BACKENDS": ""}
    code = "from mhabench.api import backend_names; print(','.join(backend_names('jax')))"
    done = run([sys.executable, "-c", code], env)
    assert done.returncode == 0, done.stderr
    jax_builtin = "loop,batched,fused,reference,blockwise,fused_cudnn,fused_xla"
    assert done.stdout.strip() == jax_builtin + ",plain"
    bare = run([sys.executable, "-c", code], {"MHABENCH_BACKENDS": ""})
    assert bare.stdout.strip() == jax_builtin


def test_a_missing_plugin_module_is_named(tmp_path: Path) -> None:
    done = mhabench("cost", "--backend", "batched", env={"MHABENCH_BACKENDS": "no_such_mod"})
    assert done.returncode == 2
    assert "MHABENCH_BACKENDS: module 'no_such_mod' cannot be imported" in done.stderr


@pytest.mark.slow
def test_a_plugin_runs_in_asv_and_reaches_the_report(tmp_path: Path, tiny_asv_run) -> None:
    """The tiny asv run of the whole suite (conftest's ``tiny_asv_run``) loaded the example
    the way the README says (ASV_PYTHONPATH, MHABENCH_BACKENDS): its Exercise 6.4 cells
    are timed in both frameworks, then reported."""
    assert tiny_asv_run.returncode == 0, tiny_asv_run.log[-4000:]
    results = tiny_asv_run.results
    [result] = [p for p in (results / "pytest-machine").glob("*.json")
                if p.name != "machine.json"]
    stored = json.loads(result.read_text())["results"]
    [key] = [k for k in stored if k.endswith("HeadsAtFixedWidth.time_step")]
    values, params = stored[key][0], stored[key][1]
    backends = params[1]
    assert "'plain'" in backends
    cells = [dict(zip(("framework", "backend"), cell[:2], strict=True))
             for cell in itertools.product(*params)]
    timed = [c for c, v in zip(cells, values, strict=True)
             if c["backend"] == "'plain'" and v is not None]
    assert len(timed) == 2 * 3  # both frameworks, h = 1, 4, 16
    report = tmp_path / "report.html"
    made = mhabench("report", "--results", str(results), "--out", str(report),
                    env=PLUGIN)
    assert made.returncode == 0, made.stderr
    html = report.read_text()
    assert "torch/plain" in html and "jax/plain" in html
    # Without the plug-in loaded, its cells are left out with the reason, the rest reported.
    bare = tmp_path / "bare.html"
    made = mhabench("report", "--results", str(results), "--out", str(bare),
                    env={"MHABENCH_BACKENDS": ""})
    assert made.returncode == 0, made.stderr
    assert "backend=&#x27;plain&#x27; is not allowed" in bare.read_text()
    assert "torch/plain" not in bare.read_text() and "torch/fused" in bare.read_text()
