"""``mhabench validate``: time a seeded random sample of configs off the benchmark grid on
this machine and compare them with the time model fitted to asv results (see
:mod:`mhabench.analysis.prediction.validation`). The sample lies inside the fitted ranges unless
``--wide``; the configs are timed interleaved (round-robin, median per config), and a
warning names a busy machine. ``--save FILE.json`` keeps the run for ``mhabench report
--validation FILE.json``."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from mhabench.cli.common import CLIError, add_results_args, load_results


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "validate", help="time random configs off the grid and compare with the time model",
        description="Draw a seeded random sample of configs off the benchmark grid, inside "
                    "the ranges each model was fitted on (--wide: from half the smallest to "
                    "twice the largest fitted value), time them on this machine "
                    "interleaved (round-robin over the configs, median per config) and "
                    "report the time model's median and worst relative error on them, "
                    "extrapolations apart.")
    add_results_args(p)
    p.add_argument("--sample", type=int, default=24, help="configs to draw (default 24)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--wide", action="store_true",
                   help="draw from the wider box (half the smallest to twice the largest "
                        "fitted value per field): extrapolations, reported apart")
    p.add_argument("--rounds", type=int, default=5,
                   help="round-robin passes over the configs (default 5)")
    p.add_argument("--repeats", type=int, default=2,
                   help="timed calls per config in each round (default 2)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed calls per config before its timed calls in each round, "
                        "and more until they took 20 ms (default 1; 0: none)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default: the thread count the results were timed at)")
    p.add_argument("--anchors", type=int, default=None,
                   help="grid cells timed with the sample, to measure how far the machine's "
                        "speed has moved since the grid was timed (default 8; 0: none)")
    p.add_argument("--max-gflop", type=float, default=None,
                   help="redraw configs above this many model GFLOPs (default 2)")
    p.add_argument("--save", default=None, metavar="FILE.json",
                   help="write the run to this new file (never overwritten) for the report")
    p.add_argument("--json", action="store_true", help="print the run as one JSON object")
    p.set_defaults(func=run)


def _threads(frame: Any, machine: str) -> int | None:
    """The thread count the machine's time_ cells were measured at (the most common one)."""
    if "param_threads" not in frame.columns:
        return None
    values = frame[(frame["machine"] == machine) & (frame["kind"] == "time")]["param_threads"]
    counts = Counter(int(v) for v in values.dropna())
    return counts.most_common(1)[0][0] if counts else None


def _check_args(args: argparse.Namespace) -> None:
    for name in ("sample", "rounds", "repeats"):
        if getattr(args, name) < 1:
            raise CLIError(f"--{name} {getattr(args, name)} is not allowed; it must be a "
                           "positive integer")
    for name in ("warmup", "anchors"):
        if (getattr(args, name) or 0) < 0:
            raise CLIError(f"--{name} {getattr(args, name)} is not allowed; it must be 0 or "
                           "more")
    if args.max_gflop is not None and not args.max_gflop > 0:
        raise CLIError(f"--max-gflop {args.max_gflop} is not allowed; it must be above 0")
    if args.save is not None and Path(args.save).exists():
        raise CLIError(f"--save {args.save!r} already exists and is never overwritten; "
                       "choose a new file name")


def _say(message: str) -> None:
    print(f"mhabench validate: {message}", file=sys.stderr, flush=True)


def _machine_models(args: argparse.Namespace, frame: Any) -> tuple[Any, dict, str]:
    """The grid's timing groups, and the time models of the machine this run compares
    with (``--machine``, or the only one the results hold)."""
    from mhabench.analysis.prediction.timemodel import fit_models, groups

    by_group = groups(frame)  # timing_cells once for the fit, draws and comparison
    models = fit_models(frame, by_group)
    machines = sorted({k[0] for k in models})
    if not machines:
        raise CLIError(f"no time model could be fitted from {args.results!r}: no group has "
                       "enough timed attention cells")
    machine = args.machine or machines[0]
    if len(machines) > 1 and args.machine is None:
        raise CLIError(f"results hold several machines ({', '.join(machines)}); choose the "
                       "one this machine is with --machine")
    return by_group, {k: m for k, m in models.items() if k[0] == machine}, machine


def _at_fast_speed(frame: Any, configs: list, measured: dict, machine: str,
                    reference: float | None) -> tuple[Any, dict, list[float]]:
    """Where the grid's speed probes and these timings' allow it, the timings read at the
    machine's fast speed, with the comparison as read (a model fitted on the grid as
    read) beside; else the timings as read. Returns (as read or None, timings, the
    moment's slowdowns)."""
    from mhabench.analysis.fast_speed import SLOWDOWN
    from mhabench.analysis.prediction.timemodel import fit_models, groups
    from mhabench.analysis.prediction.validation import random_validation
    from mhabench.measure.conditions import speed

    slowdowns = [speed.slowdown(p, reference) for m in measured.values()
                 for p in m.probes_s] if reference is not None else []
    if not slowdowns:
        if reference is None:
            _say("the grid's load records hold no speed probes: timings compared as read")
        return None, measured, slowdowns
    raw = frame.drop(columns=SLOWDOWN)
    raw_groups = groups(raw)
    raw_models = {k: m for k, m in fit_models(raw, raw_groups).items() if k[0] == machine}
    as_read = random_validation(raw, raw_models, configs, measured, raw_groups)
    _say(f"read at the machine's fast speed: the grid's cells and these timings divided "
         f"by the moment's slowdown (here median x{statistics.median(slowdowns):.2f}, up to "
         f"x{max(slowdowns):.2f}; probe reference {reference * 1e6:.2f} us)")
    return as_read, {c: m.at_fast_speed(reference) for c, m in measured.items()}, slowdowns


