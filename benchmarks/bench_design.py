"""A calibration design for the time model: seeded space-filling shapes off the sweeps.

The other modules vary one field at a time around a few centres; a model fitted on them
alone sees almost no interactions (n x h, m x h_kv, batch x d, the head width p = d/h).
Here the points of ``mhabench.core.design.calibration_design`` (a scrambled Sobol sequence
over log n, log m, log d, log p, h_kv/h, log batch, mode, cross, masked, with a fixed
seed, so a larger design keeps these points) are timed through the frameworks' backends.
asv's parameters form a product, so a class takes its design's shapes as one parameter,
``point``: a dict of the config's shape fields (``mhabench.core.grids.Point``), which a
cell's name spells out. Three designs, one class each: ``Design`` (general points),
``DesignDecode`` (decode steps) and ``DesignTrain`` (training steps).

The budget on the quick grid: 16 general points through the chapter's backends and
plug-ins plus the newer ones, the loop backend only at h <= 16 and torch.compile and
FlexAttention (which compile each cell) only at the first 8, 32 decode points (compiled
and flex at the first 4 and the first masked one; flex also at one more masked point of
each design, for its block mask) and 8 training points. No memory or kernel processes:
the design is for time only. The tiny grid (CI) takes two small points of each design
through batched and fused; the full grid 32 general points, 32 decode and 16 training
ones, every cell.
"""

import itertools
from typing import Any

from mhabench.bench.axes import BACKENDS, FRAMEWORKS, NEWER, WHERE
from mhabench.bench.cells import on_cuda, skip_cells
from mhabench.bench.common import CUDA, GRID, grid
from mhabench.bench.methods import (
    AttentionBenchmark,
    device_seconds,
    prepare,
    record_load,
    settle,
)
from mhabench.core import backends
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import block_mask_elements
from mhabench.core.design import (
    DECODE_BOX,
    QUICK_BOX,
    TINY_BOX,
    TINY_DECODE_BOX,
    TINY_TRAIN_BOX,
    TRAIN_BOX,
    calibration_design,
)
from mhabench.core.grids import COMPILING_BACKENDS, Point

SHAPE_FIELDS = ("mode", "batch", "n", "m", "d", "heads", "kv_heads", "cross", "masked")
DESIGN_BACKENDS = grid(tiny=["batched", "fused"], quick=[*BACKENDS, *NEWER],
                       full=[*BACKENDS, *NEWER])
POINTS = [Point(p) for p in calibration_design(
    grid(tiny=2, quick=16, full=32), box=grid(tiny=TINY_BOX, quick=QUICK_BOX, full=QUICK_BOX))]
# Decode steps alone, half of them cross-attention over a cached source, from Sobol points
# no other design of the grid uses (a general point of decode mode at the same point is
# the same config). Two balanced blocks of 16: the time of a wide decode step (its
# projection weights read each call) and the cache size where its reads spill need more
# than a few cells of each backend.
DECODE_POINTS = [Point(p) for size, start in grid(tiny=[(2, 2)], quick=[(16, 16), (16, 48)],
                                                  full=[(16, 48), (16, 64)])
                 for p in calibration_design(size, start=start, box=grid(
                     tiny=TINY_DECODE_BOX, quick=DECODE_BOX, full=DECODE_BOX))]
# Training steps alone, from the Sobol points after the first 32: a group's training FLOP
# rate is a coefficient of its own, which the general design's few training cells set badly.
TRAIN_POINTS = [Point(p) for p in calibration_design(
    grid(tiny=2, quick=8, full=16), start=grid(tiny=4, quick=32, full=32),
    box=grid(tiny=TINY_TRAIN_BOX, quick=TRAIN_BOX, full=TRAIN_BOX))]

# torch.compile and FlexAttention compile each cell: on the quick grid they take the first
# points of a design only, enough that their widths other than the sweeps' d = 256 are no
# extrapolation.
COMPILED_POINTS = {"general": 8, "decode": 4, "train": 0}
# ... and the first masked decode point: a masked cross decode step builds its mask from the
# lengths every call (FlexAttention a block mask), work none of the first 4 points times.
COMPILED_MASKED = {"decode": next((i for i, p in enumerate(DECODE_POINTS) if p["masked"]),
                                  None)}
