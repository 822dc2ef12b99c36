"""Which parameter cells of an attention class asv runs.

A cell's parameters name its config (:func:`config_of`). asv skips a class's
``skip_params``, and a method's own ``skip_params`` in place of them, before any setup (n/a
at the cost of a fork, where a ``NotImplementedError`` from setup costs a whole process):
:func:`skip_cells` lists the cells that are no valid config (reference with GQA,
self-attention with n != m) and the ones a class or method does not run on. A question
class that a user's suite reuses (``mhabench init``) has lists that hold for every
registered backend, so a subclass that narrows its framework and backend axes
(:func:`narrow`) inherits them as they are.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mhabench.core import backends as registry
from mhabench.core.config import FRAMEWORKS, AttentionConfig
from mhabench.core.grids import config_fields

T = TypeVar("T")
Runs = Callable[[AttentionConfig], bool]


def unsupported_as_skip(build: Callable[[], T]) -> T:
    """Run ``build``; a ValueError (UnavailableError included: no GPU, framework missing,
    over the memory budget, or a variant the backend lacks) becomes NotImplementedError,
    which asv reports as n/a for that cell instead of a failure."""
    try:
        return build()
    except ValueError as err:
        raise NotImplementedError(str(err)) from err


def config_of(names: Sequence[str], values: Sequence[Any]) -> AttentionConfig:
    """The config of one parameter cell (raises ValueError for an invalid combination)."""
    # threads is in force since import, a model's name is its shape: both only recorded
    return AttentionConfig.from_dict(config_fields(dict(zip(names, values, strict=True))))


@functools.cache
def _valid_config(names: tuple[str, ...], cell: tuple[Any, ...]) -> AttentionConfig | None:
    try:
        return config_of(names, cell)
    except ValueError:
        return None


def skip_cells(names: Sequence[str], params: Sequence[Sequence[Any]], *runs: Runs,
               every_backend: bool = False) -> list[tuple[Any, ...]]:
    """The cells of ``params`` asv skips: no valid config, or one of ``runs`` (a class's
    or a method's choice of cells) rejects it. ``every_backend``: the list holds the cells
    of every registered backend too, for a class a user's suite narrows."""
    if every_backend:
        params = [list(registry.names()) if name == "backend" else values
                  for name, values in zip(names, params, strict=True)]
    key = tuple(names)
    skipped = []
    for cell in itertools.product(*params):
        config = _valid_config(key, cell)
        if config is None or not all(run(config) for run in runs):
            skipped.append(cell)
    return skipped


def on_cpu(config: AttentionConfig) -> bool:
    return config.device == "cpu"


def on_cuda(config: AttentionConfig) -> bool:
    return config.device == "cuda"


def narrow(cls: type, *, frameworks: Sequence[str] | None = None,
           backends: Sequence[str] | None = None) -> list[list[Any]]:
    """``cls.params`` with the ``framework`` and ``backend`` axes replaced where given (a
    user's suite: its own backends and a few baselines). ``cls`` must be a class whose
    skipped cells cover every registered backend (``skip_cells(..., every_backend=True)``)."""
    names = list(cls.param_names)
    params = [list(values) for values in cls.params]
    for axis, values, allowed in (("framework", frameworks, FRAMEWORKS),
                                  ("backend", backends, registry.names())):
        if values is None:
            continue
        if axis not in names:
            raise ValueError(f"{cls.__name__} has no {axis} axis; its axes are "
                             f"{', '.join(names)}")
        if not values:
            raise ValueError(f"{cls.__name__}: the {axis} axis needs at least one value")
        for value in values:
            if value not in allowed:
                raise ValueError(f"{axis} {value!r} is not allowed; choose one of "
                                 f"{', '.join(allowed)}")
        params[names.index(axis)] = list(values)
    return params