def _print_text(payload: dict[str, Any], errors: Any, box: str, seed: int) -> None:
    from mhabench.analysis.prediction.validation import (
        PART_LABELS,
        anchored_line,
        as_read_line,
        common_scale_line,
        part_line,
    )

    s = payload["summary"]
    for r in errors.to_dict("records"):
        mark = "  [extrapolated: " + r["extrapolation"] + "]" if r["extrapolated"] else ""
        print(f"{r['config_id']}: measured {r['measured_s'] * 1e3:.3f} ms, predicted "
              f"{r['predicted_s'] * 1e3:.3f} ms ({100 * r['signed_error']:+.0f}%){mark}")
    print(f"sample drawn {box}, seed {seed}")
    for part, label in PART_LABELS.items():
        if s[part].get("cells"):
            print(part_line(s[part], label))
    print(anchored_line(s))
    print(common_scale_line(s))
    if payload.get("as_read"):
        print(as_read_line(payload["as_read"]))


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    from mhabench.analysis.prediction.sampling import (
        ANCHORS,
        MAX_GFLOP,
        anchor_cells,
        sample_configs,
    )
    from mhabench.analysis.prediction.validation import (
        machine_drift,
        random_validation,
        save_validation,
        summary_dict,
        validation_payload,
    )
    from mhabench.measure.conditions import speed
    from mhabench.measure.conditions.machine_load import DISTURBED_CORES, Window
    from mhabench.measure.interleaved import measure_interleaved
    from mhabench.measure.timing import check_runnable, configure_process

    results = load_results(args, "validate")
    by_group, models, machine = _machine_models(args, results.frame)
    threads = args.threads if args.threads is not None else _threads(results.frame, machine)
    configure_process(threads)  # before JAX touches a device
    max_gflop = MAX_GFLOP if args.max_gflop is None else args.max_gflop
    configs = sample_configs(models, by_group, args.sample, args.seed, max_gflop,
                             runnable=check_runnable, wide=args.wide)
    box = "the wider box (extrapolations)" if args.wide else "inside the fitted ranges"
    anchors = anchor_cells(by_group, [k for k, _ in configs],
                           ANCHORS if args.anchors is None else args.anchors, args.seed,
                           runnable=check_runnable)
    _say(f"{len(configs)} configs drawn {box} (seed {args.seed}), and {len(anchors)} grid "
         f"cells to measure the machine's drift since the grid; timing them interleaved, "
         f"{args.rounds} rounds x {args.repeats} calls")
    reference = results.fast_probe_s.get(machine)  # the grid's fast speed, if probed
    window = Window.open()
    measured = measure_interleaved(
        [c for _, c in configs] + [c for c, _ in anchors],  # the sample holds no grid cell
        rounds=args.rounds, repeats=args.repeats,
        warmup=args.warmup, threads=threads, progress=_say,
        on_error=lambda c, exc: _say(f"skipped {c.id}: {exc}"),
        probe=speed.probe if reference is not None else None)
    # the same timings and a model fitted on the grid as read, beside
    as_read, measured, slowdowns = _at_fast_speed(results.frame, configs, measured, machine,
                                                   reference)
    other = window.other_cores() if window is not None else None
    if other is not None and other >= DISTURBED_CORES:
        _say(f"warning: the machine was busy: other processes took {other:.2f} cores on "
             "average while timing (they slow every config; rerun on a quiet machine)")
    errors = random_validation(results.frame, models, configs, measured, by_group)
    drift = machine_drift(anchors, measured)
    payload = validation_payload(errors, drift, machine=machine, results=str(args.results),
                                 seed=args.seed, sample=args.sample, threads=threads,
                                 rounds=args.rounds, repeats=args.repeats,
                                 max_gflop=max_gflop, box="wide" if args.wide else "fitted",
                                 other_cores=other, fast_probe_s=reference,
                                 as_read=summary_dict(as_read) if as_read is not None else None,
                                 slowdown_median=float(statistics.median(slowdowns))
                                 if slowdowns else None)
    if args.save is not None:
        save_validation(payload, args.save)
        _say(f"wrote {args.save}")
    if args.json:
        print(json.dumps(payload, default=str))
        return 0
    _print_text(payload, errors, box, args.seed)
    return 0
