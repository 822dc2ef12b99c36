"""Rounds of fresh asv processes, read back as one median per process.

The gate (two commits in one environment) and the versions comparison (one commit in two
environments) time their cells the same way: ``asv run --interleave-rounds
--record-samples -a repeat=SAMPLES``, each round a fresh process per cell and side, the
sides' order alternating from round to round (asv reverses the commits every other round;
the versions comparison runs its environments in both orders). asv appends each round's
samples to the cell's earlier ones, so with a fixed count per process every ``SAMPLES``
consecutive samples are one process, and its median is one unit of evidence
(:mod:`mhabench.analysis.comparisons.process_compare`).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mhabench.core.config import FRAMEWORKS

SCREEN_ROUNDS = 8  # processes a side for every cell
CONFIRM_ROUNDS = 12  # fresh processes a side for each cell the screen passes on
# Samples per process, exactly: the count is what tells the processes apart in asv's
# results. Samples of one process agree within a few per cent, so more of them buy little.
SAMPLES = 5


def run_asv(config: Path, args: Sequence[str], env: dict[str, str], root: Path,
            echo: Callable[[str], None]) -> tuple[int, str]:
    """``asv run --config config *args`` in ``root``; (exit status, its log)."""
    cmd = [sys.executable, "-m", "asv", "run", "--config", str(config), *args]
    echo("$ " + " ".join(cmd))
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    echo(log)
    return done.returncode, log


def round_args(rounds: int) -> list[str]:
    """asv run's options for ``rounds`` interleaved rounds of fresh processes."""
    return ["--interleave-rounds", "--record-samples", "-a", f"rounds={rounds}",
            "-a", f"repeat={SAMPLES}"]


def result_files(results: Path, commit: str) -> dict[str, Path]:
    """The results files of ``commit`` (a full hash) under ``results``, by environment."""
    prefix = f"{commit[:8]}-"
    return {path.stem[len(prefix):]: path for path in sorted(results.glob(f"*/{prefix}*.json"))}


def read_cells(path: Path | None, kinds: tuple[str, ...] = ("time_",)) -> dict[str, Any]:
    """asv cell name -> its samples (time benchmarks: a list, None where the cell failed)
    or value (track benchmarks), for the benchmarks of ``kinds`` in one results file;
    cells asv skipped (n/a) are left out."""
    from mhabench.asvproject.result_files import cell_names, result_rows

    if path is None or not path.is_file():
        return {}
    data = json.loads(path.read_text())
    out: dict[str, Any] = {}
    for name, row in result_rows(data).items():
        if not name.rpartition(".")[2].startswith(kinds):
            continue
        values = row.get("result") or []
        samples = row.get("samples") or [None] * len(values)
        for cell, value, cell_samples in zip(cell_names(name, row), values, samples,
                                             strict=False):
            if isinstance(value, float) and math.isnan(value):
                continue  # n/a: a cell this grid or machine skips, on either side
            if name.rpartition(".")[2].startswith("time_"):
                out[cell] = None if value is None else (
                    cell_samples if isinstance(cell_samples, list) else [])
            else:
                out[cell] = value
    return out


def process_medians(samples: Sequence[float]) -> list[float]:
    """The median of each process's ``SAMPLES`` consecutive samples (a trailing partial
    process is left out)."""
    return [statistics.median(samples[start:start + SAMPLES])
            for start in range(0, len(samples) - SAMPLES + 1, SAMPLES)]


def cell_pattern(cell: str) -> str:
    """An ``asv -b`` regex that selects exactly ``cell`` ("name(params)")."""
    return "^" + re.escape(cell) + "$"


def resolve(root: Path, name: str) -> str:
    """The full hash of commit ``name`` in ``root``'s git repository (raises ValueError
    naming it when git knows no such commit)."""
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet",
                           f"{name}^{{commit}}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"{name!r} names no commit of {str(root)!r}; give a branch, tag or "
                         "hash (e.g. main, HEAD~1)")
    return done.stdout.strip()


