"""The benchmark grids by name, the shapes they sweep around and the backend groups they
share: one home for what the asv classes, the shard plan, the GPU run, ``mhabench init``
and the CLI all name. Data and pure functions only: importing this reads no environment
and configures nothing (the grid in force is read by the asv classes, ``mhabench.bench``).

- ``tiny``: CI's smoke and the results fixture, every module in seconds; ``quick``: the
  main job, minutes on a 2-core machine; ``full``: dedicated machines or a cluster.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from mhabench.core.models import model_shape

T = TypeVar("T")

GRIDS = ("tiny", "quick", "full")
GRID_VAR = "MHABENCH_GRID"  # the grid in force in an asv process
DEFAULT_GRID = "quick"


def check_grid(name: str, option: str = "--grid") -> str:
    """``name`` if it is a grid; a ValueError naming it and the grids otherwise."""
    if name not in GRIDS:
        raise ValueError(f"{option} {name!r} is not allowed; choose one of {', '.join(GRIDS)}")
    return name


def grid_from_env() -> str:
    """The grid ``MHABENCH_GRID`` names (default quick)."""
    name = os.environ.get(GRID_VAR, DEFAULT_GRID)
    if name not in GRIDS:
        raise ValueError(f"{GRID_VAR}={name!r} is not allowed; choose one of "
                         f"{', '.join(GRIDS)}")
    return name


def pick(grid: str, *, tiny: T, quick: T, full: T) -> T:
    """The value for ``grid``."""
    return {"tiny": tiny, "quick": quick, "full": full}[check_grid(grid)]


@dataclass(frozen=True)
class Shape:
    """One batch, sequence length and width."""

    batch: int
    n: int
    d: int

    def fields(self) -> dict[str, int]:
        """As config fields: ``{"batch": ..., "n": ..., "d": ...}``."""
        return asdict(self)

    def axes(self) -> dict[str, list[int]]:
        """Its three single-valued asv parameter axes."""
        return {name: [value] for name, value in self.fields().items()}


# Exercise 6.4's shape: d = 256, n = 512, batch 8.
CHAPTER_SHAPE = Shape(batch=8, n=512, d=256)
HEAD_SWEEP = (1, 2, 4, 8, 16, 32, 64)  # Exercise 6.4's head counts
# The shape each grid's classes sweep around: the chapter's on the full grid, batch 2 on the
# quick grid (its time budget), a toy shape on the tiny one.
SWEEP_SHAPE = {"tiny": Shape(batch=2, n=32, d=32), "quick": Shape(batch=2, n=512, d=256),
               "full": CHAPTER_SHAPE}
# The head counts of the classes that do not sweep h.
FEW_HEADS: dict[str, list[int]] = {"tiny": [4], "quick": [8], "full": [1, 8, 64]}

# ----- backend groups ------------------------------------------------------------------------
# The chapter's four: every grid sweeps them.
CHAPTER_BACKENDS = ("loop", "batched", "fused", "reference")
# mhabench's newer backends (torch.compile, FlexAttention, JAX blockwise): they join the
# grids class by class, within the quick grid's budget.
NEWER_BACKENDS = ("compiled", "flex", "blockwise")
# torch backends that compile every cell (2-3 s a process); in JAX every backend compiles.
COMPILING_BACKENDS = ("compiled", "flex")
# The newer backends each grid's sweeps take: tiny (CI) only the one that compiles in under
# a second.
GRID_NEWER_BACKENDS: dict[str, tuple[str, ...]] = {
    "tiny": ("blockwise",), "quick": NEWER_BACKENDS, "full": NEWER_BACKENDS}



# ----- a design's points, or a published model, as one parameter ------------------------------
# asv's parameters form a product, so a class whose cells are a few scattered shapes (the
# calibration design, benchmarks/bench_design.py) takes them as one parameter, ``point``,
# whose values are dicts of config fields: a cell's name still spells out its config.
POINT = "point"
# ... and a class that times published models' shapes (benchmarks/bench_models.py) takes a
# model's name, ``model``, whose shape (mhabench.core.models) sets d, heads, kv_heads,
# head_dim and scale: one axis where five would make a product of shapes no model has.
MODEL = "model"
# Parameters that are no config field: recorded with each result, left out of its config.
RECORDED = ("threads", MODEL)


class Point(dict):
    """One design point: config field -> value. Its repr is a plain dict's (asv names a
    cell by its parameters' reprs, and ``ast.literal_eval`` reads one back as a dict);
    hashable, as asv's skipped cells and the suite's caches need; never changed once made."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))


def cell_fields(params: dict[str, Any]) -> dict[str, Any]:
    """A cell's parameters as config fields: a ``point`` spread into its fields in its
    place, a ``model``'s name followed by its shape's fields (the other parameters keep
    their order); ``threads`` and the model's name stay, for the caller to record
    (:data:`RECORDED`). An unknown model name is a ValueError naming the known ones."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name == POINT and isinstance(value, dict):
            out.update(value)
        elif name == MODEL:
            out[name] = value
            out.update(model_shape(str(value)).fields())
        else:
            out[name] = value
    return out


def config_fields(params: dict[str, Any]) -> dict[str, Any]:
    """A cell's parameters as the fields of its config alone (:func:`cell_fields` less the
    :data:`RECORDED` parameters): ``AttentionConfig.from_dict`` of them is the config."""
    return {k: v for k, v in cell_fields(params).items() if k not in RECORDED}
