"""Which release changed a cell? One commit timed in every dependency set of an ordered
list (a package's releases), or searched through the list.

Each set is an asv environment (:mod:`.sides`; built and timed by
:mod:`.dependency_sets`), labelled by the versions that tell the sets apart; a list is
given set by set, or as a range of a package's releases on the index
(:func:`~.sides.release_range`). All of it goes into a new folder
``.asv/releases/<UTC time>``, never ``.asv/results``.

- **Sweep** (:meth:`Releases.sweep`): every set built, then :data:`SWEEP_ROUNDS` rounds of
  all of them, their order forward then reversed, a fresh process per cell and set each
  round, one median per process. Per cell its time at each release and each adjacent pair
  compared (:mod:`mhabench.analysis.comparisons.releases`), then the kernel each set ran and the
  compile-time cells ``-b`` selects (one process a set: readings, no verdict).
  ``releases.json`` beside ``results`` holds it all; ``mhabench report`` reads it into
  "Across releases".
- **Search** (:meth:`Releases.search`): :class:`~.bisect.Bisect` over the list: the first
  and last set compared, then middles, building only the sets it probes; a middle set that
  fails to install is skipped as a commit that fails to build is. ``search/`` holds its
  ``bisect.json`` and ``history/results``.

Twelve rounds: a sweep has no second stage, so each verdict rests on as many processes as
the gate's confirmation, the stage whose interval makes the gate's verdicts (a 1.10x
change caught in 20 of 20 cell-runs there, no unchanged cell flagged in 100; with 6 rounds
16 of 20). The screen's 8 rounds only pick the cells to look at again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mhabench.analysis.comparisons.process_compare import FACTOR
from mhabench.analysis.comparisons.releases import SUMMARY, cell_summary, changes
from mhabench.compare.bisect import Bisect
from mhabench.compare.dependency_sets import DependencySets
from mhabench.compare.rounds import CONFIRM_ROUNDS, SAMPLES
from mhabench.compare.search_record import Search
from mhabench.compare.sides import (
    SideError,
    parse_side,
    project_requirements,
    release_range,
    set_labels,
)

RELEASES_DIR = Path(".asv") / "releases"
SWEEP_ROUNDS = CONFIRM_ROUNDS  # why: the module docstring
SEARCH_LEAST = 3  # the first set, the last and one between


class ReleaseError(ValueError):
    """A list of releases that cannot be swept or searched: too few sets, a selection that
    times nothing, a cell that fails at every release."""


class Releases:
    """One list of dependency sets of the checked-out commit (see the module docstring)."""

    def __init__(self, texts: Sequence[str], benches: Sequence[str], *, grid: str = "quick",
                 machine: str | None = None, root: Path = Path("."),
                 echo: Callable[[str], None] = print, least: int = 2,
                 left_out: Sequence[str] = (), span: dict[str, str] | None = None,
                 rounds: int | None = None) -> None:
        root = Path(root).resolve()
        if rounds is not None and rounds < 2:
            raise ReleaseError(f"--rounds {rounds} is too few: every set needs 2 processes "
                               f"at least (default {SWEEP_ROUNDS}; a search's batch 4)")
        self.rounds = rounds  # a sweep's rounds (SWEEP_ROUNDS), a search's batch
        if not (root / "asv.conf.json").is_file():
            raise SideError(f"{str(root)!r} has no asv.conf.json: run from the project's root")
        sides = [parse_side(str(i + 1), text, "set") for i, text in enumerate(texts)]
        if len(sides) < least:
            given = f" ({'; '.join(left_out)})" if left_out else ""
            raise ReleaseError(
                f"{len(sides)} dependency set(s) given{given}; "
                + ("a search needs at least 3 (the first, the last and one between; two "
                   "are compared by mhabench versions A B)" if least >= SEARCH_LEAST else
                   "a sweep needs at least 2 (each release a set, or --range PACKAGE "
                   "FIRST LAST)"))
        labels, self.varying = set_labels(sides, project_requirements(root))
        sides = [dataclasses.replace(side, label=label)
                 for side, label in zip(sides, labels, strict=True)]
        self.labels = labels
        self.left_out, self.span, self.echo, self.grid = list(left_out), span, echo, grid
        self.folder = root / RELEASES_DIR / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        self.sets = DependencySets(sides, self.folder, benches, root=root, grid=grid,
                                   machine=machine, echo=echo)
        self.seconds: dict[str, float] = {}
        self.checked = False

    @classmethod
    def from_range(cls, package: str, first: str, last: str, benches: Sequence[str], *,
                   root: Path = Path("."), echo: Callable[[str], None] = print,
                   **kwargs: Any) -> Releases:
        """The releases of ``package`` from ``first`` to ``last`` on the index, each with
        its companions (:func:`~.sides.release_range`); those left out are kept in
        :attr:`left_out`."""
        if not (Path(root) / "asv.conf.json").is_file():
            raise SideError(f"{str(root)!r} has no asv.conf.json: run from the project's root")
        texts, left_out = release_range(package, first, last, project_requirements(root))
        return cls(texts, benches, root=root, echo=echo, left_out=left_out,
                   span={"package": package, "first": first, "last": last}, **kwargs)

    def describe(self, label: str) -> str:
        """A set as people name it: its pins and local packages."""
        return self.sets.sides[label].describe()

    def check(self) -> None:
        """Bad input before anything runs: each pin on the index (raises SideError)."""
        self.sets.check()
        self.checked = True

    # -- the sweep -----------------------------------------------------------------------
    def sweep(self) -> dict[str, Any]:
        """Every set built and timed; returns the summary (also ``releases.json``)."""
        start = time.monotonic()
        if not self.checked:
            self.check()
        self.folder.mkdir(parents=True)
        for label in self.labels:  # one at a time: a failure names its set
            self.echo(f"mhabench releases: building {self.sets.sides[label].name} "
                      f"({self.describe(label)})")
            self.sets.build(label)
        self._selects_a_time_cell()
        self.seconds["build"] = round(time.monotonic() - start, 1)
        configs = self.sets.orders(self.labels, self.folder)
        rounds = self.rounds or SWEEP_ROUNDS
        self.echo(f"mhabench releases: {rounds} rounds of {len(self.labels)} sets")
        timed = self.sets.rounds(configs, self.labels, self.sets.benches, rounds)
        self.seconds["rounds"] = round(time.monotonic() - start - self.seconds["build"], 1)
        kernels, compiled = self.sets.kernels_and_compile(configs[0], self.labels, timed)
        self.seconds["total"] = round(time.monotonic() - start, 1)
        summary = self.summary({cell: cell_summary(cell, by, self.labels,
                                                   kernels.get(cell, {}))
                                for cell, by in sorted(timed.items())}, compiled)
        path = self.folder / SUMMARY
        path.write_text(json.dumps(summary, indent=1) + "\n")
        failing = [c["cell"] for c in summary["cells"] if len(c["failed"]) == len(c["processes"])]
        if failing:
            raise ReleaseError(f"{len(failing)} cell(s) fail at every release, so there is "
                               f"nothing to compare: {failing[0]}; narrow -b to cells that "
                               f"run (the others' times are in {path})")
        return summary

    def _selects_a_time_cell(self) -> None:
        from mhabench.asvproject.result_files import BENCHMARKS, selected_cells

        listing = json.loads((self.sets.results / BENCHMARKS).read_text())
        if not any(selected_cells(listing, name, self.sets.benches)
                   for name, entry in listing.items()
                   if isinstance(entry, dict) and entry.get("type") == "time"):
            raise ReleaseError(f"-b {' -b '.join(self.sets.benches)} selects no time cell of "
                               "the suite; give asv -b regexes that match some (e.g. "
                               "time_step)")

    def summary(self, cells: dict[str, dict[str, Any]],
                compiled: dict[str, dict[str, float | None]]) -> dict[str, Any]:
        sets = self.sets
        out = {"kind": "sweep", "commit": sets.commit, "grid": self.grid,
               "benches": sets.benches, "folder": str(self.folder),
               "package": self.varying[0] if self.varying else None, "range": self.span,
               "left_out": self.left_out,
               "releases": [{"label": label, "text": side.text, "describe": side.describe(),
                             "pins": side.pins, "local": [str(p) for p in side.local],
                             "env_name": sets.env_names.get(label),
                             "versions": sets.versions.get(label, {})}
                            for label, side in sets.sides.items()],
               "settings": {"rounds": self.rounds or SWEEP_ROUNDS, "factor": FACTOR,
                            "samples_per_process": SAMPLES},
               "seconds": self.seconds, "cells": list(cells.values()),
               "compile_seconds": [{"cell": c, "seconds": v} for c, v in compiled.items()]}
        out["changes"] = changes(out)
        return out

    # -- the search ----------------------------------------------------------------------
    def search(self) -> Search:
        """The culprit search over the list (raises SideError where an end fails to
        install, BisectError where a cell fails at an end)."""
        if len(self.labels) < SEARCH_LEAST:
            raise ReleaseError(f"{len(self.labels)} dependency sets given; a search needs at "
                               "least 3 (the first, the last and one between)")
        if not self.checked:
            self.check()
        self.folder.mkdir(parents=True)
        for label in (self.labels[0], self.labels[-1]):  # the ends must install
            self.sets.build(label)
        self._selects_a_time_cell()
        return Bisect(self.labels[0], self.labels[-1], self.sets.benches,
                      root=self.sets.root, echo=self.echo, rounds=self.sets.timed,
                      tracks=self.sets.kernels, points=self.labels, describe=self.describe,
                      folder=self.folder / "search",
                      **({"batch": self.rounds} if self.rounds else {})).run()
