"""Which commit changed a cell? A search between two commits with the gate's statistics.

``mhabench bisect GOOD BAD`` takes the first-parent commits from GOOD to BAD and:

1. **Ends**: times GOOD and BAD in interleaved rounds of fresh processes, as the gate does
   (:func:`ends`): a screen of :data:`FIRST_ROUNDS` rounds passes on each cell whose ratio
   leans past the gate's factor, and fresh rounds, :data:`CULPRIT_ROUNDS` first, then
   :data:`MORE_ROUNDS` at a time up to :data:`MAX_ROUNDS`, confirm it changed the same
   way (interval clear of 1, past the factor) or clear it. No confirmed cell: "no change".
2. **Probes**: a stretch of commits whose ends differ on some cells is cut at its middle,
   and the three commits are timed together in interleaved rounds (:func:`probe`). For each
   cell, a half whose own ends are confirmed changed holds a change; where one half holds
   the whole step (its interval beyond the step's square root) and the other none, the
   step is in the first. Rounds are added, :data:`MORE_ROUNDS` at a time, only while some
   cell's answer is unclear, so a 2x step costs a few rounds and a 1.10x one more. Both
   halves changed: both are followed, and each culprit is reported. A commit that fails to
   build or run is skipped, as ``git bisect skip`` does, and the probe moves beside it.
3. **Culprits**: two neighbouring commits whose cells differ name the later one, with the
   step's size and interval from the last probe's processes, the cells it moved and the
   kernel each side ran where it changed.

Every probe keeps its asv results in a folder of its own under ``.asv/bisect/<UTC time>``
(never ``.asv/results``); ``history/results`` holds each probed commit's newest results
for ``mhabench report`` and ``asv publish``; ``bisect.json`` the search.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mhabench.analysis.comparisons.process_compare import Comparison, lean, verdict
from mhabench.compare.halves import Timed, cleared, compared, merge, middles, which_half
from mhabench.compare.rounds import cell_pattern, commit_kernels, commit_rounds, resolve
from mhabench.compare.search_record import Culprit, Search, Stage

BISECT_DIR = Path(".asv") / "bisect"
FIRST_ROUNDS = 4  # a batch: every stage's first rounds, and those added while unclear
MORE_ROUNDS = FIRST_ROUNDS
MAX_ROUNDS = 4 * FIRST_ROUNDS  # rounds at most of one stage (after the screen)
CULPRIT_ROUNDS = 2 * FIRST_ROUNDS  # fresh rounds, at least, of a culprit and its parent


class BisectError(ValueError):
    """Bad input: unknown commits, GOOD not an ancestor of BAD, nothing between them, or
    cells that fail at either end."""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def commit_range(root: Path, good: str, bad: str) -> list[str]:
    """GOOD, then the first-parent commits up to BAD, oldest first (full hashes)."""
    try:
        good_hash, bad_hash = resolve(root, good), resolve(root, bad)
    except ValueError as err:
        raise BisectError(str(err)) from None
    ancestor = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor",
                               good_hash, bad_hash]).returncode == 0
    if not ancestor or good_hash == bad_hash:
        raise BisectError(f"GOOD {good!r} is not an ancestor of BAD {bad!r}: give an older "
                          "commit first (mhabench bisect GOOD BAD)")
    between = _git(root, "rev-list", "--first-parent", "--reverse",
                   f"{good_hash}..{bad_hash}").split()
    if len(between) < 2:
        raise BisectError(f"no commit between GOOD {good!r} and BAD {bad!r}: BAD is GOOD's "
                          f"child, so it is the one to blame; compare the two with "
                          f"mhabench gate {good} {bad}")
    return [good_hash, *between]


def subject(root: Path, commit: str) -> str:
    return _git(root, "log", "-1", "--format=%s", commit)


class Bisect:
    """One search (see the module docstring); :meth:`run` does it all.

    The points searched are GOOD's and BAD's first-parent commits by default. A search over
    other ordered points (the releases of a dependency, each an asv environment) passes
    them as ``points`` with ``describe`` (a point's one-line description) and the
    ``rounds`` and ``tracks`` that time them; GOOD and BAD are then its first and last."""

    def __init__(self, good: str, bad: str, benches: Sequence[str] = (), *,
                 asv_args: Sequence[str] = (), root: Path = Path("."),
                 echo: Callable[[str], None] = print,
                 rounds: Callable[..., Timed] = commit_rounds,
                 tracks: Callable[..., dict[str, dict[str, Any]]] | None = commit_kernels,
                 points: Sequence[str] | None = None,
                 describe: Callable[[str], str] | None = None,
                 folder: Path | None = None, batch: int = FIRST_ROUNDS) -> None:
        self.root = Path(root)
        if not (self.root / "asv.conf.json").is_file():
            raise BisectError(f"{str(root)!r} has no asv.conf.json: run from the project's "
                              "root")
        commits = list(points) if points is not None else commit_range(self.root, good, bad)
        self.describe = describe or (lambda commit: subject(self.root, commit))
        self.benches, self.asv_args, self.echo = list(benches), list(asv_args), echo
        self._rounds, self._tracks = rounds, tracks
        if batch < 2:
            raise BisectError(f"--rounds {batch} is too few: a batch needs 2 processes a "
                              "commit at least (default 4)")
        # a batch of rounds: each stage's first and each added; a stage's most; a
        # culprit's confirmation's least
        self.batch, self.most, self.culprit_rounds = batch, 4 * batch, 2 * batch
        folder = folder or (self.root / BISECT_DIR
                            / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ"))
        self.search = Search(commits, Path(folder).resolve())

    # -- running rounds ----------------------------------------------------------------
    def _time(self, stage: Stage, commits: list[str], benches: list[str], count: int
              ) -> Timed:
        folder = self.search.folder / f"{stage.name}-{len(stage.folders) + 1}"
        start = time.monotonic()
        timed = self._rounds(commits, benches, count, folder, asv_args=self.asv_args,
                             root=self.root, echo=self.echo)
        stage.seconds += time.monotonic() - start
        stage.rounds += count
        stage.folders.append(str(folder))
        return timed

    # -- 1. the ends ---------------------------------------------------------------------
    def ends(self) -> dict[str, Comparison]:
        """The cells whose time differs between GOOD and BAD, each with its confirmed
        comparison (raises BisectError where a cell fails at either end)."""
        good, bad = self.search.commits[0], self.search.commits[-1]
        screen = Stage("ends-screen", [good, bad], list(self.benches))
        self.search.stages.append(screen)
        timed = self._time(screen, [good, bad], self.benches, self.batch)
        failing = sorted(c for c, by in timed.items() if by.get(good) is None
                         or by.get(bad) is None)
        if failing:
            raise BisectError(f"{len(failing)} cell(s) fail at GOOD or BAD, so there is "
                              f"nothing to compare: {failing[0]}; narrow -b to cells that "
                              "run at both")
        if not timed:
            raise BisectError("the -b selection timed no cell at GOOD and BAD")
        leaning = {}
        for cell in timed:
            result = compared(timed, cell, good, bad)
            if result is not None and lean(result):
                leaning[cell] = lean(result)
        # two batches at least, as for a culprit: on one batch of fresh processes the
        # machine's slow mode landing on one side three times in four read 0.78x
        return self._confirm("ends-confirm", good, bad, leaning, self.culprit_rounds)[0]

    def _confirm(self, name: str, a: str, b: str, ways: dict[str, str], least: int
                 ) -> tuple[dict[str, Comparison], dict[str, Comparison]]:
        """Fresh interleaved rounds of commits ``a`` and ``b`` on the cells of ``ways``
        (cell -> "+" slower or "-" faster), at least ``least`` of them, more while a
        cell is neither changed that way (interval clear of 1, past the factor) nor
        cleared, up to :data:`MAX_ROUNDS`. Returns (changed, not changed) comparisons."""
        stage = Stage(name, [a, b], sorted(ways))
        self.search.stages.append(stage)
        fresh: Timed = {}
        open_cells, changed = sorted(ways), {}
        while open_cells and stage.rounds < self.most:
            count = least if not stage.rounds else self.batch
            merge(fresh, self._time(stage, [a, b], [cell_pattern(c) for c in open_cells],
                                     count))
            still = []
            for cell in open_cells:
                result = compared(fresh, cell, a, b)
                said = verdict(result) if result is not None else "unchanged"
                if said != "unchanged" and (said == "slower") == (ways[cell] == "+"):
                    changed[cell] = result
                elif result is not None and not cleared(result, ways[cell]):
                    still.append(cell)
            open_cells = still
        rest = {c: r for c in ways if c not in changed
                and (r := compared(fresh, c, a, b)) is not None}
        return changed, rest

    # -- 2. probes -----------------------------------------------------------------------
    def probe(self, lo: int, hi: int, cells: dict[str, Comparison]
              ) -> tuple[int, dict[str, str], Timed]:
        """Time commits ``lo``, a middle one and ``hi`` together; returns the middle's
        index and, per cell, where its change is: "low" half, "high" half, "both", or
        "none" (the ends no longer differ), with the rounds' medians. The middle moves
        beside commits that fail to run (:attr:`Search.skipped`); -1 where none between
        runs."""
        commits = self.search.commits
        for mid in middles(lo, hi):
            if commits[mid] in self.search.skipped:
                continue
            trio = [commits[lo], commits[mid], commits[hi]]
            stage = Stage(f"probe-{self.search.probes + 1:02d}", trio, sorted(cells))
            self.search.stages.append(stage)
            timed: Timed = {}
            open_cells, where = sorted(cells), {}
            while open_cells and stage.rounds < self.most:
                count = self.batch
                merge(timed, self._time(stage, trio, [cell_pattern(c) for c in open_cells],
                                         count))
                if all(timed.get(c, {}).get(trio[1]) is None for c in open_cells):
                    break  # the middle commit fails: skip it
                still = []
                for cell in open_cells:
                    answer = which_half(timed, cell, trio, final=False,
                                        settled=self.batch)
                    if answer:
                        where[cell] = answer
                    else:
                        still.append(cell)
                open_cells = still
            if all(timed.get(c, {}).get(trio[1]) is None for c in cells):
                self.echo(f"mhabench bisect: {trio[1][:8]} fails to run; skipped")
                self.search.skipped.add(trio[1])
                continue
            for cell in open_cells:  # out of rounds: the larger half, marked unclear
                where[cell] = which_half(timed, cell, trio, final=True,
                                         settled=self.batch) + "?"
            return mid, where, timed
        return -1, {}, {}

    def run(self) -> Search:
        start = time.monotonic()
        self.search.folder.mkdir(parents=True)
        self.search.changed = self.ends()
        stack = [(0, len(self.search.commits) - 1, dict(self.search.changed))]
        while stack:
            lo, hi, cells = stack.pop()
            if not cells:
                continue
            if hi - lo == 1 or all(c in self.search.skipped
                                   for c in self.search.commits[lo + 1:hi]):
                self._culprit(lo, hi, cells, {}, unclear=False)
                continue
            mid, where, timed = self.probe(lo, hi, cells)
            if mid < 0:
                self._culprit(lo, hi, cells, {}, unclear=False)
                continue
            trio = [self.search.commits[i] for i in (lo, mid, hi)]
            parts: dict[tuple[int, int], dict[str, Comparison]] = {}
            unclear: set[tuple[int, int]] = set()
            for cell, answer in where.items():
                halves = {"low": [(lo, mid, 0)], "high": [(mid, hi, 1)],
                          "both": [(lo, mid, 0), (mid, hi, 1)]}.get(answer.rstrip("?"), [])
                if not halves:
                    self.search.lost.append(f"{cell} between {trio[0][:8]} and "
                                            f"{trio[2][:8]}")
                for a, b, side in halves:
                    result = compared(timed, cell, trio[side], trio[side + 1])
                    parts.setdefault((a, b), {})[cell] = result or cells[cell]
                    if answer.endswith("?"):
                        unclear.add((a, b))
            for (a, b), moved in sorted(parts.items(), reverse=True):
                if b - a == 1:
                    self._culprit(a, b, moved, timed, unclear=(a, b) in unclear)
                else:
                    stack.append((a, b, moved))
        self.search.culprits.sort(key=lambda c: self.search.commits.index(c.commit))
        for culprit in self.search.culprits:
            self.confirm_culprit(culprit)
        # a commit none of whose cells its fresh rounds find changed is no culprit
        self.search.cleared = [c for c in self.search.culprits
                               if len(c.unconfirmed) == len(c.cells)]
        self.search.culprits = [c for c in self.search.culprits
                                if c not in self.search.cleared]
        self.search.seconds = time.monotonic() - start
        self.write()
        return self.search

    def _culprit(self, lo: int, hi: int, cells: dict[str, Comparison], timed: Timed, *,
                 unclear: bool) -> None:
        commits = self.search.commits
        skipped = [c for c in commits[lo + 1:hi] if c in self.search.skipped]
        found = {}
        for cell, parent in cells.items():
            found[cell] = compared(timed, cell, commits[lo], commits[hi]) or parent
        self.search.culprits.append(Culprit(commits[hi], commits[lo],
                                            self.describe(commits[hi]), found, skipped,
                                            unclear=unclear))

    # -- 3. culprits ----------------------------------------------------------------------
    def confirm_culprit(self, culprit: Culprit) -> None:
        """Fresh rounds of the culprit and the commit before it (:data:`CULPRIT_ROUNDS` at
        least): its cells' comparisons come from them, so the step's interval rests on
        enough processes, and a cell that reads unchanged there is said so
        (:attr:`Culprit.unconfirmed`). Then the kernel each side ran, where a cell is a
        library call whose kernel asv records."""
        ways = {c: "+" if r.ratio > 1 else "-" for c, r in culprit.cells.items()}
        changed, rest = self._confirm(f"culprit-{culprit.commit[:8]}", culprit.before,
                                      culprit.commit, ways, self.culprit_rounds)
        culprit.cells = {**changed, **rest}
        culprit.unconfirmed = sorted(rest)
        culprit.kernels = self._kernels(culprit.before, culprit.commit, list(changed))

    def _kernels(self, a: str, b: str, cells: list[str]) -> dict[str, tuple[str | None,
                                                                            str | None]]:
        """The kernel each commit ran for ``cells`` (``track_kernel``, one process each),
        where it differs; nothing where the project records no kernels."""
        if self._tracks is None:
            return {}
        kernel_cells = {c.replace(".time_step(", ".track_kernel(", 1): c for c in cells
                        if ".time_step(" in c}
        if not kernel_cells:
            return {}
        folder = self.search.folder / f"kernels-{b[:8]}"
        read = self._tracks([a, b], [cell_pattern(c) for c in kernel_cells], folder,
                            asv_args=self.asv_args, root=self.root, echo=self.echo)
        out = {}
        for name, cell in kernel_cells.items():
            sides = read.get(name, {})
            pair = (sides.get(a), sides.get(b))
            if None not in pair and pair[0] != pair[1]:
                out[cell] = pair
        return out

    # -- results -----------------------------------------------------------------------
    def write(self) -> Path:
        """``bisect.json`` and ``history/results`` (each probed commit's newest results
        file, with the machine's and benchmarks' files) in the search's folder."""
        history = self.search.folder / "history" / "results"
        for stage in self.search.stages:
            for folder in stage.folders:
                results = Path(folder) / "results"
                for path in sorted(results.rglob("*.json")):
                    target = history / path.relative_to(results)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(path.read_bytes())  # later stages are newer
        path = self.search.folder / "bisect.json"
        path.write_text(json.dumps(self.search.as_dict(), indent=1) + "\n")
        return path
