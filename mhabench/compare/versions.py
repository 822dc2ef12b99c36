"""Did an upgrade slow my attention? One commit timed in two dependency sets, a verdict per
cell and the kernel each side ran.

asv pairs results only within one environment, so ``asv compare`` cannot answer this. Here
each side is an asv environment of its own (:mod:`mhabench.compare.sides`: the project's
matrix with the side's pins swapped in, or local packages installed beside it), and both
sides' results go, under their environments' names, into one new folder
``.asv/versions/<UTC time>/results``, never into ``.asv/results``.

1. **Build**: ``asv run --bench just-discover`` per side builds its environment and
   installs the project; the packages it pins are then read back from the environment
   (pip may have resolved another). Building and rounds: :mod:`.dependency_sets`.
2. **Screen**: :data:`SCREEN_ROUNDS` rounds (or ``rounds``), each one ``asv run`` per
   side (a fresh process per cell), the sides alternating ABBA; each process's appended
   samples give one median, one unit of evidence
   (:mod:`mhabench.analysis.comparisons.process_compare`).
3. **Confirm**: every cell whose screen ratio passes :data:`SCREEN_FACTOR` either way runs
   again in :data:`CONFIRM_ROUNDS` fresh rounds (or half as many again as ``rounds``). It
   is ``slower`` or ``faster`` only if the confirmation's interval clears 1.0, its ratio
   passes :data:`FACTOR`, and it leans the way the screen did; else ``cleared``. A cell
   measured on one side and failing on the other is ``failed on new`` (or ``failed on
   base``), a verdict like the others.
4. **Kernels and compile time**: one process per cell and side for ``track_kernel``
   (recorded whatever the grid, ``MHABENCH_KERNELS=1``), and for the compile-time cells
   (``bench_compile``) that ``-b`` selects: readings, not verdicts (one process a side
   carries none, and each takes a compile).

Everything is summed up in ``versions.json`` beside the results; ``mhabench report
--results <folder>/results`` reads it into its "Versions side by side" section.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mhabench.analysis.comparisons.process_compare import (
    FACTOR,
    SCREEN_FACTOR,
    compare,
    lean,
    two_stage,
)
from mhabench.analysis.comparisons.versions import SUMMARY
from mhabench.compare.dependency_sets import DependencySets
from mhabench.compare.rounds import CONFIRM_ROUNDS, SAMPLES, SCREEN_ROUNDS, cell_pattern
from mhabench.compare.sides import SIDES, parse_side

VERSIONS_DIR = Path(".asv") / "versions"


@dataclass
class Cell:
    """One timed cell's evidence and verdict."""

    name: str  # asv's cell name: "bench_x.Class.time_step(params)"
    processes: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: {stage: {s: [] for s in SIDES}
                                 for stage in ("screen", "confirm")})
    failed: set[str] = field(default_factory=set)  # sides where a process failed
    screen: dict[str, Any] | None = None
    confirm: dict[str, Any] | None = None
    verdict: str = ""
    kernel: dict[str, str | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        final = self.confirm or self.screen or {}
        kernels = [self.kernel.get(s) for s in SIDES]
        return {"cell": self.name, "verdict": self.verdict, "ratio": final.get("ratio"),
                "low": final.get("low"), "high": final.get("high"),
                "screen": self.screen, "confirm": self.confirm,
                "kernel_base": kernels[0], "kernel_new": kernels[1],
                "kernel_changed": None not in kernels and kernels[0] != kernels[1],
                "failed": sorted(self.failed), "processes": self.processes}


class Comparison:
    """One versions run: its folder, sides, commit and cells (see the module docstring)."""

    def __init__(self, base: str, new: str, benches: Sequence[str], *, grid: str = "quick",
                 machine: str | None = None, root: Path = Path("."),
                 echo: Callable[[str], None] = print, rounds: int | None = None) -> None:
        # ``rounds``: the screen's (default SCREEN_ROUNDS), the confirmation half as many again
        if rounds is not None and rounds < 2:
            raise ValueError(f"--rounds {rounds} is too few: a verdict needs 2 processes a "
                             f"side at least (default {SCREEN_ROUNDS})")
        self.screen_rounds = rounds or SCREEN_ROUNDS
        self.confirm_rounds = CONFIRM_ROUNDS if rounds is None else rounds * 3 // 2
        self.sides = {label: parse_side(label, text)
                      for label, text in zip(SIDES, (base, new), strict=True)}
        self.benches = list(benches)
        self.grid, self.echo = grid, echo
        self.folder = (Path(root).resolve() / VERSIONS_DIR
                       / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ"))
        self.sets = DependencySets(list(self.sides.values()), self.folder, self.benches,
                                   root=root, grid=grid, machine=machine, echo=echo)
        self.commit, self.results = self.sets.commit, self.sets.results
        self.configs: dict[str, Path] = {}
        self.cells: dict[str, Cell] = {}
        self.compile: dict[str, dict[str, float | None]] = {}
        self.seconds: dict[str, float] = {}
        self.checked = False

    def check(self) -> None:
        """Bad input before anything runs: each pin on the index (raises SideError)."""
        self.sets.check()
        self.checked = True

    def build(self) -> None:
        """Each side's environment, built on its own (so a failure names its side) and
        checked against its pins; then the two configs that run both, in either order."""
        self.folder.mkdir(parents=True)
        for label in SIDES:
            self.sets.build(label)
        self.configs["ab"], self.configs["ba"] = self.sets.orders(SIDES, self.folder,
                                                                  ("ab", "ba"))

    def _rounds(self, stage: str, rounds: int, only: Sequence[str] | None) -> None:
        """``rounds`` rounds of fresh processes, half with base first, half with new first
        (ABAB... then BABA...); each process's samples become one median. A cell that
        fails on a side is a verdict already: the second half leaves it out."""
        benches = [cell_pattern(c) for c in only] if only is not None else self.benches
        if not benches:
            return
        timed = self.sets.rounds((self.configs["ab"], self.configs["ba"]), SIDES, benches,
                                 rounds)
        for name, by in timed.items():
            cell = self.cells.setdefault(name, Cell(name))
            for side, medians in by.items():
                if medians is None:
                    cell.failed.add(side)
                else:
                    cell.processes[stage][side] += medians

    def _judge(self, cell: Cell, stage: str) -> dict[str, Any] | None:
        base, new = (cell.processes[stage][s] for s in SIDES)
        if len(base) < 2 or len(new) < 2:
            return None
        return compare(base, new).as_dict()

    def screen(self) -> list[str]:
        """The screen's rounds; returns the cells passed on to the confirmation."""
        self.echo(f"mhabench versions: screen, {self.screen_rounds} rounds")
        self._rounds("screen", self.screen_rounds, None)
        passed = []
        for cell in self.cells.values():
            cell.screen = self._judge(cell, "screen")
            if cell.failed:
                continue
            if cell.screen is None:
                cell.verdict = "not timed"
                continue
            if lean(_as_comparison(cell.screen)):
                passed.append(cell.name)
            else:
                cell.verdict = "unchanged"
        return passed

    def confirm(self, passed: Sequence[str]) -> None:
        if passed:
            self.echo(f"mhabench versions: confirmation of {len(passed)} cell(s), "
                      f"{self.confirm_rounds} rounds")
            self._rounds("confirm", self.confirm_rounds, passed)
        for name in passed:
            cell = self.cells[name]
            cell.confirm = self._judge(cell, "confirm")
            cell.verdict = two_stage(_as_comparison(cell.screen), _as_comparison(
                cell.confirm) if cell.confirm else None)

    def failures(self) -> None:
        for cell in self.cells.values():
            if cell.failed:
                cell.verdict = ("failed on both" if cell.failed == set(SIDES)
                                else f"failed on {next(iter(cell.failed))}")

    def kernels_and_compile(self) -> None:
        """track_kernel of every timed cell, and the compile-time cells ``-b`` selects,
        once per side: compile times are readings of one process a side, never judged."""
        kernels, self.compile = self.sets.kernels_and_compile(self.configs["ab"], SIDES,
                                                              list(self.cells))
        for cell in self.cells.values():
            cell.kernel = {side: kernels.get(cell.name, {}).get(side) for side in SIDES}

    def summary(self) -> dict[str, Any]:
        return {"commit": self.commit, "grid": self.grid, "benches": self.benches,
                "folder": str(self.folder),
                "sides": {label: {"text": side.text, "describe": side.describe(),
                                  "pins": side.pins,
                                  "local": [str(p) for p in side.local],
                                  "env_name": self.sets.env_names.get(label),
                                  "versions": self.sets.versions.get(label, {})}
                          for label, side in self.sides.items()},
                "settings": {"screen_rounds": self.screen_rounds,
                             "confirm_rounds": self.confirm_rounds,
                             "screen_factor": SCREEN_FACTOR, "factor": FACTOR,
                             "samples_per_process": SAMPLES},
                "seconds": self.seconds,
                "cells": [cell.as_dict() for cell in self.cells.values()],
                "compile_seconds": [{"cell": k, **v} for k, v in self.compile.items()]}

    def write(self) -> Path:
        path = self.folder / SUMMARY
        path.write_text(json.dumps(self.summary(), indent=1) + "\n")
        return path

    def run(self) -> dict[str, Any]:
        """All stages; returns the summary (also written to ``versions.json``)."""
        start = time.monotonic()
        if not self.checked:
            self.check()
        self.build()
        self.seconds["build"] = round(time.monotonic() - start, 1)
        passed = self.screen()
        self.seconds["screen"] = round(time.monotonic() - start - self.seconds["build"], 1)
        self.confirm(passed)
        self.seconds["confirm"] = round(time.monotonic() - start - self.seconds["build"]
                                        - self.seconds["screen"], 1)
        self.failures()
        self.kernels_and_compile()
        self.seconds["total"] = round(time.monotonic() - start, 1)
        self.write()
        return self.summary()


def _as_comparison(data: dict[str, Any]) -> Any:
    from mhabench.analysis.comparisons.process_compare import Comparison as Compared

    return Compared.from_dict(data)
