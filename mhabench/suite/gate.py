"""Did this commit regress? ``asv continuous`` run as a screen, then a confirmation.

1. **Screen**: ``asv continuous`` between the two commits in 8 interleaved rounds (a fresh
   process per cell and round, 3-8 samples each) over the chosen benchmarks, at factor
   1.07. It passes on every cell asv marks: "+" or "-" (significant), and "~" (the ratio is
   beyond 1.07 but asv's test does not call it).
2. **Confirm**: every cell passed on runs again from scratch in 16 interleaved rounds of
   3-6 samples (``asv continuous -b`` those cells) at factor 1.12. Only a cell that asv
   flags there ("+" or "-"), the way the screen leaned, is a change.

A benchmark that ran on the base commit and fails on the head (asv's "!") is a regression
too, reported from the screen.

Why two stages: on a shared VM a cell's per-process medians spread by 1.3-2.8x across fresh
processes (``scripts/gate_design.py``), in episodes that last a few processes, and asv's
Mann-Whitney test pools a side's samples as if they were independent. Eight rounds a side
then flag some unchanged cell of six in about one run of six, and miss a 1.25x slowdown of
a noisy cell in up to 30 % of runs. More samples per round do not help, more rounds do:
16 rounds for every cell would double the gate's time, but only the cells whose ratio
already leans one way need them. Replayed on 36 processes per cell of six cells
(``scripts/gate_design.py --gate 8x3 1.07 16x3``): an unchanged cell is flagged in at
most 1.8 % of runs, and a 1.25x slowdown is missed in at most 12 % (a 1.5x never).

Both stages use asv's own commands, statistics and ``--factor``; the verdict is asv's table
from the confirmation. Each gate run stores its results in a new folder of its own
(``.asv/gate/<UTC time>/screen`` and ``confirm``), never in ``.asv/results``: ``asv
continuous`` would replace the samples stored there for both commits (the main job's
among them), and results are only ever added to.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mhabench.core.config import FRAMEWORKS
from mhabench.measure.machine_load import LOAD_DIR_ENV
from mhabench.suite.asv_config import write_config

FACTOR = 1.12  # a change: asv's test significant and the ratio beyond this (confirmation)
# The screen passes on every cell whose ratio asv marks beyond this, significant or not
# ("~"): a 1.25x slowdown often is not significant in 8 rounds here, but its ratio is there.
SCREEN_FACTOR = 1.07
SCREEN = ("--interleave-rounds", "--no-only-changed", "-a", "rounds=8",
          "-a", "repeat=(3,8,0.4)")
# --no-only-changed: the rows of unchanged cells too (mhabench confirm records their ratio)
CONFIRM = ("--interleave-rounds", "--no-only-changed", "-a", "rounds=16",
           "-a", "repeat=(3,6,0.3)")
CONFIRM_ROUNDS = 16
GATE_DIR = Path(".asv") / "gate"
# asv continuous's closing line when it compared the two commits.
VERDICT_LINES = ("BENCHMARKS NOT SIGNIFICANTLY CHANGED.",
                 "SOME BENCHMARKS HAVE CHANGED SIGNIFICANTLY.")


@dataclass(frozen=True)
class Change:
    """One row of asv's comparison table."""

    # "+": slower (a regression), "-": faster, both significant and beyond the factor;
    # "~": beyond the factor but not significant (asv prints it before the ratio); "": within
    mark: str
    cell: str  # benchmark name with its parameters, as asv prints it
    ratio: float | None  # after / before

    @property
    def lean(self) -> str:
        """The way the row points: "+" (slower) or "-" (faster); "" for none."""
        if self.mark in ("+", "-"):
            return self.mark
        if self.mark == "~" and self.ratio is not None and self.ratio != 1:
            return "+" if self.ratio > 1 else "-"
        return ""


@dataclass
class Verdict:
    screened: list[Change]  # passed on by the screen (marked "+", "-" or "~")
    # flagged by the fresh rounds, the way the screen leaned
    confirmed: list[Change] = field(default_factory=list)
    failed: list[Change] = field(default_factory=list)  # ran before, fails after ("!")
    folder: Path | None = None

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.confirmed if c.mark == "+"] + self.failed


def table_rows(text: str) -> list[Change]:
    """Every row of ``asv continuous``/``compare``'s table (| Change | Before | After |
    Ratio | Benchmark (Parameter) |), the header included; ``mark`` is "+", "-", "~" (asv's
    "~" before a ratio beyond the factor that is not significant) or blank, ``ratio`` None
    where asv prints none (n/a, failed)."""
    out = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if not line.startswith("|") or len(cols) < 7:
            continue
        mark, ratio_text = cols[1], cols[4]
        if ratio_text.startswith("~"):
            mark, ratio_text = mark or "~", ratio_text[1:]
        try:
            ratio: float | None = float(ratio_text)
        except ValueError:
            ratio = None
        out.append(Change(mark, cols[5], ratio))
    return out


def changed_rows(text: str, marks: str = "+-") -> list[Change]:
    """The rows of asv's table marked "+" or "-" (or any of ``marks``)."""
    return [row for row in table_rows(text) if row.mark and row.mark in marks]


