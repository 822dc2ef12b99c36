"""Did this commit regress? Fresh processes of both commits, interleaved, judged with the
process as the unit of evidence.

1. **Screen**: ``asv run --interleave-rounds`` of both commits in :data:`SCREEN_ROUNDS`
   rounds over the chosen benchmarks, a fresh process per cell, commit and round taking
   exactly :data:`~mhabench.compare.rounds.SAMPLES` samples; asv reverses the commits' order
   every other round, so a slow stretch of the machine falls on both. Each process's median
   is one value (:mod:`mhabench.compare.rounds`); a cell whose ratio (the factor that lines
   up the two sides' levels) leans past :data:`SCREEN_FACTOR` either way is passed on
   (:mod:`mhabench.analysis.comparisons.process_compare`).
2. **Confirm**: every cell passed on runs again from scratch in :data:`CONFIRM_ROUNDS`
   rounds. It is a change only where the confirmation's bootstrap interval clears 1.0, its
   ratio passes :data:`FACTOR`, and it leans the way the screen did: ``SLOWER 1.27x [1.18,
   1.36]`` (exit status 1), ``faster ...``, else ``cleared``.

A benchmark that ran on the base commit and fails on the head is a regression too,
reported from the screen (``FAILED``).

Why processes: some fresh processes run 1.25-1.9x slow for their whole life while samples
within a process agree, and asv's Mann-Whitney test pools a side's samples as if they were
independent. Lining up the sides' levels sets the slow mode apart and compares a cell with
a fast mode like with like; a shift of its modes' mix is reported on its own (``modes``)
(``docs/gate.md`` has the rates, ``scripts/gate_design.py`` replays the design).

Each gate run keeps its results in a new folder of its own (``.asv/gate/<UTC time>/screen``
and ``confirm``, with the asv config and the commits it ran), never in ``.asv/results``:
results are only ever added to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mhabench.analysis.comparisons.process_compare import (
    FACTOR,
    SCREEN_FACTOR,
    Comparison,
    compare,
    lean,
    two_stage,
)
from mhabench.compare.rounds import (
    CONFIRM_ROUNDS,
    SCREEN_ROUNDS,
    cell_pattern,
    commit_rounds,
    preimport,
    resolve,
)

__all__ = ["CONFIRM_ROUNDS", "FACTOR", "SCREEN_FACTOR", "SCREEN_ROUNDS", "Change", "Verdict",
           "cell_pattern", "confirm", "gate", "preimport"]
GATE_DIR = Path(".asv") / "gate"
SCREEN_MIX = 0.25  # a screen whose modes' mix differs at Fisher's p below this passes it on


@dataclass(frozen=True)
class Change:
    """One cell's comparison of the two commits."""

    # "+": slower, "-": faster (the screen's lean, or the confirmed way); "!": ran on the
    # base commit and fails on the head; "~": its processes mix the cell's modes differently
    mark: str
    cell: str  # benchmark name with its parameters, as asv prints it
    ratio: float | None  # head / base: the factor that lines up the two sides' levels
    low: float | None = None  # the ratio's 95 % interval (bootstrap over processes)
    high: float | None = None
    modes: str = ""  # the cell's modes and their shares, where it has two or more

    @staticmethod
    def of(cell: str, mark: str, result: Comparison) -> Change:
        return Change(mark, cell, result.ratio, result.low, result.high,
                      result.describe_modes() if len(result.modes) > 1 else "")


@dataclass
class Verdict:
    screened: list[Change]  # passed on by the screen, marked the way they leaned
    # changed in the fresh rounds, the way the screen leaned
    confirmed: list[Change] = field(default_factory=list)
    failed: list[Change] = field(default_factory=list)  # ran before, fails after
    # the level unchanged, the processes' mix of its modes shifted (information, no verdict)
    mixed: list[Change] = field(default_factory=list)
    folder: Path | None = None

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.confirmed if c.mark == "+"] + self.failed


@dataclass
class Evidence:
    """Each side's process medians of one cell; None for a side where it failed."""

    base: list[float] | None
    head: list[float] | None

    def compared(self) -> Comparison | None:
        if not self.base or not self.head or len(self.base) < 2 or len(self.head) < 2:
            return None
        return compare(self.base, self.head)


def project(root: Path) -> Path:
    """``root``, which must hold the project's asv.conf.json (ValueError naming it)."""
    root = Path(root)
    if not (root / "asv.conf.json").is_file():
        raise ValueError(f"{str(root)!r} has no asv.conf.json: run the gate from the "
                         "project's root")
    return root


