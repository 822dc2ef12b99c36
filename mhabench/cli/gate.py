"""``mhabench gate BASE HEAD``: did HEAD regress against BASE? ``asv continuous`` as a
screen, then fresh rounds for every cell it passes on (:mod:`mhabench.suite.gate`). Exit status 1
when a cell is confirmed slower or a benchmark that ran on BASE fails on HEAD, 0
otherwise."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_command(sub: Any) -> None:
    p = sub.add_parser("gate", help="did HEAD regress? asv continuous, then fresh rounds "
                       "for each cell it passes on (exit status 1 on a confirmed regression)")
    p.add_argument("base", help="the commit to compare against (e.g. main)")
    p.add_argument("head", help="the commit under test (e.g. HEAD)")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv -b regex of the benchmarks to compare (repeatable; default "
                        "all), e.g. time_step or '^bench_heads'")
    p.add_argument("--machine", default=None, help="asv machine name (asv's --machine)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.cli.common import CLIError
    from mhabench.suite.gate import FACTOR, SCREEN_FACTOR, gate

    extra = ["--machine", args.machine] if args.machine else []
    try:
        verdict = gate(args.base, args.head, args.bench, asv_args=extra,
                       echo=lambda text: print(text, file=sys.stderr, flush=True))
    except RuntimeError as err:  # asv failed: its own message, on one line
        raise CLIError(str(err).replace("\n", " ")) from err
    print(f"mhabench gate: {len(verdict.screened)} cell(s) passed on by the screen "
          f"(beyond {SCREEN_FACTOR}x), {len(verdict.confirmed)} confirmed (factor {FACTOR}); "
          f"results in {verdict.folder}")
    for change in verdict.failed:
        print(f"{'FAILED':<7} {'n/a':>7}  {change.cell}")  # ran on BASE, fails on HEAD
    for change in verdict.confirmed:
        word = "SLOWER" if change.mark == "+" else "faster"
        ratio = "n/a" if change.ratio is None else f"{change.ratio:.2f}x"
        print(f"{word:<7} {ratio:>7}  {change.cell}")
    cleared = {c.cell for c in verdict.screened} - {c.cell for c in verdict.confirmed}
    for cell in sorted(cleared):
        print(f"{'cleared':<7} {'-':>7}  {cell}")  # passed on by the screen only
    return 1 if verdict.regressions else 0