def cell_pattern(cell: str) -> str:
    """An ``asv -b`` regex that selects exactly ``cell`` ("name(params)")."""
    return "^" + re.escape(cell) + "$"


def _config(root: Path, folder: Path, stage: str) -> Path:
    """The project's asv.conf.json with results and HTML in ``folder/stage`` (new)."""
    return write_config(root, folder / stage)


def _continuous(config: Path, options: Sequence[str], factor: float,
                benches: Sequence[str], base: str, head: str, extra: Sequence[str],
                root: Path, echo: Callable[[str], None]) -> str:
    cmd = [sys.executable, "-m", "asv", "continuous", "--config", str(config), *options,
           "--factor", str(factor), *extra]
    for bench in benches:
        cmd += ["-b", bench]
    cmd += [base, head]
    echo("$ " + " ".join(cmd))
    # Each round starts asv's forkserver for a few cells: import up front only the
    # frameworks the cells name, no compiler (suite/bench/common.py): 3-6 s a start.
    env = {**os.environ, "MHABENCH_PREIMPORT": ",".join(preimport(benches))}
    # The rounds' machine-load records go beside their own config (machine_load's default),
    # never into a history's MHABENCH_LOAD_DIR: they are keyed by commit and cell, so a
    # confirmation's 32 processes there would recast that cell's load in the history.
    env.pop(LOAD_DIR_ENV, None)
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    echo(log)
    # Exit status 1 is both "a regression" and a failure: asv's closing line tells them apart.
    if done.returncode not in (0, 1) or not any(line in log for line in VERDICT_LINES):
        raise RuntimeError(f"asv continuous failed (exit status {done.returncode}): "
                           f"{log[-1500:]}")
    return log


def preimport(benches: Sequence[str]) -> list[str]:
    """The frameworks a round of ``benches`` (asv -b regexes) needs imported up front: the
    ones they name as a cell's first parameter (``('torch', ...``), both where one of them
    names neither (or none is given)."""
    named = [{f for f in FRAMEWORKS if f"'{f}'" in bench} for bench in benches]
    if not named or any(not found for found in named):
        return list(FRAMEWORKS)
    return sorted(set().union(*named), key=FRAMEWORKS.index)


def gate(base: str, head: str, benches: Sequence[str] = (), *,
         asv_args: Sequence[str] = (), root: Path = Path("."),
         echo: Callable[[str], None] = print) -> Verdict:
    """Screen ``base`` against ``head`` on ``benches`` (asv -b regexes; all when empty),
    then confirm each cell it passes on with fresh rounds. ``asv_args`` go to both ``asv
    continuous`` calls (e.g. ``--machine``). Raises ValueError if ``root`` has no
    asv.conf.json."""
    root = Path(root)
    if not (root / "asv.conf.json").is_file():
        raise ValueError(f"{str(root)!r} has no asv.conf.json: run the gate from the "
                         "project's root")
    folder = (root / GATE_DIR / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")).resolve()
    screen = _continuous(_config(root, folder, "screen"), SCREEN, SCREEN_FACTOR, benches,
                         base, head, asv_args, root, echo)
    verdict = Verdict(changed_rows(screen, "+-~"), failed=changed_rows(screen, "!"),
                      folder=folder)
    if not verdict.screened:
        return verdict
    rows = confirm(base, head, [c.cell for c in verdict.screened], folder / "confirm",
                   asv_args=asv_args, root=root, echo=echo)
    # A flag against the screen's lean is noise in one of the two stages, not a change:
    # counting it would double the false flags (either way) and catch no real change.
    leans = {c.cell: c.lean for c in verdict.screened}
    verdict.confirmed = [row for row in rows if row.mark and leans.get(row.cell) == row.mark]
    return verdict


def confirm(base: str, head: str, cells: Sequence[str], folder: Path, *,
            asv_args: Sequence[str] = (), root: Path = Path("."),
            echo: Callable[[str], None] = print) -> list[Change]:
    """The second stage on its own: ``cells`` (asv's names with parameters) re-run from
    scratch at ``base`` and ``head`` in 16 interleaved rounds of fresh processes, results in
    ``folder`` (new). Returns asv's table rows for them ("+"/"-": changed beyond
    :data:`FACTOR` and significant; "~" or blank: not)."""
    root = Path(root)
    if not (root / "asv.conf.json").is_file():
        raise ValueError(f"{str(root)!r} has no asv.conf.json: run from the project's root")
    folder = Path(folder).resolve()
    text = _continuous(_config(root, folder.parent, folder.name), CONFIRM, FACTOR,
                       [cell_pattern(c) for c in cells], base, head, asv_args, root, echo)
    rows = table_rows(text)
    if not any(row.ratio is not None or row.mark for row in rows) and (
            "no benchmarks" in text.lower()):
        raise RuntimeError("the confirmation selected no benchmark: asv's table names "
                           f"cells differently from -b ({cells[0]!r})")
    return [row for row in rows if row.cell in set(cells)]