# ... and FlexAttention alone at one more masked point of the general and decode designs:
# the first past those whose block mask holds at least FLEX_MASK_ELEMENTS elements (b x n x
# m, padded to 128), so the block mask's cost per element is set beside its fixed cost.
FLEX_MASK_ELEMENTS = 2**17


def _flex_masked(points: list[Point], start: int) -> int | None:
    modes = backends.get("torch", "flex").modes_on("cpu")  # no CPU backward: no training
    return next((i for i, p in enumerate(points) if i >= start and p["mode"] in modes
                 and block_mask_elements(AttentionConfig(framework="torch", backend="flex", **p))
                 >= FLEX_MASK_ELEMENTS), None)


FLEX_MASKED = {"general": _flex_masked(POINTS, COMPILED_POINTS["general"]),
               "decode": _flex_masked(DECODE_POINTS, (COMPILED_MASKED["decode"] or 0) + 1)}


def runs(design: str, points: list[Point], c: AttentionConfig) -> bool:
    """Whether the quick grid's budget takes config ``c`` of a design (the full grid takes
    every cell): the loop backend at h <= 16 only (the head sweep covers its per-head cost),
    the compiling backends at their points above."""
    index = points.index(Point({k: getattr(c, k) for k in SHAPE_FIELDS}))
    return GRID == "full" or (
        (c.backend != "loop" or c.heads <= 16)
        and (c.backend not in COMPILING_BACKENDS or index < COMPILED_POINTS[design]
             or index == COMPILED_MASKED.get(design)
             or c.backend == "flex" and index == FLEX_MASKED.get(design)))


def general_runs(c: AttentionConfig) -> bool:
    return runs("general", POINTS, c)


def decode_runs(c: AttentionConfig) -> bool:
    return runs("decode", DECODE_POINTS, c)


def train_runs(c: AttentionConfig) -> bool:
    return runs("train", TRAIN_POINTS, c)


def timed_backends(points: list[Point], chosen: Any) -> list[str]:
    """The design's backends that some framework times at some point: every skipped cell
    of asv's product still costs a fork."""
    names = ["framework", "backend", "point", "device", "dtype", "threads"]
    skipped = set(skip_cells(names, [FRAMEWORKS, DESIGN_BACKENDS, points, *WHERE], chosen))
    return [b for b in DESIGN_BACKENDS if any(
        cell not in skipped for cell in itertools.product(FRAMEWORKS, [b], points, *WHERE))]


# Time only (and the device's time on a GPU): no memory process, and the kernel is recorded
# by the sweeps' cells.
class Design(AttentionBenchmark):
    """General points: every mode, self- and cross-attention, masked or not."""

    param_names = ["framework", "backend", "point", "device", "dtype", "threads"]
    params = [FRAMEWORKS, timed_backends(POINTS, general_runs), POINTS, *WHERE]
    skip_params = skip_cells(param_names, params, general_runs)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, general_runs,
                                                      on_cuda)


class DesignDecode(AttentionBenchmark):
    """Decode steps: over a KV cache (self-attention) or a cached source (cross)."""

    param_names = ["framework", "backend", "point", "device", "dtype", "threads"]
    params = [FRAMEWORKS, timed_backends(DECODE_POINTS, decode_runs), DECODE_POINTS, *WHERE]
    skip_params = skip_cells(param_names, params, decode_runs)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, decode_runs,
                                                      on_cuda)


class DesignTrain(AttentionBenchmark):
    """Training steps: forward and backward of the layer."""

    param_names = ["framework", "backend", "point", "device", "dtype", "threads"]
    params = [FRAMEWORKS, timed_backends(TRAIN_POINTS, train_runs), TRAIN_POINTS, *WHERE]
    skip_params = skip_cells(param_names, params, train_runs)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, train_runs,
                                                      on_cuda)