def rounds(base: str, head: str, benches: Sequence[str], count: int, folder: Path, *,
           asv_args: Sequence[str] = (), root: Path = Path("."),
           echo: Callable[[str], None] = print) -> dict[str, Evidence]:
    """``count`` interleaved rounds of both commits (full hashes) on ``benches`` (asv -b
    regexes; all when empty), asv's config and results in ``folder`` (new); each cell's
    process medians per commit, keyed by cell (and environment, where there are several)."""
    timed = commit_rounds([base, head], benches, count, folder, asv_args=asv_args,
                          root=root, echo=echo)
    return {cell: Evidence(by[base], by[head]) for cell, by in timed.items()
            if base in by and head in by}


def gate(base: str, head: str, benches: Sequence[str] = (), *,
         asv_args: Sequence[str] = (), root: Path = Path("."),
         echo: Callable[[str], None] = print) -> Verdict:
    """Screen ``base`` against ``head`` on ``benches`` (asv -b regexes; all when empty),
    then confirm each cell it passes on with fresh rounds. ``asv_args`` go to both ``asv
    run`` calls (e.g. ``--machine``). Raises ValueError if ``root`` has no asv.conf.json
    or a commit is unknown."""
    root = project(root)
    base, head = resolve(root, base), resolve(root, head)
    folder = (root / GATE_DIR / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")).resolve()
    evidence = rounds(base, head, benches, SCREEN_ROUNDS, folder / "screen",
                      asv_args=asv_args, root=root, echo=echo)
    verdict = Verdict([], folder=folder)
    screens: dict[str, Comparison] = {}
    for cell, seen in sorted(evidence.items()):
        if seen.base and seen.head is None:
            verdict.failed.append(Change("!", cell, None))
            continue
        result = seen.compared()
        if result is None:
            continue
        # passed on where its level leans, or the mix of its modes does (on 8 processes a
        # side a mix shift is a hint: the fresh ones decide)
        way = lean(result) or ("~" if result.mix_p is not None
                               and result.mix_p < SCREEN_MIX else "")
        if way:
            screens[cell] = result
            verdict.screened.append(Change.of(cell, way, result))
    if not screens:
        return verdict
    fresh = confirm_rounds(base, head, list(screens), folder / "confirm", asv_args=asv_args,
                           root=root, echo=echo)
    for cell, screen in screens.items():
        again = fresh[cell].compared() if cell in fresh else None
        said = two_stage(screen, again) if lean(screen) else "cleared"
        if said != "cleared":
            verdict.confirmed.append(Change.of(cell, "+" if said == "slower" else "-", again))
            continue
        # cleared: the mix of its modes judged on all its processes, screen's and fresh
        both = Evidence(*(None if not a or not b else [*a, *b] for a, b in zip(
            (evidence[cell].base, evidence[cell].head),
            (fresh.get(cell, Evidence(None, None)).base,
             fresh.get(cell, Evidence(None, None)).head), strict=True)))
        pooled = both.compared()
        if pooled is not None and pooled.mix_shifted:
            verdict.mixed.append(Change.of(cell, "~", pooled))
    return verdict


def confirm_rounds(base: str, head: str, cells: Sequence[str], folder: Path, *,
                   asv_args: Sequence[str] = (), root: Path = Path("."),
                   echo: Callable[[str], None] = print) -> dict[str, Evidence]:
    """The second stage's rounds: ``cells`` (asv's names with parameters) re-run from
    scratch at ``base`` and ``head`` in :data:`CONFIRM_ROUNDS` interleaved rounds of fresh
    processes, results in ``folder`` (new); each cell's process medians per side."""
    root = Path(root)
    if not (root / "asv.conf.json").is_file():
        raise ValueError(f"{str(root)!r} has no asv.conf.json: run from the project's root")
    base, head = resolve(root, base), resolve(root, head)
    evidence = rounds(base, head, [cell_pattern(c.split(" [")[0]) for c in cells],
                      CONFIRM_ROUNDS, Path(folder).resolve(), asv_args=asv_args, root=root,
                      echo=echo)
    if not any(cell in evidence for cell in cells):
        raise RuntimeError("the confirmation timed none of the cells it was given: asv "
                           f"names cells differently from -b ({cells[0]!r})")
    return evidence


def confirm(base: str, head: str, cells: Sequence[str], folder: Path, *,
            asv_args: Sequence[str] = (), root: Path = Path("."),
            echo: Callable[[str], None] = print) -> dict[str, Comparison]:
    """The second stage on its own (:func:`confirm_rounds`): each cell's comparison (a
    cell that failed on either side is left out)."""
    evidence = confirm_rounds(base, head, cells, folder, asv_args=asv_args, root=root,
                              echo=echo)
    return {cell: result for cell in cells if cell in evidence
            and (result := evidence[cell].compared()) is not None}
