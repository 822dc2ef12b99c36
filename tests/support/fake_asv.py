"""asv run as :class:`mhabench.compare.dependency_sets.DependencySets` drives it, without
asv: a build (``--bench just-discover``) writes the suite's listing, or fails with pip's
error for a set named broken; a round run (``--interleave-rounds``) appends, round by round
and environment by environment in the config's order, one process's samples per selected
time cell, drawn around the cell's level at that set; a track run writes each set's kernel.
It records what it ran, so a test can check the order and the medians read back."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np

from mhabench.compare.rounds import SAMPLES
from mhabench.compare.sides import SIDE_VAR, environments
from mhabench.core.kernel_codes import KERNEL_CODES

BENCH = "bench_x.Attention"
PARAMS = [["'torch'"], ["'fused'", "'batched'", "'broken'"]]
LISTING = {f"{BENCH}.{kind}_{what}": {"name": f"{BENCH}.{kind}_{what}", "params": PARAMS,
                                       "type": {"time": "time", "track": "track"}[kind]}
           for kind, what in (("time", "step"), ("track", "kernel"))}


def cell(backend: str, kind: str = "time_step") -> str:
    return f"{BENCH}.{kind}('torch', '{backend}')"


CELLS = [cell(b.strip("'")) for b in PARAMS[1]]


class FakeAsv:
    """``levels``: time cell -> set label -> seconds (None: the cell fails there);
    ``kernels``: time cell -> set label -> kernel name; ``broken``: set label -> pip's
    error. Each process's samples are its median times 1 + 0.001 j (j = 0..SAMPLES-1), the
    median the level times lognormal scatter, a slow process (1.3-1.6x) now and then."""

    def __init__(self, levels: dict[str, dict[str, float | None]],
                 kernels: dict[str, dict[str, str]] | None = None,
                 broken: dict[str, str] | None = None, *, scatter: float = 0.02,
                 slow: float = 0.0, seed: int = 0) -> None:
        self.levels, self.kernels, self.broken = levels, kernels or {}, broken or {}
        self.scatter, self.slow = scatter, slow
        self.rng = np.random.default_rng(seed)
        self.builds: list[str] = []
        self.runs: list[dict] = []  # each round run: order, rounds, -b regexes
        self.drawn: dict[tuple[str, str], list[float]] = {}  # (cell, set) -> medians

    def __call__(self, config: Path, args: list[str], env: dict[str, str], root: Path,
                 echo: object) -> tuple[int, str]:
        conf = json.loads(Path(config).read_text())
        results = Path(conf["results_dir"])
        order = [entry["env_nobuild"][SIDE_VAR] for entry in conf["include"]]
        names = {label: e.name for label, e in environments(Path(config)).items()}
        commit = args[0].removesuffix("^!")
        regexes = [args[i + 1] for i, arg in enumerate(args) if arg == "-b"]
        results.mkdir(parents=True, exist_ok=True)
        if "just-discover" in args:
            label = order[0]
            if label in self.broken:
                return 1, f"· Installing\nERROR: {self.broken[label]}\n"
            self.builds.append(label)
            (results / "benchmarks.json").write_text(json.dumps({**LISTING, "version": 2}))
            return 0, ""
        rounds = 1
        if "--interleave-rounds" in args:
            rounds = int(next(a.split("=")[1] for a in args if a.startswith("rounds=")))
            self.runs.append({"order": order, "rounds": rounds, "benches": regexes})
        chosen = [c for c in CELLS if c in self.levels
                  and (not regexes or any(re.search(r, c) for r in regexes))]
        samples: dict[str, dict[str, list[float] | None]] = {label: {} for label in order}
        for _round, label in itertools.product(range(rounds), order):
            for name in chosen:
                level = self.levels[name].get(label)
                if level is None:
                    samples[label][name] = None
                    continue
                median = level * float(np.exp(self.rng.normal(0, self.scatter)))
                if self.rng.random() < self.slow:
                    median *= float(self.rng.uniform(1.3, 1.6))
                self.drawn.setdefault((name, label), []).append(median)
                have = samples[label].setdefault(name, [])
                if have is not None:
                    have += [median * (1 + 0.001 * j) for j in range(SAMPLES)]
        for label in order:
            self._write(results / "m" / f"{commit[:8]}-{names[label]}.json", samples[label],
                        label, regexes, "--interleave-rounds" in args)
        return 0, ""

    def _write(self, path: Path, new: dict[str, list[float] | None], label: str,
               regexes: list[str], timed: bool) -> None:
        """The set's results file with ``new`` samples appended (asv's --append-samples)."""
        data = json.loads(path.read_text()) if path.is_file() else {
            "result_columns": ["result", "params", "samples"], "results": {}}
        time_row = data["results"].setdefault(f"{BENCH}.time_step", [
            [float("nan")] * len(CELLS), PARAMS, [None] * len(CELLS)])
        for i, name in enumerate(CELLS):
            if name not in new:
                continue
            if new[name] is None:
                time_row[0][i], time_row[2][i] = None, None
            else:
                time_row[2][i] = (time_row[2][i] or []) + new[name]
                time_row[0][i] = float(np.median(time_row[2][i]))
        if not timed:  # a track run: the kernel of each selected cell
            kernel_cells = [cell(b.strip("'"), "track_kernel") for b in PARAMS[1]]
            values = [float(KERNEL_CODES[self.kernels[name][label]])
                      if name in self.kernels and any(re.search(r, k) for r in regexes)
                      else float("nan") for name, k in zip(CELLS, kernel_cells, strict=True)]
            data["results"][f"{BENCH}.track_kernel"] = [values, PARAMS]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
