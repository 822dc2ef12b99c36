"""Every asv cell of the suite under a grid: each benchmark method x parameter cell that
asv starts (the grid's ``skip_params`` left out), named as asv names it.

The benchmark modules read the grid from the environment when they are imported, so the
listing runs in a fresh interpreter with that environment (``list_cells``). The GPU run
(``mhabench.device.run``) counts these per class; the shard plan
(``mhabench.cluster.shard``) predicts each one's time.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("time_", "track_", "peakmem_", "mem_")  # asv's benchmark kinds, by name prefix


def cell_rows() -> list[dict[str, Any]]:
    """The suite's cells as :class:`Cell` fields, from this interpreter's ``benchmarks``
    package (importable from the working directory, imported under this environment's
    grid); :func:`list_cells` runs it in a fresh interpreter."""
    import importlib
    import itertools
    import pkgutil

    import benchmarks

    out = []
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda i: i.name):
        if not info.name.startswith("bench_"):
            continue
        module = importlib.import_module("benchmarks." + info.name)
        for name, cls in vars(module).items():
            if (not isinstance(cls, type) or cls.__module__ != module.__name__
                    or not isinstance(getattr(cls, "params", None), list)):
                continue
            cells = list(itertools.product(*cls.params))
            repeat = getattr(cls, "repeat", 0)
            for method in sorted(dir(cls), key=lambda m: (not m.startswith("time_"), m)):
                if not method.startswith(KINDS):
                    continue
                skip = getattr(getattr(cls, method), "skip_params", None)
                skip = set(getattr(cls, "skip_params", []) if skip is None else skip)
                for index, cell in enumerate(cells):
                    if cell in skip:
                        continue
                    out.append({"module": info.name, "cls": name, "method": method,
                                "values": [repr(v) for v in cell],
                                "params": dict(zip(cls.param_names, cell, strict=True)),
                                "rounds": getattr(cls, "rounds", 1),
                                "repeat": list(repeat) if isinstance(repeat, tuple) else repeat,
                                "warmup_time": getattr(cls, "warmup_time", 0.0),
                                "index": index})
    return out


_LIST = """
import json
from mhabench.asvproject.cells import cell_rows
print(json.dumps(cell_rows(), default=str))
"""


class CellListError(ValueError):
    """The benchmark modules could not be imported under the requested grid."""


@dataclass(frozen=True)
class Cell:
    """One asv cell: a benchmark method at one parameter cell."""

    module: str  # bench_gqa
    cls: str  # MhaGqaMqa
    method: str  # time_step
    values: tuple[str, ...]  # the parameter values' reprs, as asv writes them
    params: dict[str, Any]  # parameter name -> value
    rounds: int  # asv processes per cell
    repeat: Any  # asv's repeat attribute: an int or (min, max, max seconds)
    warmup_time: float
    index: int = -1  # the cell's place in asv's parameter product (its "name-index" id)

    @property
    def benchmark(self) -> str:
        """asv's benchmark name (``bench_gqa.MhaGqaMqa.time_step``)."""
        return f"{self.module}.{self.cls}.{self.method}"

    @property
    def name(self) -> str:
        """asv's cell name, as ``asv compare`` prints it and ``-b`` matches it."""
        return f"{self.benchmark}({', '.join(self.values)})"

    @property
    def kind(self) -> str:
        return self.method.split("_", 1)[0]


def list_cells(python: str, env: dict[str, str], repo: Path) -> list[Cell]:
    """The suite's cells under ``env`` (its MHABENCH_GRID and MHABENCH_DEVICES), listed
    by ``python`` in ``repo`` (the folder holding ``benchmarks/``), in module order."""
    if env.get("ASV_PYTHONPATH"):  # as asv's benchmark processes see it (plug-ins)
        env = {**env, "PYTHONPATH": os.pathsep.join(
            p for p in (env["ASV_PYTHONPATH"], env.get("PYTHONPATH", "")) if p)}
    # Listing imports no framework up front (mhabench.bench.common): the cells are the same,
    # and the frameworks' import is most of the listing's time.
    env = {**env, "MHABENCH_PREIMPORT": "none"}
    done = subprocess.run([python, "-c", _LIST], cwd=repo, env=env, text=True,
                          capture_output=True, timeout=600)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise CellListError(f"the benchmark modules do not import: {tail[0]}")
    return cells_of(json.loads(done.stdout.splitlines()[-1]))


def cells_of(rows: list[dict[str, Any]]) -> list[Cell]:
    """:class:`Cell` objects from :func:`cell_rows`' rows."""
    return [Cell(**{**item, "values": tuple(item["values"])}) for item in rows]
