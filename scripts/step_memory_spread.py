"""How far one cell's step memory moves between processes, printed as text (nothing
written): one Exercise 6.4 cell's step memory over fresh processes, read the way asv reads
it (one process per reading: the benchmark module imported under ``MHABENCH_GRID``, the
class's setup, then one ``track_`` method), for the live peak (``track_step_bytes``) and
the RSS cross-check (``track_step_rss_bytes``).

    python scripts/step_memory_spread.py --heads 8 64 --processes 10
    python scripts/step_memory_spread.py --framework jax --backend loop --methods track_step_bytes
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("track_step_bytes", "track_step_rss_bytes")
_READ = """
    from benchmarks.bench_heads import HeadsAtFixedWidth
    bench = HeadsAtFixedWidth()
    names, params = bench.param_names, bench.params
    values = dict(zip(names, (p[0] for p in params)))
    values.update(framework={framework!r}, backend={backend!r}, heads={heads})
    cell = tuple(values[name] for name in names)
    bench.setup(*cell)
    print(getattr(bench, {method!r})(*cell))
"""


def reading(framework: str, backend: str, heads: int, method: str) -> int:
    """One fresh process's reading of ``method`` at the grid's Exercise 6.4 shape."""
    code = textwrap.dedent(_READ.format(framework=framework, backend=backend, heads=heads,
                                        method=method))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ})
    if done.returncode:
        raise SystemExit(f"{method} h={heads}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="torch")
    parser.add_argument("--backend", default="batched")
    parser.add_argument("--heads", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    args = parser.parse_args()
    for heads in args.heads:
        for method in args.methods:
            read = [reading(args.framework, args.backend, heads, method)
                    for _ in range(args.processes)]
            spread = (max(read) - min(read)) / min(read) if min(read) else float("nan")
            print(f"{args.framework}/{args.backend} h={heads} {method}: "
                  f"{', '.join(f'{v / 2**20:,.1f}' for v in read)} MiB; min {min(read):,} "
                  f"bytes, max {max(read):,} bytes, spread {spread:.2%}", flush=True)


if __name__ == "__main__":
    main()
