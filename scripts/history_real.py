#!/usr/bin/env python3
"""A real history for the report's regressions: in a scratch clone, eight commits (a base,
three that change no code, one that makes torch's fused backend 2x slower, three more
that change no code), each timed by ``asv run --record-samples`` on the tiny grid with the
suite's own settings, then ``mhabench report``; prints the report's verdict counts and how
many planted cells hold at their commit: the figures docs/regressions.md quotes.

    python scripts/history_real.py OUT [BENCH_REGEX]

Why 2x and eight commits: on these VMs about a third of fresh processes run 1.4-1.6x
slow for their whole life (one SDPA call, b2 h4 n32: 27 us in most processes, 37-44 us in
5 of 12, on either core, with address randomisation on or off), and a tiny-grid cell is
one process per commit. A 1.5x shift is then the size of that noise in every cell: in six
real histories of six or ten commits the report held it at its commit in two, placed it
a commit or more away in two and left it a candidate or noise in two. At 2x over eight
commits it held 17-18 of 18 cells at its commit in three of three, and four histories
without a plant held no shift (docs/regressions.md). CI's real history is the plug-in
repository's (tests/test_own_repo.py), with ``mhabench confirm`` on it.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the tests' scratch clones and plants

from support.scratch import ASV, asv_env, plant, same_code_commit, scratch_clone  # noqa: E402

from mhabench.analysis.history.regressions import CONFIRMED_VERDICTS  # noqa: E402

# The tiny grid's torch time_step cells of the loop, batched and fused backends in the
# sweep modules (48: 18 fused, 30 that the plant leaves alone), about 35 s of asv a commit;
# the design points, forced kernels and the reference layer left out.
# Sub-millisecond cells that scatter 10-25 % from process to process: the planted shift
# shows in the backend's cells together, hardly in one.
BENCHES = r"^bench_(?!design)\w+\.\w+\.time_step\('torch', '(loop|batched|fused)', "
PLANTED = ("torch", "fused")
# The commit that makes it slower, of COMMITS: four runs either side. A run whose cells a
# burst of the VM slowed together can read a backend 1.3-1.5x off at a commit that changed
# no code; with three runs a side, one such run beside the plant moved the shift a commit.
COMMITS = 8
PLANTED_AT = 4
EXTRA = 1.0  # the plant spins for this share of the step's own time: 2x slower


@dataclass
class History:
    repo: Path
    results: Path
    commits: list[str]
    env: dict[str, str]

    def mhabench(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``mhabench`` run in the scratch clone with its own copy of the package."""
        return subprocess.run([sys.executable, "-m", "mhabench.cli", *args], cwd=self.repo,
                              env=self.env, capture_output=True, text=True, timeout=1800)

    def report(self, out: Path) -> pd.DataFrame:
        done = self.mhabench("report", "--results", str(self.results), "--out", str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        # commits as text: a short hash such as 3e419554 reads as a number otherwise
        return pd.read_csv(out.with_name(out.stem + "_tables") / "regressions--shifts.csv",
                           dtype={"shift at commit": str, "previous commit": str})


def build_history(tmp: Path, home: dict[str, str], benches: str = BENCHES) -> History:
    repo, base = scratch_clone(tmp)
    commits = [base, *(same_code_commit(repo, f"before {i}") for i in range(1, PLANTED_AT)),
               plant(repo, {PLANTED}, EXTRA, f"torch fused {1 + EXTRA:g}x slower"),
               *(same_code_commit(repo, f"after {i}") for i in range(PLANTED_AT + 1, COMMITS))]
    # Only torch is imported up front (the cells' framework, as the gate's rounds do):
    # 5 s less of every commit's forkserver start and of asv's discovery.
    env = asv_env(home, MHABENCH_GRID="tiny", MHABENCH_LOAD_DIR=str(tmp / "load"),
                  MHABENCH_PREIMPORT="torch")
    done = subprocess.run([*ASV, "run", "--record-samples", "--machine", "pytest-machine",
                           "--show-stderr", "-b", benches, f"{base}^..{commits[-1]}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return History(repo, tmp / "results", commits, env)


def planted(table: pd.DataFrame) -> pd.Series:
    return table["cell"].str.contains(f"framework={PLANTED[0]}, backend={PLANTED[1]},",
                                      regex=False)


def _planted_cells(history: History) -> int:
    """How many time_step cells of the planted backend the history timed."""
    from mhabench.analysis.results import load_results

    frame = load_results(history.results).frame
    rows = frame[(frame["kind"] == "time") & (frame["framework"] == PLANTED[0])
                 & (frame["backend"] == PLANTED[1])]
    return rows["cell"].nunique()


def main(out: str, benches: str) -> None:
    import os

    tmp = Path(out)
    tmp.mkdir(parents=True)
    home = {"HOME": str(tmp / "home"), "MHABENCH_THREADS": "1"}
    (tmp / "home").mkdir()
    subprocess.run([*ASV, "machine", "--machine", "pytest-machine", "--yes"],
                   env={**os.environ, **home}, check=True, capture_output=True)
    history = build_history(tmp, home, benches)
    table = history.report(tmp / "report.html")
    print(table["verdict"].value_counts().to_string())
    at = table["shift at commit"] == history.commits[PLANTED_AT][:8]
    print("planted cells:", _planted_cells(history), "confirmed at their commit:",
          int((planted(table) & at & table["verdict"].isin(CONFIRMED_VERDICTS)).sum()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ".")
