"""``mhabench validate``: time a seeded random sample of configs off the benchmark grid on
this machine and compare them with the time model fitted to asv results (see
:mod:`mhabench.analysis.validation`). ``--save FILE.json`` keeps the run for ``mhabench
report --validation FILE.json``."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from mhabench.cli.common import CLIError, add_results_args, load_results


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "validate", help="time random configs off the grid and compare with the time model",
        description="Draw a seeded random sample of configs from a space wider than the "
                    "benchmark grid, time each with mhabench.measure.timing.measure on "
                    "this machine and report the time model's median and worst relative "
                    "error on them.")
    add_results_args(p)
    p.add_argument("--sample", type=int, default=24, help="configs to draw (default 24)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per config")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per config first")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default: the thread count the results were timed at)")
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


def run(args: argparse.Namespace) -> int:
    for name in ("sample", "repeats"):
        if getattr(args, name) < 1:
            raise CLIError(f"--{name} {getattr(args, name)} is not allowed; it must be a "
                           "positive integer")
    if args.warmup < 0:
        raise CLIError(f"--warmup {args.warmup} is not allowed; it must be 0 or more")
    if args.max_gflop is not None and not args.max_gflop > 0:
        raise CLIError(f"--max-gflop {args.max_gflop} is not allowed; it must be above 0")
    if args.save is not None and Path(args.save).exists():
        raise CLIError(f"--save {args.save!r} already exists and is never overwritten; "
                       "choose a new file name")
    from mhabench.analysis.timemodel import fit_models, groups
    from mhabench.analysis.validation import (
        MAX_GFLOP,
        random_validation,
        sample_configs,
        save_validation,
        validation_payload,
    )
    from mhabench.measure.timing import check_runnable, configure_process, measure

    results = load_results(args, "validate")
    models = fit_models(results.frame)
    machines = sorted({k[0] for k in models})
    if not machines:
        raise CLIError(f"no time model could be fitted from {args.results!r}: no group has "
                       "enough timed attention cells")
    machine = args.machine or machines[0]
    if len(machines) > 1 and args.machine is None:
        raise CLIError(f"results hold several machines ({', '.join(machines)}); choose the "
                       "one this machine is with --machine")
    models = {k: m for k, m in models.items() if k[0] == machine}
    threads = args.threads if args.threads is not None else _threads(results.frame, machine)
    configure_process(threads)  # before JAX touches a device
    max_gflop = MAX_GFLOP if args.max_gflop is None else args.max_gflop
    configs = sample_configs(models, groups(results.frame), args.sample, args.seed, max_gflop,
                             runnable=check_runnable)
    errors = random_validation(
        results.frame, models, configs,
        lambda c: measure(c, repeats=args.repeats, warmup=args.warmup, threads=threads),
        progress=lambda m: print(f"mhabench validate: {m}", file=sys.stderr, flush=True))
    payload = validation_payload(errors, machine=machine, results=str(args.results),
                                 seed=args.seed, sample=args.sample, threads=threads,
                                 repeats=args.repeats, max_gflop=max_gflop)
    if args.save is not None:
        save_validation(payload, args.save)
        print(f"mhabench validate: wrote {args.save}", file=sys.stderr)
    if args.json:
        print(json.dumps(payload, default=str))
        return 0
    s = payload["summary"]
    for r in errors.to_dict("records"):
        mark = "  [extrapolated: " + r["extrapolation"] + "]" if r["extrapolated"] else ""
        print(f"{r['config_id']}: measured {r['measured_s'] * 1e3:.3f} ms, predicted "
              f"{r['predicted_s'] * 1e3:.3f} ms ({100 * r['signed_error']:+.0f}%){mark}")
    for part, label in (("all", "all"), ("inside", "inside the fitted ranges"),
                        ("extrapolated", "extrapolated")):
        p = s[part]
        if p.get("cells"):
            print(f"{label} ({p['cells']} configs): median error "
                  f"{100 * p['median_rel_error']:.1f}%, worst {100 * p['worst_rel_error']:.1f}% "
                  f"(FLOP model {100 * p['flop_rate_median_rel_error']:.1f}% / "
                  f"{100 * p['flop_rate_worst_rel_error']:.1f}%)")
    return 0
