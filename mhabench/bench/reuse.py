"""A benchmark class exported into the asv benchmark module that runs it: mhabench's own
``benchmarks/`` and the module ``mhabench init`` writes into a user's repository.

asv names a benchmark by the module it finds the class in, and the suite keys its
machine-load records and cell listings by the module the class says it is in
(``__module__``). An exported class is a subclass that says that module, with the same
methods (so asv's source hash, and with it the benchmark's version, stays the same) and
its per-method skipped cells worked out again for its own axes; a user's suite narrows
the ``framework`` and ``backend`` axes to its own backends and a few baselines.
"""

from __future__ import annotations

from collections.abc import Sequence


def export(cls: type, module: str, *, frameworks: Sequence[str] | None = None,
           backends: Sequence[str] | None = None) -> type:
    """``cls`` as a class of the asv module ``module`` (pass ``__name__``), with the
    ``framework`` and ``backend`` axes replaced where given (their cells that are no valid
    config, e.g. a torch-only backend's JAX cells, are skipped before any setup)."""
    names = list(cls.param_names)
    params = [list(values) for values in cls.params]
    for axis, values in (("framework", frameworks), ("backend", backends)):
        if values is None:
            continue
        if axis not in names:
            raise ValueError(f"{cls.__name__} has no {axis} axis; its axes are "
                             f"{', '.join(names)}")
        if not values:
            raise ValueError(f"{cls.__name__}: the {axis} axis needs at least one value")
        params[names.index(axis)] = list(values)
    return type(cls.__name__, (cls,), {"__module__": module, "__qualname__": cls.__name__,
                                       "__doc__": cls.__doc__, "param_names": names,
                                       "params": params})
