"""One commit built into several dependency sets, each an asv environment of its own, and
timed in rounds of fresh processes that run every environment, their order alternating.

``mhabench versions`` (two sets) and ``mhabench releases`` (a list of them) share this:

- **Build** (:meth:`DependencySets.build`): one set at a time, ``asv run --bench
  just-discover`` with a config of that set alone, so a failure names its set and pip's
  reason; the packages it pins are read back from the environment and checked.
- **Rounds** (:meth:`DependencySets.rounds`): half the rounds with the sets in their order,
  half reversed (ABAB... then BABA... for two), each a fresh process per cell and set that
  takes exactly ``SAMPLES`` samples, appended to the set's results file; each process's
  median is one unit of evidence (:mod:`mhabench.analysis.comparisons.process_compare`).
- **Readings** (:meth:`DependencySets.kernels_and_compile`): one process per track cell and
  set: the kernel each set ran (``track_kernel``, recorded whatever the grid,
  ``MHABENCH_KERNELS=1``) and the compile-time cells ``-b`` selects.

:meth:`DependencySets.timed` and :meth:`DependencySets.kernels` have the signatures of
:class:`mhabench.compare.bisect.Bisect`'s ``rounds`` and ``tracks``: a culprit search walks
an ordered list of sets with them, building only the sets it probes and skipping one that
fails to install, as it skips a commit that fails to build.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from mhabench.compare.halves import Timed, merge
from mhabench.compare.rounds import (
    cell_pattern,
    preimport,
    process_medians,
    read_cells,
    result_files,
    round_args,
    run_asv,
)
from mhabench.compare.sides import (
    Side,
    SideError,
    check_on_index,
    environments,
    index_versions,
    installed_versions,
    project_requirements,
    versions_config,
)
from mhabench.core.config import FRAMEWORK_PACKAGES

KERNEL_VAR = "MHABENCH_KERNELS"  # mhabench.bench.axes records track_kernel when set
COMPILE_BENCH = "bench_compile.CompileTime.track_compile_seconds"
# Read back from every environment besides a set's own pins (those it installed).
READ_BACK = tuple(p for packages in FRAMEWORK_PACKAGES.values() for p in packages)


def unused_packages(benches: Sequence[str]) -> tuple[str, ...]:
    """The framework packages none of ``benches`` (asv -b regexes) needs: those of the
    frameworks :func:`~mhabench.compare.rounds.preimport` leaves out. A set's environment
    leaves them out (a JAX sweep builds no torch: 0.7 GB and half a minute an
    environment)."""
    needed = preimport(benches)
    return tuple(p for framework, packages in FRAMEWORK_PACKAGES.items()
                 if framework not in needed for p in packages)


def kernel_cell(cell: str) -> str | None:
    """The ``track_kernel`` cell beside a ``time_step`` cell (None for other cells)."""
    return cell.replace(".time_step(", ".track_kernel(", 1) if ".time_step(" in cell else None


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and value == value else None


class DependencySets:
    """The sets (by label, in their order) of one commit: their environments, rounds and
    readings, asv's configs and results under ``folder``."""

    def __init__(self, sides: Sequence[Side], folder: Path, benches: Sequence[str], *,
                 root: Path = Path("."), grid: str = "quick", machine: str | None = None,
                 echo: Callable[[str], None] = print) -> None:
        self.root = Path(root).resolve()
        if not (self.root / "asv.conf.json").is_file():
            raise SideError(f"{str(root)!r} has no asv.conf.json: run from the project's root")
        self.sides = {side.label: side for side in sides}
        self.folder = Path(folder).resolve()
        self.results = self.folder / "results"
        self.benches = list(benches)
        self.leave_out = unused_packages(self.benches)
        self.grid, self.machine, self.echo = grid, machine, echo
        self.commit = subprocess.run(["git", "-C", str(self.root), "rev-parse", "HEAD"],
                                     capture_output=True, text=True, check=True).stdout.strip()
        self.env_names: dict[str, str] = {}  # label -> asv environment name, once built
        self.versions: dict[str, dict[str, str | None]] = {}  # what each set installed
        self.broken: dict[str, str] = {}  # label -> why it failed to install (skipped)

    # -- running asv ---------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        from mhabench.measure.conditions.machine_load import LOAD_DIR_ENV

        env = {**os.environ, "MHABENCH_GRID": self.grid, KERNEL_VAR: "1",
               "MHABENCH_PREIMPORT": ",".join(preimport(self.benches))}
        env.pop(LOAD_DIR_ENV, None)  # the records stay beside this folder's results
        return env

    def run(self, config: Path, args: Sequence[str]) -> tuple[int, str]:
        """``asv run`` of this commit with ``config``; (exit status, log)."""
        extra = ["--machine", self.machine] if self.machine else []
        return run_asv(config, [f"{self.commit}^!", *extra, *args], self._env(), self.root,
                       self.echo)

    def file(self, label: str, results: Path | None = None) -> Path | None:
        return result_files(results or self.results, self.commit).get(self.env_names[label])

    def config(self, folder: Path, labels: Sequence[str], name: str) -> Path:
        """``folder/<name>/asv.conf.json`` with the sets of ``labels`` in that order, each
        without the frameworks no cell of ``-b`` needs (:func:`versions_config`)."""
        return versions_config(self.root, folder, [self.sides[label] for label in labels],
                               name, self.leave_out)

    # -- building ------------------------------------------------------------------------
    def check(self) -> None:
        """Bad input before anything runs: each pin on the index (raises SideError)."""
        project = project_requirements(self.root)
        lookup = functools.cache(index_versions)  # one look-up per package, not per set
        for side in self.sides.values():
            check_on_index(side, project, lookup)

    def build(self, label: str) -> None:
        """The set's environment, on its own so that a failure names it (raises
        SideError with pip's reason), checked against its pins; once per set."""
        if label in self.env_names:
            return
        side = self.sides[label]
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.config(self.folder, [label], f"build-{label}")
        env = environments(config)[label]
        code, log = self.run(config, ["--bench", "just-discover"])
        if code != 0 or not (self.results / "benchmarks.json").is_file():
            # pip's own reason first ("ERROR: ..."), else asv's last error
            lines = [line.strip(" ·") for line in log.splitlines()]
            errors = ([line for line in lines if line.startswith("ERROR:")]
                      or [line for line in lines if "error" in line.lower()])
            raise SideError(f"{side.name} ({side.describe()}) failed to install: "
                            + (errors[-1] if errors else log.strip()[-300:]))
        python = Path(env._path) / "bin" / "python"
        have = installed_versions(python, sorted(
            {*side.pins, *(p for p in READ_BACK if p not in self.leave_out)}))
        self.versions[label] = have
        wrong = [f"{n} {have.get(n)} instead of {v}" for n, v in side.pins.items()
                 if have.get(n) != v]
        if wrong:
            raise SideError(f"{side.name} installed {', '.join(wrong)} (pip resolved other "
                            "versions: pin the packages that need each other together, e.g. "
                            "jax, jaxlib and flax)")
        self.env_names[label] = env.name

    def built(self, labels: Iterable[str]) -> list[str]:
        """Those of ``labels`` whose environment builds (built now where not yet); a set
        that fails to install is said once and left out (:attr:`broken`)."""
        out = []
        for label in labels:
            if label not in self.broken:
                try:
                    self.build(label)
                except SideError as err:
                    self.broken[label] = str(err)
                    self.echo(f"{err}; skipped")
            if label in self.env_names:
                out.append(label)
        return out

    def orders(self, labels: Sequence[str], folder: Path,
               names: tuple[str, str] = ("forward", "reverse")) -> tuple[Path, Path]:
        """Two configs in ``folder`` that run the sets of ``labels``: in their order, and
        reversed (asv runs a round's environments in the config's order)."""
        return (self.config(folder, labels, names[0]),
                self.config(folder, labels[::-1], names[1]))

    # -- timing --------------------------------------------------------------------------
    def rounds(self, configs: tuple[Path, Path], labels: Sequence[str],
               benches: Sequence[str], count: int, results: Path | None = None) -> Timed:
        """``count`` rounds of the (built) sets of ``labels`` on ``benches`` (asv -b regexes;
        all when empty): the first half (one more where odd) in ``configs[0]``'s order, the
        rest in ``configs[1]``'s, appended to the results files in ``results`` (default
        the sets' own). Returns cell -> set -> these rounds' process medians (None where the
        cell failed). A cell that fewer than two sets ran in the first half is left out of
        the second: it has nothing left to compare."""
        out: Timed = {}
        benches = list(benches)
        for config, part in zip(configs, ((count + 1) // 2, count // 2), strict=True):
            if not part:
                continue
            args = [*round_args(part), "--append-samples"]
            for bench in benches:
                args += ["-b", bench]
            before = {label: read_cells(self.file(label, results)) for label in labels}
            code, log = self.run(config, args)
            for label in labels:
                path = self.file(label, results)
                if path is None:  # a failing cell is a reading; no results at all is not
                    raise RuntimeError(f"asv run saved nothing for {self.sides[label].name} "
                                       f"(exit status {code}): {log.strip()[-1500:]}")
                for cell, samples in read_cells(path).items():
                    old = before[label].get(cell)
                    if cell in before[label] and samples == old:
                        continue  # a cell of an earlier call, not run in this one
                    merge(out, {cell: {label: None if samples is None else process_medians(
                        samples[len(old or []):])}})
            # each cell by name: the second half times no compile cell that -b selects
            benches = [cell_pattern(cell) for cell, by in out.items()
                       if sum(medians is not None for medians in by.values()) >= 2]
            if not benches:
                break
        return out

    def kernels_and_compile(self, config: Path, labels: Sequence[str], cells: Iterable[str],
                            results: Path | None = None
                            ) -> tuple[dict[str, dict[str, str | None]],
                                       dict[str, dict[str, float | None]]]:
        """One process per cell and set (``config``'s order): the kernel each set ran for
        the timed ``cells`` (cell -> set -> kernel name, None where unknown) and the
        compile-time cells that ``-b`` selects, as asv selects them (none unless a regex
        matches one): cell -> set -> seconds, None where it failed. Compile times are
        readings of one process a set, never judged."""
        from mhabench.asvproject.result_files import BENCHMARKS, selected_cells
        from mhabench.core.kernel_codes import KERNEL_NAMES

        tracks = {k: cell for cell in cells if (k := kernel_cell(cell)) is not None}
        listing = (results or self.results) / BENCHMARKS  # written by the build
        compiled = selected_cells(json.loads(listing.read_text()), COMPILE_BENCH,
                                  self.benches) if listing.is_file() else []
        patterns = [cell_pattern(c) for c in [*tracks, *compiled]]
        if not patterns:
            return {}, {}
        values = self.readings(config, labels, patterns, results)
        kernels: dict[str, dict[str, str | None]] = {}
        for track, cell in tracks.items():
            for label in labels:
                code = _number(values[label].get(track))
                kernels.setdefault(cell, {})[label] = (None if code is None
                                                       else KERNEL_NAMES.get(int(code)))
        seconds: dict[str, dict[str, float | None]] = {}
        for name in compiled:
            for label in labels:
                if name in values[label]:  # else n/a: a cell the grid skips
                    seconds.setdefault(name, {})[label] = _number(values[label][name])
        return kernels, seconds

    def readings(self, config: Path, labels: Sequence[str], benches: Sequence[str],
                 results: Path | None = None) -> dict[str, dict[str, Any]]:
        """One ``asv run`` of the track cells ``benches`` selects (asv -b regexes): set ->
        cell -> value."""
        args = []
        for bench in benches:
            args += ["-b", bench]
        self.run(config, args)
        return {label: read_cells(self.file(label, results), ("track_",)) for label in labels}

    # -- a culprit search's rounds and tracks ----------------------------------------------
    def timed(self, points: Sequence[str], benches: Sequence[str], count: int, folder: Path,
              **_: Any) -> Timed:
        """Bisect's ``rounds``: ``count`` rounds of the sets ``points`` (labels), asv's
        configs and results in ``folder`` (new); a set that fails to install reads None
        for every cell. (The search's own keywords are this object's: root, machine,
        echo.)"""
        labels = self.built(points)
        timed = self.rounds(self.orders(labels, Path(folder)), labels, benches, count,
                            Path(folder) / "results") if labels else {}
        for by in timed.values():
            by.update({label: None for label in points if label not in labels})
        return timed

    def kernels(self, points: Sequence[str], benches: Sequence[str], folder: Path,
                **_: Any) -> dict[str, dict[str, str | None]]:
        """Bisect's ``tracks``: the kernel each set of ``points`` ran for the
        ``track_kernel`` cells ``benches`` selects (one process each): cell -> set ->
        kernel name."""
        from mhabench.core.kernel_codes import KERNEL_NAMES

        labels = self.built(points)
        config = self.config(Path(folder), labels, "forward")
        values = self.readings(config, labels, benches, Path(folder) / "results")
        out: dict[str, dict[str, str | None]] = {}
        for label, cells in values.items():
            for cell, code in cells.items():
                known = _number(code)
                out.setdefault(cell, {})[label] = (None if known is None
                                                   else KERNEL_NAMES.get(int(known)))
        return out
