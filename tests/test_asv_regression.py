"""Regression detection, end to end: in a scratch clone, `asv continuous` flags a commit
that makes one backend 1.5x slower and does not flag two identical commits.

asv builds a virtualenv and installs each commit into it, as it does for users; to keep
CI fast the virtualenv gets no packages of its own but a .pth file pointing at the
running interpreter's site-packages (torch, jax), so only mhabench changes per commit.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASV = [sys.executable, "-m", "asv"]

# One cell per backend, about 20-60 ms a step: long enough to be stable, short enough that
# asv takes many samples in seconds. Rounds are interleaved between the two commits
# (--interleave-rounds), so drift of this shared machine hits both sides alike.
PROBE = '''
from .common import THREADS, AttentionBenchmark


class Probe(AttentionBenchmark):
    param_names = ["framework", "backend", "batch", "n", "d", "heads", "threads"]
    params = [["torch"], ["batched", "fused"], [8], [256], [128], [8], [THREADS]]
    rounds = 4
    repeat = (10, 20, 3.0)
'''

STEP = """    def step() -> Any:
        with torch.inference_mode():
            out = model(q, k, v, lens)
        synchronize(device)
        return out
"""
# The slow commit: fused forward steps spin for half their own duration (1.5x). The fused
# cell is the steady one (+-10 %); batched steps allocate a fresh 16 MiB map each call.
SLOW_STEP = """    def step() -> Any:
        import time
        start = time.perf_counter()
        with torch.inference_mode():
            out = model(q, k, v, lens)
        synchronize(device)
        if config.backend == "fused":
            until = time.perf_counter() + 0.5 * (time.perf_counter() - start)
            while time.perf_counter() < until:
                pass
        return out
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid",
        "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.slow
def test_asv_continuous_flags_a_1_5x_slower_backend(tmp_path: Path, asv_home) -> None:
    repo = tmp_path / "scratch"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    # Scratch-only suite and config: one probe module; venv borrowing our site-packages.
    for old in (repo / "benchmarks").glob("bench_*.py"):
        old.unlink()
    (repo / "benchmarks" / "bench_probe.py").write_text(PROBE)
    pth_writer = tmp_path / "borrow_site.py"
    ours = site.getsitepackages()[0]
    pth_writer.write_text("import site\n"
                          f"path = site.getsitepackages()[0] + '/borrowed.pth'\n"
                          f"open(path, 'w').write({ours!r})\n")
    from asv.util import load_json

    conf = load_json(str(repo / "asv.conf.json"), js_comments=True)
    conf.update(matrix={}, pythons=[f"{sys.version_info.major}.{sys.version_info.minor}"],
                branches=["master", "main"], results_dir=str(tmp_path / "results"),
                html_dir=str(tmp_path / "html"), env_dir=str(tmp_path / "env"))
    conf["install_command"] = conf["install_command"] + [f"python {pth_writer}"]
    (repo / "asv.conf.json").write_text(json.dumps(conf, indent=1))
    base = commit_all(repo, "scratch: probe benchmark, borrowed site-packages")

    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nSame code.\n")
    same = commit_all(repo, "identical code")

    source = repo / "mhabench" / "torch_attention.py"
    text = source.read_text()
    assert text.count(STEP) == 1, "the forward step changed shape: update this test"
    source.write_text(text.replace(STEP, SLOW_STEP))
    slow = commit_all(repo, "fused backend 1.5x slower")

    env = {**os.environ, **asv_home, "MHABENCH_GRID": "quick", "PYTHONPATH": ""}

    def continuous(a: str, b: str) -> subprocess.CompletedProcess:
        # --factor 1.25: above this machine's run-to-run noise (10-20 %), below 1.5x.
        return subprocess.run(ASV + ["continuous", "--factor", "1.25", "--interleave-rounds",
                                     "--machine", "pytest-machine", "--show-stderr",
                                     "-b", r"Probe\.time_step", a, b],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=900)

    unchanged = continuous(base, same)
    log = unchanged.stdout + unchanged.stderr
    assert "bench_probe.Probe.time_step" in log, log[-4000:]
    assert unchanged.returncode == 0, log[-4000:]
    assert "PERFORMANCE DECREASED" not in log

    slower = continuous(same, slow)
    log = slower.stdout + slower.stderr
    assert slower.returncode == 1, log[-4000:]
    assert "PERFORMANCE DECREASED" in log
    # asv's table: | Change | Before | After | Ratio | Benchmark (Parameter) |, "+" = slower
    flagged = [line for line in log.splitlines()
               if line.startswith("|") and line.split("|")[1].strip() == "+"]
    assert flagged and all("'fused'" in line for line in flagged), flagged
    print("\n".join(flagged))
