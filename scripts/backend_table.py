#!/usr/bin/env python3
"""Exercise 6.4 for every registered backend of both frameworks, from one run.

Every backend that runs here times the chapter's cell (batch 8, n 512, d 256, forward) at
each head count. The cells are interleaved over rounds in one process, so the machine's
drift hits all of them alike. Then each cell's cold compile is timed in a fresh process
(``mhabench.measure.compile_time``). Prints a markdown table with the step's median, the compile
seconds and the break-even calls against torch's eager ``batched``.

    MHABENCH_THREADS=1 python scripts/backend_table.py [--heads 1 8 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys

COMPILE = """
import json, sys
from mhabench.core.config import AttentionConfig
from mhabench.measure import timing
from mhabench.measure.compile_time import compile_seconds
timing.configure_process()
print(json.dumps(compile_seconds(AttentionConfig.from_dict(json.loads(sys.argv[1])))))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)

    from mhabench.core import backends
    from mhabench.core.config import AttentionConfig
    from mhabench.measure import timing

    timing.configure_process()
    configs = []
    for framework in ("torch", "jax"):
        for name in backends.names(framework):
            for h in args.heads:
                try:
                    config = AttentionConfig(framework=framework, backend=name,
                                             batch=args.batch, n=512, d=256, heads=h)
                    timing.check_runnable(config)
                except ValueError:
                    continue
                configs.append(config)
    times: dict[str, list[float]] = {c.id: [] for c in configs}
    rng = random.Random(0)
    for _ in range(args.rounds):
        for config in rng.sample(configs, len(configs)):
            times[config.id].extend(timing.measure(config, repeats=3).times_s)
    median = {k: statistics.median(v) for k, v in times.items()}
    compile_s = {}
    for config in configs:
        # torch's eager backends compile nothing; every JAX step is jit-compiled.
        if config.framework == "jax" or config.backend in ("compiled", "flex"):
            done = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(config.to_dict())],
                                  capture_output=True, text=True, timeout=900)
            compile_s[config.id] = json.loads(done.stdout.strip().splitlines()[-1]) \
                if done.returncode == 0 else None
    print("| framework | backend | h | step (ms) | compile (s) | break-even calls |")
    print("| --- | --- | --- | --- | --- | --- |")
    for config in configs:
        seconds = compile_s.get(config.id)
        even = ""
        if seconds is not None and config.framework == "torch":
            saved = median[config.replace(backend="batched").id] - median[config.id]
            even = f"{seconds / saved:,.0f}" if saved > 0 else "never"
        shown = "" if seconds is None else f"{seconds:.2f}"
        print(f"| {config.framework} | {config.backend} | {config.heads} | "
              f"{median[config.id] * 1e3:.1f} | {shown} | {even} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
