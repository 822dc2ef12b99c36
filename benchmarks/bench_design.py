"""A calibration design for the time model: seeded space-filling shapes off the sweeps.

The other modules vary one field at a time around a few centres; a model fitted on them
alone sees almost no interactions (n x h, m x h_kv, batch x d, the head width p = d/h).
Here each point of ``mhabench.core.design.calibration_design`` (a scrambled Sobol sequence
over log n, log m, log d, log p, h_kv/h, log batch, mode, cross, masked, with a fixed
seed, so a larger design keeps these points) is one class, ``DesignNN``, whose
single-valued shape parameters name the config (the suite's convention: ``param_names``
are config fields plus ``threads``) and whose cells are the frameworks x backends. asv
parameters form a product, so one class per point is what keeps the design's cells few.

The budget on the quick grid: 16 general points through the chapter's backends and
plug-ins plus the newer ones, the loop backend only at h <= 16 and torch.compile and
FlexAttention (which compile each cell) only at the first 8, 32 decode points (compiled
and flex at the first 4 and the first masked one; flex also at one more masked point of
each design, for its block mask) and 8 training points: about 6 minutes of asv run.
No memory or kernel processes: the design is for time only. The tiny grid (CI) takes two
small points of each design through batched and fused; the full grid 32 general points, 32
decode and 16 training ones, every cell.
"""

import itertools
from typing import Any

from mhabench.bench.common import (
    BACKENDS,
    FRAMEWORKS,
    GRID,
    NEW_BACKENDS,
    WHERE,
    grid,
    parameters,
    skip_cells,
)
from mhabench.bench.methods import DeviceTime, TimeStep
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

DESIGN_BACKENDS = grid(tiny=["batched", "fused"], quick=[*BACKENDS, *NEW_BACKENDS],
                       full=[*BACKENDS, *NEW_BACKENDS])
# torch.compile and FlexAttention compile each cell (about 5 s a cell of the quick grid's asv
# run, against 1-2 s for the others): on the quick grid they take the first 8 general and
# the first 4 decode points only. The sweeps alone time them at d = 256 and batch 2, so
# every other width was an extrapolation (off-grid median errors 21 % for compiled and
# 41 % for flex without these cells, 5 % and 11 % with them); more points moved neither.
COMPILING = ("compiled", "flex")
COMPILED_POINTS = {"Design": 8, "Decode": 4, "Train": 0}
POINTS = calibration_design(grid(tiny=2, quick=16, full=32),
                            box=grid(tiny=TINY_BOX, quick=QUICK_BOX, full=QUICK_BOX))
# Decode steps alone (``DecodeNN``), half of them cross-attention over a cached source, from
# Sobol points no other design of the grid uses (a general point of decode mode at the same
# point is the same config: the full grid's 32 general points and decode points from 16
# timed 4 configs twice): sub-millisecond steps, about 1.7 s of the quick grid a point. Two
# balanced blocks of 16 (points 16-31 and 48-63 on the quick grid, 48-79 on full): with
# fewer, the time of a wide decode step (its 4 d^2 projection weights read each call) and
# the K/V cache size that decides where its reads spill rested on a few cells of each
# backend (off-grid decode steps read a median 22 % off their prediction with 16 points,
# 14 % with 32).
DECODE_POINTS = [point for size, start in grid(tiny=[(2, 2)], quick=[(16, 16), (16, 48)],
                                               full=[(16, 48), (16, 64)])
                 for point in calibration_design(size, start=start, box=grid(
                     tiny=TINY_DECODE_BOX, quick=DECODE_BOX, full=DECODE_BOX))]
# ... and compiled and flex also at the first masked decode point: a masked cross decode
# step builds its mask from the lengths every call (FlexAttention a block mask, 40-170 us
# a step at b 1-8, m 109-435 on this machine), work none of the first 4 points times; the
# time model's ``masked`` term was otherwise their framework's guess.
COMPILED_MASKED = {"Decode": next((i for i, p in enumerate(DECODE_POINTS) if p["masked"]),
                                  None)}