def preimport(benches: Sequence[str]) -> list[str]:
    """The frameworks a round of ``benches`` (asv -b regexes) needs imported up front: the
    ones they name as a cell's first parameter (``('torch', ...``), both where one of them
    names neither (or none is given)."""
    named = [{f for f in FRAMEWORKS if f"'{f}'" in bench} for bench in benches]
    if not named or any(not found for found in named):
        return list(FRAMEWORKS)
    return sorted(set().union(*named), key=FRAMEWORKS.index)


def _run_commits(commits: Sequence[str], benches: Sequence[str], args: Sequence[str],
                 folder: Path, env_extra: dict[str, str], asv_args: Sequence[str],
                 root: Path, echo: Callable[[str], None]) -> dict[str, dict[str, Path]]:
    """One ``asv run`` of ``commits`` (a hash file) on ``benches`` with ``args``, its config
    and results in ``folder`` (new); each commit's results files by environment."""
    from mhabench.asvproject.asv_config import write_config
    from mhabench.measure.conditions.machine_load import LOAD_DIR_ENV

    config = write_config(root, folder)
    hashes = folder / "commits.txt"
    hashes.write_text("".join(f"{c}\n" for c in commits))
    args = [*args, *asv_args]
    for bench in benches:
        args += ["-b", bench]
    # Each round starts asv's forkserver for a few cells: import up front only the
    # frameworks the cells name, no compiler (mhabench/bench/common.py).
    env = {**os.environ, "MHABENCH_PREIMPORT": ",".join(preimport(benches)), **env_extra}
    # The rounds' machine-load records go beside their own config (machine_load's default),
    # never into a history's MHABENCH_LOAD_DIR: they are keyed by commit and cell, so a
    # confirmation's processes there would recast that cell's load in the history.
    env.pop(LOAD_DIR_ENV, None)
    code, log = run_asv(config, [*args, f"HASHFILE:{hashes}"], env, root, echo)
    files = {commit: result_files(folder / "results", commit) for commit in commits}
    if not any(files.values()):
        raise RuntimeError(f"asv run saved no results (exit status {code}): "
                           f"{log.strip()[-1500:]}")
    return files


def commit_rounds(commits: Sequence[str], benches: Sequence[str], count: int, folder: Path,
                  *, asv_args: Sequence[str] = (), root: Path = Path("."),
                  echo: Callable[[str], None] = print) -> dict[str, dict[str, list[float] | None]]:
    """``count`` interleaved rounds of ``commits`` (full hashes; asv reverses their order
    every other round) on ``benches`` (asv -b regexes; all when empty), asv's config and
    results in ``folder`` (new). Returns each cell's process medians per commit, None at a
    commit where it failed (or the commit failed to build); a cell not timed at a commit
    has no entry for it. Cells are keyed by name (and environment, where there are
    several)."""
    files = _run_commits(commits, benches, round_args(count), folder, {}, asv_args, root,
                         echo)
    envs = sorted({e for by_env in files.values() for e in by_env})
    out: dict[str, dict[str, list[float] | None]] = {}
    for commit, by_env in files.items():
        for env_name, path in by_env.items():
            for cell, samples in read_cells(path).items():
                key = f"{cell} [{env_name}]" if len(envs) > 1 else cell
                out.setdefault(key, {})[commit] = (None if samples is None
                                                   else process_medians(samples))
    return out


def commit_kernels(commits: Sequence[str], benches: Sequence[str], folder: Path, *,
                   asv_args: Sequence[str] = (), root: Path = Path("."),
                   echo: Callable[[str], None] = print) -> dict[str, dict[str, str | None]]:
    """The kernel each commit ran for the ``track_kernel`` cells of ``benches`` (one
    process each; recorded whatever the grid, ``MHABENCH_KERNELS=1``): cell -> commit ->
    kernel name, None where unknown."""
    from mhabench.core.kernel_codes import KERNEL_NAMES

    files = _run_commits(commits, benches, [], folder, {"MHABENCH_KERNELS": "1"}, asv_args,
                         root, echo)
    out: dict[str, dict[str, str | None]] = {}
    for commit, by_env in files.items():
        for path in by_env.values():
            for cell, code in read_cells(path, ("track_",)).items():
                known = isinstance(code, int | float) and code == code
                out.setdefault(cell, {})[commit] = KERNEL_NAMES.get(int(code)) if known else None
    return out
