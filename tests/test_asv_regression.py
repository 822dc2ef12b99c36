"""The regression gate, end to end, on a real module of the suite with its shipped settings:
in a scratch clone, the README's command (``mhabench gate``: interleaved rounds of fresh
processes as a screen, fresh rounds to confirm each cell it passes on, each process's
median one value), between a commit and one that makes torch's fused backend 1.25x
slower, flags that cell and not torch batched, whose code is the same at both commits: a
miss and a false flag in one run.

asv builds a virtualenv and installs each commit into it, as it does for users; to keep
CI fast the virtualenv borrows the running interpreter's site-packages (tests/support/scratch.py).
``python tests/test_asv_regression.py N DIR [CASE ...]`` repeats the gate on the quick
grid's head sweep (identical commits; fused 1.10x and batched 1.25x slower) N times and
prints one JSON line per run; ``scripts/gate_design.py --log`` reads the runs back (the
figures docs/gate.md quotes)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.scratch import (
    ASV,
    ROOT,
    asv_env,
    git,
    plant,
    same_code_commit,
    scratch_clone,
)

from mhabench.analysis.comparisons.process_compare import compare
from mhabench.compare.rounds import process_medians, read_cells, result_files

# A small real part of the suite at its shipped (quick) settings: bench_gqa's GQA cells
# (batch 2, n 512, d 256, 16 query heads over 4 key/value heads), 15-60 ms a step, torch's
# fused call and batched layout (the gate's rounds then import torch alone); asv's -b
# selects parameter cells by their repr.
TEST_CELLS = r"^bench_gqa\.MhaGqaMqa\.time_step\('torch', '(batched|fused)', 2, 512, 256, 16, 4, "
TEST_SLOWED = {("torch", "fused")}  # the test's slowdown: one cell of the two
TEST_EXTRA = 0.25


def gate_command() -> list[str]:
    """The README's "did this commit regress?" command (``mhabench gate ...``), without
    its two commits."""
    text = (ROOT / "README.md").read_text()
    line = re.search(r"^(mhabench gate\b[^\n#]*?)\s+main HEAD", text, re.MULTILINE)
    assert line, "README lost its regression gate command"
    return shlex.split(line.group(1))[2:]


@dataclass
class Scratch:
    repo: Path
    env: dict[str, str]
    base: str
    same: str
    torch_slowed: str  # torch fused alone 1.25x slower

    def gate(self, a: str, b: str, cells: str) -> GateRun:
        """The README's gate between commits a and b on ``cells``, run in the scratch clone
        as a user runs it (its own copy of mhabench, ``python -m mhabench.cli``)."""
        done = subprocess.run([sys.executable, "-m", "mhabench.cli", "gate", *gate_command(),
                               "--machine", "pytest-machine", "-b", cells, a, b],
                              cwd=self.repo, env=self.env, capture_output=True, text=True,
                              timeout=3600)
        return GateRun(done.returncode, done.stdout, done.stderr)

    def ratios(self, run: GateRun, a: str, b: str) -> dict[str, float]:
        """after/before of every cell the screen timed (its fast processes' medians, read
        back from the screen's own results): the noise the gate sees."""
        results = run.folder / "screen" / "results"
        before, after = (read_cells(next(iter(result_files(results, git(
            self.repo, "rev-parse", c)).values()))) for c in (a, b))
        return {cell: compare(process_medians(s), process_medians(after[cell])).ratio
                for cell, s in before.items() if "time_step(" in cell and s and after.get(cell)}


@dataclass
class GateRun:
    code: int
    out: str
    err: str

    @property
    def folder(self) -> Path:
        return Path(re.search(r"results in (\S+)", self.out).group(1))

    def lines(self, word: str) -> list[str]:
        """The cells of the verdict's lines that start with ``word`` (SLOWER, faster,
        cleared)."""
        return [line.split(maxsplit=2)[-1] for line in self.out.splitlines()
                if line.startswith(word)]


def make_scratch(tmp: Path, home: dict[str, str]) -> Scratch:
    """The scratch clone (tests/support/scratch.py) with a commit that changes no code and, on top
    of it, torch's fused backend made 1.25x slower."""
    repo, base = scratch_clone(tmp)
    same = same_code_commit(repo, "Same code.")
    torch_slowed = plant(repo, TEST_SLOWED, TEST_EXTRA, "torch fused 1.25x slower")
    return Scratch(repo, asv_env(home, MHABENCH_GRID="quick"), base, same, torch_slowed)


def judge(run: GateRun, planted: set[tuple[str, str]]) -> tuple[int, int, int]:
    """(false regressions, misses, false improvements) of one gate run: a confirmed
    "SLOWER" on a cell that was not slowed is false, every slowed cell (of ``planted``)
    must be confirmed slower, and no cell got faster."""
    assert run.code in (0, 1) and "mhabench gate:" in run.out, (run.out + run.err)[-3000:]
    slower = run.lines("SLOWER")
    hits = [c for c in slower if any(f"('{f}', '{b}'" in c for f, b in planted)]
    misses = len(planted) - len(hits)
    assert (run.code == 1) == bool(slower), run.out  # exit status 1 = a regression
    return len(slower) - len(hits), misses, len(run.lines("faster"))


@pytest.mark.slow
@pytest.mark.timing
def test_gate_flags_exactly_the_slowed_backend(tmp_path: Path, asv_home) -> None:
    """torch fused 1.25x slower: that cell is flagged SLOWER; torch batched, whose code is
    the same at both commits, is not flagged, and nothing reads faster. (Identical commits,
    1.10x and 1.25x are measured by ``python tests/test_asv_regression.py N DIR``; the
    rates are in docs/gate.md.)"""
    scratch = make_scratch(tmp_path, asv_home)
    run = scratch.gate(scratch.same, scratch.torch_slowed, TEST_CELLS)
    print("torch fused 1.25x:", run.out)
    assert judge(run, planted=TEST_SLOWED) == (0, 0, 0), (
        run.out + run.err[-3000:])
    assert len(scratch.ratios(run, scratch.same, scratch.torch_slowed)) == 2  # TEST_CELLS
    assert run.folder.is_relative_to(scratch.repo / ".asv" / "gate")
    assert not (tmp_path / "results").exists()  # the configured results_dir: untouched


# The repeated runs (``main``): the quick grid's head sweep, which no test here gates on,
# torch alone (its rounds import torch only): four backends at two head counts, fused made
# 1.10x and batched 1.25x slower in one commit, reference and loop unchanged.
REPEAT_CELLS = (r"^bench_heads\.HeadsAtFixedWidth\.time_step\('torch', "
                r"'(fused|batched|reference|loop)', 2, 512, 256, (8|64), ")
FOUR_CELLS = (r"^bench_heads\.HeadsAtFixedWidth\.time_step\('torch', '(fused|batched)', "
              r"2, 512, 256, (8|64), ")
# The rounds cases: the head sweep's cells and the GQA/MQA cells of torch batched and fused
# (b2 n512 d256 h16, kv 16/4/1), which can land in a fast mode, timed together.
GQA_CELLS = (r"^bench_gqa\.MhaGqaMqa\.time_step\('torch', '(batched|fused)', 2, 512, 256, "
             r"16, (16|4|1), ")
MIXED = {("torch", "fused"): 0.10, ("torch", "batched"): 0.25}
FUSED = {("torch", "fused"): 0.10}
ROUNDS = 20  # a rounds case: the gate's screen (8) and confirmation (12) in one run


def main(repeats: int, keep: Path, only: list[str]) -> None:
    """Repeat the cases (or those named in ``only``) and print one JSON line per run: its
    verdict lines, exit status and seconds; every run's folder stays in ``keep`` for
    ``scripts/gate_design.py --log`` to read back. Gate cases: "identical" (two commits
    of the same code, the eight head-sweep cells), "mixed" (fused 1.10x and batched 1.25x
    slower, the same cells) and "four" (the mixed commit on fused and batched alone: the
    gate's time for four cells). Rounds cases (20 interleaved rounds of every cell, no
    verdict: replays split them into a screen and a confirmation): "rounds-identical" and
    "rounds-fused" (torch fused 1.10x slower), on the head sweep and the GQA cells."""
    import time


    keep.mkdir(parents=True, exist_ok=True)
    home = keep / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "MHABENCH_THREADS": "1"}
    subprocess.run([*ASV, "machine", "--machine", "pytest-machine", "--yes"],
                   env={**os.environ, **env}, check=True, capture_output=True, cwd=ROOT)
    scratch_dir = keep / f"scratch-{time.strftime('%Y%m%dT%H%M%S')}"
    scratch_dir.mkdir()
    scratch = make_scratch(scratch_dir, env)
    git(scratch.repo, "checkout", "-q", scratch.same)
    mixed = plant(scratch.repo, MIXED, None, "fused 1.10x, batched 1.25x slower")
    git(scratch.repo, "checkout", "-q", scratch.same)
    fused = plant(scratch.repo, FUSED, None, "torch fused 1.10x slower")
    cases = {"identical": (scratch.base, scratch.same, REPEAT_CELLS, {}),
             "mixed": (scratch.same, mixed, REPEAT_CELLS, MIXED),
             "four": (scratch.same, mixed, FOUR_CELLS, MIXED),
             "rounds-identical": (scratch.base, scratch.same, None, {}),
             "rounds-fused": (scratch.same, fused, None, FUSED)}
    for repeat in range(repeats):
        for case, (a, b, cells, planted) in cases.items():
            if (only and case not in only) or (not only and case.startswith("rounds")):
                continue
            start = time.monotonic()
            line = {"case": case, "run": repeat, "base": a, "head": b,
                    "planted": {"/".join(k): 1 + v for k, v in planted.items()}}
            if cells is None:  # a rounds case: the gate's own rounds, in the scratch clone
                folder = keep / f"{case}-{repeat}-{time.strftime('%H%M%S')}"
                code = ("from pathlib import Path; from mhabench.compare.rounds import "
                        f"commit_rounds; commit_rounds([{a!r}, {b!r}], "
                        f"{[REPEAT_CELLS, GQA_CELLS]!r}, {ROUNDS}, Path({str(folder)!r}), "
                        "asv_args=['--machine', 'pytest-machine'], echo=lambda s: None)")
                done = subprocess.run([sys.executable, "-c", code], cwd=scratch.repo,
                                      env=scratch.env, capture_output=True, text=True)
                assert done.returncode == 0, done.stderr[-3000:]
                line.update(folder=str(folder), exit=0)
            else:
                run = scratch.gate(a, b, cells)
                assert run.code in (0, 1), (run.out + run.err)[-3000:]
                line.update(folder=str(run.folder), exit=run.code, lines=[
                    x for x in run.out.splitlines()
                    if x.split(" ")[0] in ("SLOWER", "faster", "cleared", "FAILED", "modes")])
            line["seconds"] = round(time.monotonic() - start)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2,
         Path(sys.argv[2]) if len(sys.argv) > 2 else Path("gate-runs"), sys.argv[3:])
