"""Run the asv suite on a lent GPU machine in one bounded command (``scripts/gpu-grid``).

Such a machine has its own Python with CUDA builds of torch, jax and flax, no asv, no
package registry, maybe no ``.git``, and gives back only what is written under ``$OUT``.
So this driver:

1. rebuilds ``.git`` from the bundle's ``mhabench.bundle`` when the copied tree has none
   (asv resolves the commit and its date through git);
2. runs the preflight (:mod:`mhabench.measure.conditions.machine`): torch sees CUDA, JAX lists a
   GPU, flax and asv import, the commit resolves; prints each fact and stops with one line if not;
3. runs one ``asv run`` per benchmark class, calibration first, then Exercise 6.4, then the
   other questions, each only if its estimated time fits the budget left (asv saves a
   class's results when its run ends, so a run cut short loses only that class);
4. after each run copies the results (one tarball) and the log into ``--out``;
5. fails when no cell of the asked devices has a value (a broken GPU is not a result).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

from mhabench.analysis.fast_speed import beside_results
from mhabench.asvproject.cells import CellListError, list_cells
from mhabench.core.config import DEVICES, DTYPES
from mhabench.core.grids import GRIDS
from mhabench.device.bundle import BundleError, prepare_history
from mhabench.device.plan import (
    FIRST_PER_RUN_S,
    BenchClass,
    fit_costs,
    plan,
    schedule,
    units,
)
from mhabench.measure.conditions import machine
from mhabench.measure.conditions.machine_load import FOLDER as LOAD_FOLDER

# Classes run in this order (a module's classes keep their order within it); modules
# not named here come after, alphabetically.
MODULE_ORDER = ("bench_calibration", "bench_gpu", "bench_heads", "bench_kernels", "bench_gqa",
                "bench_decode", "bench_cross", "bench_train", "bench_scaling", "bench_compile")
RESULTS_TARBALL = "results.tar.gz"
LOG_FILE = "gpu-grid.log"

class DeviceRunError(RuntimeError):
    """A one-line reason the run cannot go on."""


def discover(python: str, env: dict[str, str], repo: Path) -> list[BenchClass]:
    """The suite's benchmark classes under ``env``'s grid, in :data:`MODULE_ORDER`."""
    try:
        cells = list_cells(python, env, repo)
    except CellListError as exc:
        raise DeviceRunError(str(exc)) from None
    names: dict[tuple[str, str], dict[str, list[str]]] = {}
    for cell in cells:
        methods = names.setdefault((cell.module, cell.cls), {})
        methods.setdefault(cell.method, []).append(cell.name)
    found = [BenchClass(module, name, {m: tuple(c) for m, c in methods.items()})
             for (module, name), methods in names.items()]

    def rank(item: BenchClass) -> tuple[int, str]:
        order = MODULE_ORDER.index(item.module) if item.module in MODULE_ORDER else 99
        return order, item.module

    return sorted(found, key=rank)  # stable: classes keep their order inside a module


def pack_results(results_dir: Path, out: Path) -> Path:
    """Replace ``out/results.tar.gz`` with the whole results folder and the load records
    beside it (``load/``: each CUDA cell's clocks and throttle state), written aside, then
    renamed, so a run killed mid-write leaves the previous tarball whole."""
    target = out / RESULTS_TARBALL
    partial = out / (RESULTS_TARBALL + ".partial")
    load = beside_results(results_dir, LOAD_FOLDER)
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(results_dir, arcname="results")
        if load.is_dir():
            tar.add(load, arcname=LOAD_FOLDER)
    os.replace(partial, target)
    return target


def _run_logged(cmd: list[str], env: dict[str, str], cwd: Path, log: TextIO,
                timeout: float) -> int:
    """Run ``cmd``, echoing its output to stdout and ``log``; kill its process group after
    ``timeout`` seconds (exit status 124, as timeout(1) gives)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def copy() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # asv and the forkserver it started
        proc.wait()
        code = 124
    reader.join(timeout=10)
    log.flush()
    return code


def count_values(results_dir: Path, machine_name: str, commit: str,
                 devices: list[str]) -> int:
    """Timed cells with a value for ``devices`` in this commit's results."""
    from mhabench.analysis.results import load_results

    try:
        frame = load_results(results_dir, machine_name).frame
    except ValueError:
        return 0
    rows = frame[(frame["commit"] == commit) & (frame["kind"] == "time")]
    if "device" in rows:
        rows = rows[rows["device"].isin(devices) | rows["device"].isna()]
    # Calibration rows carry the device as a parameter of their own.
    if "param_device" in rows:
        rows = rows[rows["device"].notna() | rows["param_device"].isin(devices)]
    return int(len(rows))


def summary(results_dir: Path, machine_name: str, commit: str) -> str:
    """The Exercise 6.4 medians (ms) of this commit, one row per framework/backend/dtype."""
    from mhabench.analysis.results import load_results

    frame = load_results(results_dir, machine_name).frame
    rows = frame[(frame["commit"] == commit) & (frame["kind"] == "time")
                 & frame["benchmark"].str.contains("HeadsAtFixedWidth")]
    if rows.empty:
        return "no Exercise 6.4 cells timed"
    table = (rows.assign(ms=rows["value"] * 1e3)
             .pivot_table(index=["device", "dtype", "framework", "backend"],
                          columns="heads", values="ms", aggfunc="median"))
    return table.round(3).to_string()


def run_env(args: argparse.Namespace, repo: Path) -> dict[str, str]:
    """The environment of the asv runs (and of the cell listing)."""
    devices = [d for d in args.devices.split(",") if d]
    return {**os.environ, "MHABENCH_GRID": args.grid, "MHABENCH_DEVICES": ",".join(devices),
           "MHABENCH_DTYPES": args.dtypes, "ASV_PYTHONPATH": str(repo),
           "MHABENCH_THREADS": str(args.threads or
                                   (os.cpu_count() if "cuda" in devices else 1)),
           # JAX takes GPU memory as each cell needs it (not 75 % per process) and keeps
           # compiled programs across the run's processes.
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "JAX_COMPILATION_CACHE_DIR": str(Path(tempfile.gettempdir()) / "mhabench-jax"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def selected_classes(args: argparse.Namespace, env: dict[str, str],
                     repo: Path) -> list[BenchClass]:
    """The classes and methods ``--only``, ``--skip`` and ``--methods`` keep, in run order."""
    classes = []
    for found in discover(args.python, env, repo):
        methods = {m: cells for m, cells in found.methods.items()
                   if re.search(args.methods, m) and cells}
        if (methods and re.search(args.only, found.label)
                and not (args.skip and re.search(args.skip, found.label))):
            classes.append(BenchClass(found.module, found.name, methods))
    return classes


def show_plan(args: argparse.Namespace) -> int:
    """``--plan``: list what the budget holds at ``--per-run`` seconds an eager cell; runs
    nothing (no bundle, preflight or asv)."""
    repo = Path(args.repo).resolve()
    planned = plan(selected_classes(args, run_env(args, repo), repo), args.budget,
                   per_run=args.per_run)
    for item in planned:
        print(f"gpu-grid plan: {item.label}" + (f": {item.runs} runs, {item.seconds:.0f} s"
                                                if item.runs else ""))
    print(f"gpu-grid plan: {sum(p.runs for p in planned)} runs, "
          f"{sum(p.seconds for p in planned):.0f} s of a {args.budget:.0f} s budget at "
          f"{args.per_run:g} s an eager cell")
    return 0


def _preflight(args: argparse.Namespace, repo: Path, out: Path, devices: list[str],
               env: dict[str, str], say) -> dict:
    """The history asv needs (from the bundle where the tree has no ``.git``), then the
    preflight's facts, said and kept in ``out/preflight.json``."""
    bundle_dir = Path(args.bundle) if Path(args.bundle).is_absolute() else repo / args.bundle
    try:
        git_env, note = prepare_history(repo, bundle_dir)
    except BundleError as exc:
        raise DeviceRunError(str(exc)) from None
    env.update(git_env)
    os.environ.update(git_env)  # the preflight's git calls read the same history
    say(f"gpu-grid: {note}")
    try:
        facts = machine.gather(devices, repo)
    except machine.PreflightError as exc:
        raise DeviceRunError(f"preflight failed: {exc}") from None
    for line in machine.describe(facts):
        say(f"preflight: {line}")
    (out / "preflight.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    return facts


def _register_machine(args: argparse.Namespace, repo: Path, env: dict[str, str],
                      facts: dict, results_dir: Path) -> None:
    """asv's machine entry and the machine's facts beside the results; the load records'
    commit, environment name and folder in ``env``."""
    # asv's benchmark processes in an `existing` environment see neither ASV_COMMIT (set
    # only for a commit asv installed) nor ASV_CONF_DIR and ASV_ENV_NAME: the load records
    # (with the GPU state) get them here, under the results' commit and environment name.
    from asv.environment import get_env_name

    env.update({"ASV_COMMIT": facts["commit"],
                "ASV_ENV_NAME": get_env_name("existing", args.python, {}, {}),
                "MHABENCH_LOAD_DIR": str(beside_results(results_dir, LOAD_FOLDER))})
    done = subprocess.run([args.python, "-m", "asv", "machine", "--config",
                           str(repo / args.config), "--machine", args.machine, "--yes"],
                          cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DeviceRunError(f"asv machine failed: {tail[0]}")
    machine.write_facts(facts, results_dir, args.machine)


def _run_classes(args: argparse.Namespace, repo: Path, out: Path, env: dict[str, str],
                 commit: str, results_dir: Path, log: TextIO, say) -> int:
    """One ``asv run`` per planned unit of the selected classes while the budget lasts,
    the results packed after each; 1 if a run failed or was left out, else 0."""
    classes = selected_classes(args, env, repo)
    start, history, status = time.monotonic(), [], 0

    def left() -> float:
        return args.budget - (time.monotonic() - start)

    def run_unit(label: str, regexes: list[str], cells: tuple[str, ...], estimate: float,
                 left: float) -> None:
        nonlocal status
        say(f"gpu-grid: run {label}: {len(cells)} runs, about {estimate:.0f} s of "
            f"{left:.0f} s left")
        began = time.monotonic()
        code = _run_logged([args.python, "-m", "asv", "run", "--config",
                            str(repo / args.config), f"--python={args.python}", "--machine",
                            args.machine, "--set-commit-hash", commit,
                            "--record-samples", "--append-samples", "--show-stderr",
                            *(arg for regex in regexes for arg in ("-b", regex))],
                           env, repo, log, timeout=max(left, 1.0))
        took = time.monotonic() - began
        history.append((units(cells), took))
        say(f"gpu-grid: {label} exit {code} in {took:.0f} s")
        status = status or (1 if code else 0)
        if results_dir.is_dir():
            pack_results(results_dir, out)

    def skip(label: str, runs: int, left: float) -> None:
        nonlocal status
        say(f"gpu-grid: skip {label}: {runs} runs left, {left:.0f} s left")
        status = 1

    schedule(classes, left, lambda: fit_costs(history), run_unit, skip)
    return status


def run(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    devices = [d for d in args.devices.split(",") if d]
    env = run_env(args, repo)
    log = (out / LOG_FILE).open("a")
    say = _sayer(log)
    facts = _preflight(args, repo, out, devices, env, say)
    results_dir = repo / ".asv" / "results"
    _register_machine(args, repo, env, facts, results_dir)
    status = _run_classes(args, repo, out, env, facts["commit"], results_dir, log, say)
    values = count_values(results_dir, args.machine, facts["commit"], devices)
    if values == 0:
        raise DeviceRunError(f"no {'/'.join(devices)} cell has a value: every cell failed "
                             f"or was n/a (see {out / LOG_FILE})")
    say(f"gpu-grid: {values} timed cells on {'/'.join(devices)}; results in "
        f"{out / RESULTS_TARBALL} (exit status {status})")
    say(summary(results_dir, args.machine, facts["commit"]))
    return status


def _sayer(log: TextIO):
    def say(text: str) -> None:
        print(text, flush=True)
        log.write(text + "\n")
        log.flush()
    return say


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu-grid", description="Run the asv suite on a GPU machine within a budget, "
        "saving results after each benchmark class.")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-grid-out"),
                        help="folder that receives results.tar.gz and the log (default $OUT)")
    parser.add_argument("--budget", type=float,
                        default=float(os.environ.get("GPU_GRID_SECONDS", "420")),
                        help="seconds for all asv runs (default GPU_GRID_SECONDS or 420)")
    parser.add_argument("--machine", default=os.environ.get("MHABENCH_MACHINE"),
                        help="asv machine name (default gpu-<hostname>)")
    parser.add_argument("--devices", default=os.environ.get("MHABENCH_DEVICES", "cuda"))
    parser.add_argument("--dtypes",
                        default=os.environ.get("MHABENCH_DTYPES", "float32,bfloat16"))
    parser.add_argument("--grid", default=os.environ.get("MHABENCH_GRID", "quick"))
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads per cell (default: all CPUs on cuda, else 1)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--repo", default=".")
    parser.add_argument("--bundle", default=".whl", help="the device bundle's folder")
    parser.add_argument("--config", default="asv.gpu.conf.json")
    parser.add_argument("--only", default="", help="regex: run only matching "
                        "module.Class names (default: all)")
    parser.add_argument("--skip", default="", help="regex: leave out matching classes")
    parser.add_argument("--methods", default="", help="regex: run only matching benchmark "
                        "methods, e.g. 'time_|track_kernel' (default: all)")
    parser.add_argument("--plan", action="store_true", help="list the runs the budget "
                        "holds at --per-run seconds an eager torch cell, and run nothing")
    parser.add_argument("--per-run", type=float, default=FIRST_PER_RUN_S,
                        help="seconds an eager torch cell takes, for --plan (a JAX, compiled or "
                        f"FlexAttention cell weighs more; default {FIRST_PER_RUN_S:g})")
    args = parser.parse_args(argv)
    for name, allowed in (("devices", DEVICES), ("dtypes", DTYPES)):
        given = [v for v in getattr(args, name).split(",") if v]
        if not given or any(v not in allowed for v in given):
            parser.error(f"--{name} {getattr(args, name)!r} is not allowed; give a "
                         f"comma-separated list of {', '.join(allowed)}")
    if args.grid not in GRIDS:
        parser.error(f"--grid {args.grid!r} is not allowed; choose one of {', '.join(GRIDS)}")
    if args.budget <= 0:
        parser.error(f"--budget {args.budget:g} is not allowed; give positive seconds")
    if args.per_run <= 0:
        parser.error(f"--per-run {args.per_run:g} is not allowed; give positive seconds")
    if args.machine is None:
        args.machine = f"gpu-{os.uname().nodename}"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return show_plan(args) if args.plan else run(args)
    except DeviceRunError as exc:
        print(f"gpu-grid: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
