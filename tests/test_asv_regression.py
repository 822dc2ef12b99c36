"""The regression gate, end to end, on a real module of the suite with its shipped settings:
in a scratch clone, the README's command (`asv continuous` with interleaved rounds) flags
every cell of a backend made 1.5x or 1.25x slower, and no other cell, and flags nothing
between two identical commits.

asv builds a virtualenv and installs each commit into it, as it does for users; to keep
CI fast the virtualenv gets no packages of its own but a .pth file pointing at the
running interpreter's site-packages (torch, jax), so only mhabench changes per commit.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASV = [sys.executable, "-m", "asv"]
# A small real part of the suite at its shipped (quick) settings: bench_gqa's GQA cells
# (batch 2, n 512, d 256, 16 query heads over 4 key/value heads), 5-50 ms a step, every
# backend that takes GQA in both frameworks; asv's -b selects parameter cells by their repr.
MODULE = "bench_gqa"
CELLS = (r"^bench_gqa\.MhaGqaMqa\.time_step\('(torch|jax)', '(loop|batched|fused)', 2, 512, "
         r"256, 16, 4, ")
SLOWED_CELLS = 2  # torch and jax fused

# The slowed commit: every fused step spins for a fraction of its own duration.
PREPARED = """    for _ in range(warmup):
        step()
    return step
"""
SLOWED = """    for _ in range(warmup):
        step()
    if config.backend != "fused":
        return step

    def slowed() -> Any:  # a regression planted by the gate test
        start = time.perf_counter()
        out = step()
        until = time.perf_counter() + {extra} * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass
        return out

    return slowed
"""


def gate_command() -> list[str]:
    """The README's "did this commit regress?" command, without its two commits."""
    text = (ROOT / "README.md").read_text()
    line = re.search(r"^(asv continuous --interleave-rounds [^\n#]*?)\s+main HEAD", text,
                     re.MULTILINE)
    assert line, "README lost its regression gate command"
    return line.group(1).split()[1:]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid",
        "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def flagged(log: str) -> list[str]:
    # asv's table: | Change | Before | After | Ratio | Benchmark (Parameter) |, "+" = slower
    return [line for line in log.splitlines()
            if line.startswith("|") and line.split("|")[1].strip() == "+"]


@pytest.mark.slow
def test_gate_flags_exactly_the_slowed_backend(tmp_path: Path, asv_home) -> None:
    repo = tmp_path / "scratch"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
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
    base = commit_all(repo, "scratch: virtualenv borrowing site-packages")
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nSame code.\n")
    same = commit_all(repo, "identical code")

    timing = repo / "mhabench" / "timing.py"
    text = timing.read_text()
    assert text.count(PREPARED) == 1, "timing.prepare changed shape: update this test"
    slowed = {}
    for extra in (0.5, 0.25):
        git(repo, "checkout", "-q", same)
        timing.write_text(text.replace(PREPARED, SLOWED.format(extra=extra)))
        slowed[extra] = commit_all(repo, f"fused backend {1 + extra}x slower")

    env = {**os.environ, **asv_home, "MHABENCH_GRID": "quick", "PYTHONPATH": ""}
    command = [*ASV, *gate_command(), "--machine", "pytest-machine", "--show-stderr",
               "-b", CELLS]

    def continuous(a: str, b: str) -> tuple[int, str]:
        done = subprocess.run([*command, a, b], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=1200)
        return done.returncode, done.stdout + done.stderr

    code, log = continuous(base, same)
    assert f"{MODULE}.MhaGqaMqa.time_step" in log, log[-4000:]
    assert code == 0 and not flagged(log) and "PERFORMANCE DECREASED" not in log, \
        "\n".join(flagged(log)) or log[-4000:]

    for extra, commit in slowed.items():
        code, log = continuous(same, commit)
        lines = flagged(log)
        print(f"{1 + extra}x:", *lines, sep="\n")
        assert code == 1 and "PERFORMANCE DECREASED" in log, log[-4000:]
        assert len(lines) == SLOWED_CELLS and all("'fused'" in line for line in lines), lines
