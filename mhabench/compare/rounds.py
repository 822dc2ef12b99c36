"""Rounds of fresh asv processes, read back as one median per process.

The gate (two commits in one environment) and the versions comparison (one commit in two
environments) time their cells the same way: ``asv run --interleave-rounds
--record-samples -a repeat=SAMPLES``, each round a fresh process per cell and side, the
sides' order alternating from round to round (asv reverses the commits every other round;
the versions comparison runs its environments in both orders). asv appends each round's
samples to the cell's earlier ones, so with a fixed count per process every ``SAMPLES``
consecutive samples are one process, and its median is one unit of evidence
(:mod:`mhabench.analysis.process_compare`).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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
