"""``mhabench gate BASE HEAD``: did HEAD regress against BASE? Interleaved rounds of fresh
processes as a screen, then fresh rounds for every cell it passes on, each process's median
one value (:mod:`mhabench.compare.gate`). Exit status 1 when a cell is confirmed slower or a
benchmark that ran on BASE fails on HEAD, 0 otherwise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_command(sub: Any) -> None:
    p = sub.add_parser("gate", help="did HEAD regress? interleaved rounds of fresh processes, "
                       "then fresh rounds for each cell they pass on (exit status 1 on a "
                       "confirmed regression)")
    p.add_argument("base", help="the commit to compare against (e.g. main)")
    p.add_argument("head", help="the commit under test (e.g. HEAD)")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv -b regex of the benchmarks to compare (repeatable; default "
                        "all), e.g. time_step or '^bench_heads'")
    p.add_argument("--machine", default=None, help="asv machine name (asv's --machine)")
    p.add_argument("--dry-run", action="store_true",
                   help="say which cells and how long, and run nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.cli.common import CLIError
    from mhabench.compare.estimate import estimate
    from mhabench.compare.gate import (
        CONFIRM_ROUNDS,
        FACTOR,
        SCREEN_FACTOR,
        SCREEN_ROUNDS,
        gate,
        project,
    )
    from mhabench.compare.rounds import resolve

    root = project(Path("."))
    base, head = resolve(root, args.base), resolve(root, args.head)
    if base == head:
        print(f"mhabench gate: {args.base} and {args.head} are one commit ({base[:8]}): every "
              "cell is compared with itself, which measures only the noise", file=sys.stderr)
    found = estimate(args.bench)
    if found is not None:
        print(f"mhabench gate: {found.cells} time cell(s); the screen ({SCREEN_ROUNDS} rounds "
              f"of both commits) takes {found.say(SCREEN_ROUNDS, 2)}, and confirming every "
              f"cell it passes on up to {found.say(CONFIRM_ROUNDS, 2)} more", file=sys.stderr)
    if args.dry_run:
        return 0
    extra = ["--machine", args.machine] if args.machine else []
    try:
        verdict = gate(args.base, args.head, args.bench, asv_args=extra,
                       echo=lambda text: print(text, file=sys.stderr, flush=True))
    except RuntimeError as err:  # asv failed: its own message, on one line
        raise CLIError(str(err).replace("\n", " ")) from err
    print(f"mhabench gate: {len(verdict.screened)} cell(s) passed on by the screen "
          f"({SCREEN_ROUNDS} rounds, beyond {SCREEN_FACTOR}x or a mix of modes), "
          f"{len(verdict.confirmed)} "
          f"confirmed ({CONFIRM_ROUNDS} fresh rounds: interval clear of 1, beyond {FACTOR}x); "
          f"results in {verdict.folder}")
    for change in verdict.failed:
        print(f"{'FAILED':<7} {'n/a':>7}  {change.cell}")  # ran on BASE, fails on HEAD
    for change in verdict.confirmed:
        word = "SLOWER" if change.mark == "+" else "faster"
        print(f"{word:<7} {change.ratio:>6.2f}x  {change.cell}  "
              f"[{change.low:.2f}, {change.high:.2f}]" + (f"; {change.modes}" if change.modes
                                                         else ""))
    confirmed = {c.cell for c in verdict.confirmed}
    for change in verdict.screened:
        if change.cell not in confirmed:  # passed on by the screen only
            why = "its modes' mix" if change.mark == "~" else f"{change.ratio:.2f}x"
            print(f"{'cleared':<7} {'-':>7}  {change.cell}  (screen {why})")
    for change in verdict.mixed:  # the level held; the processes' mix of modes moved
        print(f"{'modes':<7} {change.ratio:>6.2f}x  {change.cell}  {change.modes}")
    return 1 if verdict.regressions else 0
