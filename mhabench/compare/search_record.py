"""What a culprit search found, as ``bisect.json`` keeps it: its stages (the asv runs it
spent), the culprits (commits that changed cells, against their parents) and the search as a
whole (:class:`mhabench.compare.bisect.Bisect` fills them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mhabench.analysis.comparisons.process_compare import Comparison


@dataclass
class Stage:
    """One stage's asv runs: the commits and cells it timed, its rounds, its time."""

    name: str
    commits: list[str]
    cells: list[str]
    rounds: int = 0
    seconds: float = 0.0
    folders: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "commits": self.commits, "cells": self.cells,
                "rounds": self.rounds, "seconds": round(self.seconds, 1),
                "folders": self.folders}


@dataclass
class Culprit:
    """A commit that changed some cells, against the commit before it."""

    commit: str
    before: str
    subject: str
    cells: dict[str, Comparison]
    # commits between ``before`` and ``commit`` skipped because they failed to run: the
    # change is in one of them or in ``commit``
    skipped: list[str] = field(default_factory=list)
    kernels: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    unclear: bool = False  # a probe ran out of rounds before a half was clear
    unconfirmed: list[str] = field(default_factory=list)  # cells fresh rounds read unchanged

    @property
    def ratio(self) -> float:
        """The geometric mean of its cells' ratios."""
        return math.exp(sum(math.log(c.ratio) for c in self.cells.values()) / len(self.cells))

    def as_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "before": self.before, "subject": self.subject,
                "ratio": self.ratio, "cells": {k: v.as_dict() for k, v in self.cells.items()},
                "skipped": self.skipped, "unclear": self.unclear,
                "unconfirmed": self.unconfirmed,
                "kernels": {k: list(v) for k, v in self.kernels.items()}}


@dataclass
class Search:
    """A whole search: its range, the cells that differ at its ends, its culprits."""

    commits: list[str]
    folder: Path
    changed: dict[str, Comparison] = field(default_factory=dict)
    culprits: list[Culprit] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    skipped: set[str] = field(default_factory=set)
    lost: list[str] = field(default_factory=list)  # stretches whose change did not recur
    # commits the probes pointed at whose fresh rounds found no cell changed
    cleared: list[Culprit] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def probes(self) -> int:
        return sum(s.name.startswith("probe") for s in self.stages)

    @property
    def rounds(self) -> int:
        return sum(s.rounds for s in self.stages)

    def as_dict(self) -> dict[str, Any]:
        return {"good": self.commits[0], "bad": self.commits[-1], "commits": self.commits,
                "changed": {k: v.as_dict() for k, v in self.changed.items()},
                "culprits": [c.as_dict() for c in self.culprits],
                "cleared": [c.as_dict() for c in self.cleared],
                "stages": [s.as_dict() for s in self.stages], "skipped": sorted(self.skipped),
                "lost": self.lost, "probes": self.probes, "rounds": self.rounds,
                "seconds": round(self.seconds, 1)}
