"""How a bounded GPU run spends its seconds (``scripts/gpu-grid``, :mod:`mhabench.device.run`).

:func:`schedule` decides the asv runs: each benchmark class whole if its estimate fits the
seconds left, else method by method, and a method that does not fit in chunks of exact cells
(asv merges a chunk's results into the commit's file), no run planned past
:data:`MAX_RUN_S`. A cell's cost is weighed by what its process compiles
(:func:`cell_weight`). The run refits the seconds per invocation and per unit of cell cost
from its own runs (:func:`fit_costs`); :func:`plan` replays the same
decisions at fixed costs, so ``gpu-grid --plan`` and the rehearsal test can say what a budget
holds before any device time is spent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mhabench.core.grids import COMPILING_BACKENDS

# Until this run has measured its own: seconds per asv invocation (benchmark discovery and
# the forkserver import torch and jax) and per unit of cell cost (a forked process that
# starts CUDA, builds, compiles and samples; an eager torch cell is one unit).
FIRST_OVERHEAD_S = 12.0
FIRST_PER_RUN_S = 3.0
SAFETY = 1.3  # estimates are padded by this factor before they are compared to the budget
# A cell that compiles costs several eager ones: a JAX cell's process starts JAX's CUDA
# backend and XLA compiles and autotunes; a torch.compile or FlexAttention cell's inductor
# imports and compiles.
COMPILING_WEIGHT = 6.0
# No single asv run is planned past this: asv saves a parametrized benchmark's results
# only when all its cells are done, so a run stopped at the deadline loses every cell it
# timed.
MAX_RUN_S = 150.0
_PARAMS = re.compile(r"\('([\w.-]+)'(?:, '([\w.-]+)')?")


def cell_weight(cell: str) -> float:
    """The cost of one asv cell in eager-torch-cell units, from its name's parameters (the
    framework first, then the backend where the benchmark has one)."""
    found = _PARAMS.search(cell)
    if not found:
        return 1.0
    framework, backend = found.groups()
    heavy = framework == "jax" or backend in COMPILING_BACKENDS
    return COMPILING_WEIGHT if heavy else 1.0


def units(cells: tuple[str, ...]) -> float:
    """What ``cells`` cost together, in eager-torch-cell units (:func:`cell_weight`)."""
    return sum(cell_weight(c) for c in cells)


@dataclass(frozen=True)
class BenchClass:
    module: str
    name: str
    methods: dict[str, tuple[str, ...]]  # benchmark method -> asv names of its cells

    @property
    def label(self) -> str:
        return f"{self.module}.{self.name}"

    def units(self) -> list[tuple[str, list[str], tuple[str, ...]]]:
        """(label, asv -b regexes, cells): the whole class, then each method alone (timings
        first) for when the class does not fit the time left; a method that does not fit
        either runs in chunks of its cells (:func:`chunk_regexes`)."""
        names = "|".join(self.methods)
        # No "$": asv matches -b against names that may carry parameters.
        whole = (self.label, [rf"^{self.module}\.{self.name}\.({names})\b"],
                 tuple(c for cells in self.methods.values() for c in cells))
        return [whole, *((f"{self.label}.{m}", [rf"^{self.module}\.{self.name}\.{m}\b"], cells)
                         for m, cells in self.methods.items())]


def chunk_regexes(cells: tuple[str, ...]) -> list[str]:
    """One exact ``-b`` per asv cell name: asv runs just these cells and merges their results
    into the commit's file (the benchmark's other cells keep theirs)."""
    return ["^" + re.escape(cell) + "$" for cell in cells]


def fit_costs(history: list[tuple[float, float]]) -> tuple[float, float]:
    """Seconds per invocation and per unit of cell cost (:func:`units`), from this run's
    (units, seconds) so far: a least-squares line once two invocations differ in size,
    else the first guesses with the per-unit cost adjusted to what was seen."""
    if len({size for size, _ in history}) >= 2:
        n = len(history)
        mean_r = sum(r for r, _ in history) / n
        mean_t = sum(t for _, t in history) / n
        var = sum((r - mean_r) ** 2 for r, _ in history)
        slope = sum((r - mean_r) * (t - mean_t) for r, t in history) / var
        slope = max(slope, 0.05)
        return max(mean_t - slope * mean_r, 0.0), slope
    if history:
        size = sum(r for r, _ in history)
        took = sum(t for _, t in history)
        return FIRST_OVERHEAD_S, max((took - FIRST_OVERHEAD_S * len(history)) / size, 0.05)
    return FIRST_OVERHEAD_S, FIRST_PER_RUN_S


@dataclass(frozen=True)
class Planned:
    """One ``asv run`` the budget leaves room for (``runs`` cells, ``seconds`` predicted),
    or, with ``runs`` = 0, a unit left out (``label`` says what)."""

    label: str
    runs: int
    seconds: float


def schedule(classes: list[BenchClass], left: Callable[[], float],
             costs: Callable[[], tuple[float, float]],
             execute: Callable[[str, list[str], tuple[str, ...], float, float], None],
             skip: Callable[[str, int, float], None]) -> None:
    """The order and size of the asv runs: each class whole if its padded estimate fits
    the seconds ``left()`` and :data:`MAX_RUN_S`, else method by method, and a method that
    does not fit in chunks of as many cells as fit; ``costs()`` gives (seconds per
    invocation, per unit of cell cost) as known now. ``execute(label, regexes, cells,
    estimate, left)`` runs one; ``skip(label, runs, left)`` records what did not fit."""
    def padded(cells: tuple[str, ...]) -> float:
        overhead, per_unit = costs()
        return (overhead + units(cells) * per_unit) * SAFETY

    def room() -> float:
        return min(left(), MAX_RUN_S)

    for item in classes:
        whole, *methods = item.units()
        for label, regexes, cells in [whole] if padded(whole[2]) <= room() else methods:
            if padded(cells) <= room():
                execute(label, regexes, cells, padded(cells), left())
                continue
            todo, part = list(cells), 0
            while todo:
                size = 0
                while size < len(todo) and padded(tuple(todo[:size + 1])) <= room():
                    size += 1
                if size < 1:
                    # one cell alone may cost more than a run's cap: it runs if it fits
                    if padded(tuple(todo[:1])) <= left():
                        size = 1
                    else:
                        skip(label, len(todo), left())
                        break
                part += 1
                chunk, todo = tuple(todo[:size]), todo[size:]
                execute(f"{label} part {part}", chunk_regexes(chunk), chunk, padded(chunk),
                        left())


def plan(classes: list[BenchClass], budget: float, overhead: float = FIRST_OVERHEAD_S,
         per_run: float = FIRST_PER_RUN_S) -> list[Planned]:
    """What :func:`run` would run within ``budget`` seconds if every invocation cost
    ``overhead`` and every unit of cell cost (an eager torch cell) ``per_run`` (the run
    itself refits both as it goes)."""
    out: list[Planned] = []

    def execute(label: str, regexes: list[str], cells: tuple[str, ...], estimate: float,
                left: float) -> None:
        out.append(Planned(label, len(cells), estimate / SAFETY))

    def skip(label: str, runs: int, left: float) -> None:
        out.append(Planned(f"{label}: {runs} runs left out", 0, 0.0))

    schedule(classes, lambda: budget - sum(p.seconds for p in out),
             lambda: (overhead, per_run), execute, skip)
    return out