# ... and FlexAttention alone at one more masked point of the general and decode designs:
# the first past those whose block mask holds at least FLEX_MASK_ELEMENTS elements (b x n x
# m, padded to 128; ~0.3-1 ms of mask a call here). The block mask's cost grows with those
# elements (the time model's ``block_mask``), and the three masked cells above (32-344 k
# elements) were too few to set a rate beside the fixed ``masked`` cost.
FLEX_MASK_ELEMENTS = 2**17


def _flex_masked(points: list[dict[str, Any]], start: int) -> int | None:
    modes = backends.get("torch", "flex").modes_on("cpu")  # no CPU backward: no training
    return next((i for i, p in enumerate(points) if i >= start and p["mode"] in modes
                 and block_mask_elements(AttentionConfig(framework="torch", backend="flex", **p))
                 >= FLEX_MASK_ELEMENTS), None)


FLEX_MASKED = {"Design": _flex_masked(POINTS, COMPILED_POINTS["Design"]),
               "Decode": _flex_masked(DECODE_POINTS, (COMPILED_MASKED["Decode"] or 0) + 1)}
# Training steps alone (``TrainNN``), from the Sobol points after the first 32: a group's
# training FLOP rate is a coefficient of its own, and the general design gives it two to
# four cells.
TRAIN_POINTS = calibration_design(grid(tiny=2, quick=8, full=16), start=grid(
    tiny=4, quick=32, full=32), box=grid(tiny=TINY_TRAIN_BOX, quick=TRAIN_BOX,
                                         full=TRAIN_BOX))
SHAPE_FIELDS = ("mode", "batch", "n", "m", "d", "heads", "kv_heads", "cross", "masked")


def _design_class(prefix: str, index: int, point: dict[str, Any]) -> type:
    shape = ", ".join(f"{k}={point[k]}" for k in SHAPE_FIELDS)

    # The loop backend at h > 16 costs 5-10 s a cell (h projections, compiled per head in
    # JAX): the head sweep covers its per-head cost; quick grid's budget.
    def keep(c: AttentionConfig) -> bool:
        return GRID == "full" or (
            (c.backend != "loop" or c.heads <= 16)
            and (c.backend not in COMPILING or index < COMPILED_POINTS[prefix]
                 or index == COMPILED_MASKED.get(prefix)
                 or c.backend == "flex" and index == FLEX_MASKED.get(prefix)))

    rest = {**{k: [point[k]] for k in SHAPE_FIELDS}, **WHERE}
    # Only the backends some framework times here: every skipped cell of asv's product
    # still costs a fork (~35 ms; 376 of the quick grid's 784 design cells were skipped,
    # 82 are now).
    skipped = set(skip_cells(*parameters(framework=FRAMEWORKS, backend=DESIGN_BACKENDS,
                                         **rest), keep))
    timed = [b for b in DESIGN_BACKENDS if any(
        cell not in skipped for cell in itertools.product(FRAMEWORKS, [b], *rest.values()))]
    names, params = parameters(framework=FRAMEWORKS, backend=timed, **rest)
    # Time only (and the device's time on a GPU): no memory process, and the kernel is
    # recorded by the sweeps' cells.
    return type(f"{prefix}{index:02d}", (TimeStep, DeviceTime), {
        "__doc__": f"Calibration {prefix.lower()} point {index}: {shape}.",
        "__module__": __name__,
        "keep": staticmethod(keep),
        "param_names": names,
        "params": params,
    })


for _prefix, _points in (("Design", POINTS), ("Decode", DECODE_POINTS),
                         ("Train", TRAIN_POINTS)):
    for _index, _point in enumerate(_points):
        globals()[f"{_prefix}{_index:02d}"] = _design_class(_prefix, _index, _point)
# asv collects every class a module's namespace holds, under any name: a loop variable left
# holding the last class timed that point twice (as ``_cls``).
del _prefix, _points, _index, _point
