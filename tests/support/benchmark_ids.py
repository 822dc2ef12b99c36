"""The suite's asv benchmarks as asv's discovery sees them, under one grid.

asv names a result by benchmark name and parameter cell, so results taken before a change
to ``benchmarks/`` load beside those taken after it only if discovery lists the same
names, parameters and skipped cells. :func:`discovered` lists them (asv_runner's own
discovery, in a fresh interpreter: the modules read the grid at import);
``tests/test_benchmark_ids.py`` compares the tiny grid's with a committed listing.

Run as a script from the repository root, it writes every grid's listing, to compare all
of a change's grids by hand: ``python -m tests.support.benchmark_ids OUT_DIR [GRID...]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "benchmark_ids_tiny.json"

_LIST = textwrap.dedent("""
    import itertools, json, sys
    from asv_runner._aux import update_sys_path
    from asv_runner.discovery import disc_benchmarks
    update_sys_path("benchmarks")
    out = []
    for b in disc_benchmarks("benchmarks"):
        public = {k: v for k, v in vars(b).items()
                  if isinstance(v, (str, int, float, list, tuple, dict, bool))
                  and not k.startswith("_") and k not in ("code", "version", "version_alts")}
        cells = list(itertools.product(*b._params))
        skip = set(b._skip_tuples)
        public["skipped"] = [i for i, cell in enumerate(cells) if cell in skip]
        out.append(public)
    print(json.dumps(sorted(out, key=lambda b: b["name"])))
""")

# What the committed listing keeps of each benchmark: its id, cells and kind.
KEYS = ("name", "type", "unit", "param_names", "params", "skipped")


def discovered(grid: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every benchmark asv discovers under ``grid``: its public attributes as asv's
    ``benchmarks.json`` has them, less ``code``, ``version`` and ``version_alts`` (hashes
    of the source), and ``skipped``, the indices of the cells it skips in asv's parameter
    product."""
    # Only the grid and what the caller names: no MHABENCH_* of this shell leaks in.
    base = {k: v for k, v in os.environ.items() if not k.startswith("MHABENCH_")}
    done = subprocess.run(
        [sys.executable, "-c", _LIST], cwd=ROOT, text=True, capture_output=True, timeout=300,
        env={**base, "MHABENCH_GRID": grid, "MHABENCH_PREIMPORT": "none",
             "MHABENCH_THREADS": "1", **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.splitlines()[-1])


def brief(benchmarks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The committed listing's fields (:data:`KEYS`) of each benchmark."""
    return [{k: b.get(k) for k in KEYS} for b in benchmarks]


def write_fixture() -> None:
    """Rewrite :data:`FIXTURE` from the tiny grid (one benchmark a line), only for a change
    that means to change asv's ids."""
    rows = ",\n".join(json.dumps(b) for b in brief(discovered("tiny")))
    FIXTURE.write_text(f"[\n{rows}\n]\n")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or ["tiny", "quick", "full"]:
        (out / f"{name}.json").write_text(json.dumps(discovered(name), indent=1) + "\n")
