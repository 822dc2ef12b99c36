"""Did an upgrade slow my attention? One commit timed in two dependency sets, a verdict per
cell and the kernel each side ran.

asv pairs results only within one environment, so ``asv compare`` cannot answer this. Here
each side is an asv environment of its own (:mod:`mhabench.compare.sides`: the project's
matrix with the side's pins swapped in, or local packages installed beside it), and both
sides' results go, under their environments' names, into one new folder
``.asv/versions/<UTC time>/results``, never into ``.asv/results``.

1. **Build**: ``asv run --bench just-discover`` per side builds its environment and
   installs the project; the packages it was asked to pin are then read back from the
   environment (pip may have resolved another version).
2. **Screen**: :data:`SCREEN_ROUNDS` rounds; in each, one ``asv run`` per side (a fresh
   process per cell, ``rounds=1``), the sides' order alternating ABBA so that a slow stretch
   of the machine falls on both. asv appends each process's samples to the side's results
   (``--append-samples``); the new samples of each call are that process's, and its median
   is one unit of evidence (:mod:`mhabench.analysis.process_compare`).
3. **Confirm**: every cell whose screen ratio passes :data:`SCREEN_FACTOR` either way runs
   again in :data:`CONFIRM_ROUNDS` fresh rounds. It is ``slower`` or ``faster`` only if
   the confirmation's interval clears 1.0, its ratio passes :data:`FACTOR`, and it leans
   the way the screen did; else ``cleared``. A cell measured on one side and failing on the
   other is ``failed on new`` (or ``failed on base``), a verdict like the others.
4. **Kernels and compile time**: one process per cell and side for ``track_kernel``
   (recorded whatever the grid, ``MHABENCH_KERNELS=1``), and for the compile-time cells
   (``bench_compile``) that ``-b`` selects: readings, not verdicts (one process a side
   carries none, and each takes a compile).

Everything is summed up in ``versions.json`` beside the results; ``mhabench report
--results <folder>/results`` reads it into its "Versions side by side" section.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mhabench.analysis.process_compare import (
    FACTOR,
    SCREEN_FACTOR,
    compare,
    lean,
    two_stage,
)
from mhabench.analysis.versions import SUMMARY
from mhabench.compare.rounds import (
    CONFIRM_ROUNDS,
    SAMPLES,
    SCREEN_ROUNDS,
    cell_pattern,
    preimport,
    process_medians,
    read_cells,
    result_files,
    round_args,
    run_asv,
)
from mhabench.compare.sides import (
    SIDES,
    Side,
    SideError,
    check_on_index,
    environments,
    installed_versions,
    parse_side,
    side_include,
    versions_config,
)

VERSIONS_DIR = Path(".asv") / "versions"
KERNEL_VAR = "MHABENCH_KERNELS"  # mhabench.bench.axes records track_kernel when set
COMPILE_BENCH = "bench_compile.CompileTime.track_compile_seconds"


@dataclass
class Cell:
    """One timed cell's evidence and verdict."""

    name: str  # asv's cell name: "bench_x.Class.time_step(params)"
    processes: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: {stage: {s: [] for s in SIDES}
                                 for stage in ("screen", "confirm")})
    failed: set[str] = field(default_factory=set)  # sides where a process failed
    screen: dict[str, Any] | None = None
    confirm: dict[str, Any] | None = None
    verdict: str = ""
    kernel: dict[str, str | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        final = self.confirm or self.screen or {}
        kernels = [self.kernel.get(s) for s in SIDES]
        return {"cell": self.name, "verdict": self.verdict, "ratio": final.get("ratio"),
                "low": final.get("low"), "high": final.get("high"),
                "screen": self.screen, "confirm": self.confirm,
                "kernel_base": kernels[0], "kernel_new": kernels[1],
                "kernel_changed": None not in kernels and kernels[0] != kernels[1],
                "failed": sorted(self.failed), "processes": self.processes}


class Comparison:
    """One versions run: its folder, sides, commit and cells (see the module docstring)."""

    def __init__(self, base: str, new: str, benches: Sequence[str], *, grid: str = "quick",
                 machine: str | None = None, root: Path = Path("."),
                 echo: Callable[[str], None] = print) -> None:
        self.root = Path(root).resolve()
        if not (self.root / "asv.conf.json").is_file():
            raise SideError(f"{str(root)!r} has no asv.conf.json: run from the project's root")
        self.sides = {label: parse_side(label, text)
                      for label, text in zip(SIDES, (base, new), strict=True)}
        self.benches = list(benches)
        self.grid, self.machine, self.echo = grid, machine, echo
        self.commit = subprocess.run(["git", "-C", str(self.root), "rev-parse", "HEAD"],
                                     capture_output=True, text=True, check=True).stdout.strip()
        self.folder = (self.root / VERSIONS_DIR
                       / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ"))
        self.results = self.folder / "results"
        self.configs: dict[str, Path] = {}
        self.env_names: dict[str, str] = {}
        self.versions: dict[str, dict[str, str | None]] = {}
        self.cells: dict[str, Cell] = {}
        self.compile: dict[str, dict[str, float | None]] = {}
        self.seconds: dict[str, float] = {}

    # -- running asv ---------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {**os.environ, "MHABENCH_GRID": self.grid, KERNEL_VAR: "1",
               "MHABENCH_PREIMPORT": ",".join(preimport(self.benches))}
        env.pop("MHABENCH_LOAD_DIR", None)  # the records stay beside this folder's results
        return env

    def _run(self, config: str, args: Sequence[str]) -> tuple[int, str]:
        extra = ["--machine", self.machine] if self.machine else []
        return run_asv(self.configs[config], [f"{self.commit}^!", *extra, *args],
                       self._env(), self.root, self.echo)

    def _file(self, side: str) -> Path | None:
        return result_files(self.results, self.commit).get(self.env_names[side])

    def check(self) -> None:
        """Bad input before anything runs: each pin on the index (raises SideError)."""
        from asv.util import load_json

        conf = load_json(str(self.root / "asv.conf.json"), js_comments=True)
        project = side_include(conf, Side("base", ""))["req"]
        for side in self.sides.values():
            check_on_index(side, {k.lower(): v for k, v in project.items()})

    def build(self) -> None:
        """Each side's environment, built on its own (so a failure names its side) and
        checked against its pins; then the two configs that run both, in either order."""
        self.folder.mkdir(parents=True)
        sides = [self.sides[label] for label in SIDES]
        for side in sides:
            self.configs[side.label] = versions_config(self.root, self.folder, [side],
                                                       f"build-{side.label}")
            env = environments(self.configs[side.label])[side.label]
            self.env_names[side.label] = env.name
            code, log = self._run(side.label, ["--bench", "just-discover"])
            if code != 0 or not (self.results / "benchmarks.json").is_file():
                # pip's own reason first ("ERROR: ..."), else asv's last error
                lines = [line.strip(" ·") for line in log.splitlines()]
                errors = ([line for line in lines if line.startswith("ERROR:")]
                          or [line for line in lines if "error" in line.lower()])
                raise SideError(f"side {side.label} ({side.describe()}) failed to install: "
                                + (errors[-1] if errors else log.strip()[-300:]))
            python = Path(env._path) / "bin" / "python"
            names = sorted({*side.pins, "torch", "jax", "jaxlib", "flax"})
            have = installed_versions(python, names)
            self.versions[side.label] = have
            wrong = [f"{n} {have.get(n)} instead of {v}" for n, v in side.pins.items()
                     if have.get(n) != v]
            if wrong:
                raise SideError(f"side {side.label} installed {', '.join(wrong)} (pip "
                                "resolved other versions: pin the packages that need each "
                                "other together, e.g. jax, jaxlib and flax)")
        self.configs["ab"] = versions_config(self.root, self.folder, sides, "ab")
        self.configs["ba"] = versions_config(self.root, self.folder, sides[::-1], "ba")

    def _rounds(self, stage: str, rounds: int, only: Sequence[str] | None) -> None:
        """``rounds`` rounds of fresh processes, half with base first, half with new first
        (ABAB... then BABA...); each process's samples become one median."""
        for config, count in (("ab", (rounds + 1) // 2), ("ba", rounds // 2)):
            if config == "ba":  # a cell that failed on a side is a verdict already
                only = [c for c in (only if only is not None else self.cells)
                        if not self.cells[c].failed]
            benches = [cell_pattern(c) for c in only] if only is not None else self.benches
            if not count or not benches:
                continue
            args = [*round_args(count), "--append-samples"]
            for bench in benches:
                args += ["-b", bench]
            before = {side: read_cells(self._file(side)) for side in SIDES}
            code, log = self._run(config, args)
            for side in SIDES:
                path = self._file(side)
                if path is None:  # a failing cell is a verdict; no results at all is not
                    raise RuntimeError(f"asv run saved nothing for side {side} (exit "
                                       f"status {code}): {log.strip()[-1500:]}")
                self._record(stage, side, before[side], read_cells(path), only)

    def _record(self, stage: str, side: str, before: dict[str, Any], after: dict[str, Any],
                only: Sequence[str] | None) -> None:
        for name, samples in after.items():
            if only is not None and name not in only:
                continue
            cell = self.cells.setdefault(name, Cell(name))
            if samples is None:
                cell.failed.add(side)
                continue
            cell.processes[stage][side] += process_medians(
                samples[len(before.get(name) or []):])

    def _judge(self, cell: Cell, stage: str) -> dict[str, Any] | None:
        base, new = (cell.processes[stage][s] for s in SIDES)
        if len(base) < 2 or len(new) < 2:
            return None
        return compare(base, new).as_dict()

    def screen(self) -> list[str]:
        """The screen's rounds; returns the cells passed on to the confirmation."""
        self.echo(f"mhabench versions: screen, {SCREEN_ROUNDS} rounds")
        self._rounds("screen", SCREEN_ROUNDS, None)
        passed = []
        for cell in self.cells.values():
            cell.screen = self._judge(cell, "screen")
            if cell.failed:
                continue
            if cell.screen is None:
                cell.verdict = "not timed"
                continue
            if lean(_as_comparison(cell.screen)):
                passed.append(cell.name)
            else:
                cell.verdict = "unchanged"
        return passed

    def confirm(self, passed: Sequence[str]) -> None:
        if passed:
            self.echo(f"mhabench versions: confirmation of {len(passed)} cell(s), "
                      f"{CONFIRM_ROUNDS} rounds")
            self._rounds("confirm", CONFIRM_ROUNDS, passed)
        for name in passed:
            cell = self.cells[name]
            cell.confirm = self._judge(cell, "confirm")
            cell.verdict = two_stage(_as_comparison(cell.screen), _as_comparison(
                cell.confirm) if cell.confirm else None)

    def failures(self) -> None:
        for cell in self.cells.values():
            if cell.failed:
                cell.verdict = ("failed on both" if cell.failed == set(SIDES)
                                else f"failed on {next(iter(cell.failed))}")

    def kernels_and_compile(self) -> None:
        """track_kernel of every timed cell, and the compile-time cells ``-b`` selects (as
        asv selects them: none unless a regex matches one), once per side: compile times are
        readings of one process a side, never judged."""
        from mhabench.asvproject.result_files import BENCHMARKS, selected_cells
        from mhabench.core.kernel_codes import KERNEL_NAMES

        kernel_cells = [c.replace(".time_step(", ".track_kernel(", 1) for c in self.cells
                        if ".time_step(" in c]
        listing = self.results / BENCHMARKS  # written by the build
        compile_cells = selected_cells(json.loads(listing.read_text()), COMPILE_BENCH,
                                       self.benches) if listing.is_file() else []
        args = []
        for cell in kernel_cells + compile_cells:
            args += ["-b", cell_pattern(cell)]
        if not args:
            return
        self._run("ab", args)
        for side in SIDES:
            values = read_cells(self._file(side), ("track_",))
            for cell in self.cells.values():
                code = values.get(cell.name.replace(".time_step(", ".track_kernel(", 1))
                cell.kernel[side] = KERNEL_NAMES.get(int(code)) if isinstance(
                    code, (int, float)) and code == code else None
            for name in compile_cells:
                if name in values:  # else n/a: a cell the grid skips
                    value = values[name]
                    self.compile.setdefault(name, {})[side] = value if isinstance(
                        value, (int, float)) and value == value else None

    def summary(self) -> dict[str, Any]:
        return {"commit": self.commit, "grid": self.grid, "benches": self.benches,
                "folder": str(self.folder),
                "sides": {label: {"text": side.text, "describe": side.describe(),
                                  "pins": side.pins,
                                  "local": [str(p) for p in side.local],
                                  "env_name": self.env_names.get(label),
                                  "versions": self.versions.get(label, {})}
                          for label, side in self.sides.items()},
                "settings": {"screen_rounds": SCREEN_ROUNDS, "confirm_rounds": CONFIRM_ROUNDS,
                             "screen_factor": SCREEN_FACTOR, "factor": FACTOR,
                             "samples_per_process": SAMPLES},
                "seconds": self.seconds,
                "cells": [cell.as_dict() for cell in self.cells.values()],
                "compile_seconds": [{"cell": k, **v} for k, v in self.compile.items()]}

    def write(self) -> Path:
        path = self.folder / SUMMARY
        path.write_text(json.dumps(self.summary(), indent=1) + "\n")
        return path

    def run(self) -> dict[str, Any]:
        """All stages; returns the summary (also written to ``versions.json``)."""
        start = time.monotonic()
        self.check()
        self.build()
        self.seconds["build"] = round(time.monotonic() - start, 1)
        passed = self.screen()
        self.seconds["screen"] = round(time.monotonic() - start - self.seconds["build"], 1)
        self.confirm(passed)
        self.seconds["confirm"] = round(time.monotonic() - start - self.seconds["build"]
                                        - self.seconds["screen"], 1)
        self.failures()
        self.kernels_and_compile()
        self.seconds["total"] = round(time.monotonic() - start, 1)
        self.write()
        return self.summary()


def _as_comparison(data: dict[str, Any]) -> Any:
    from mhabench.analysis.process_compare import Comparison as Compared

    return Compared.from_dict(data)
