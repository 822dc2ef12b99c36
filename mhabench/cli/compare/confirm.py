"""``mhabench confirm``: re-measure the report's shifts across commits. Every candidate shift
(and every shift that holds over the history, or rests on a disturbed run) of a ``time_``
cell not yet re-measured is re-run at the commits on either side in fresh interleaved
rounds of fresh processes (the gate's second stage, :func:`mhabench.compare.gate.confirm`: a shift
is confirmed where the interval of the ratio of process medians clears 1.0 and the ratio
passes the factor, slower); the verdicts go to a new
``<confirmations>/<UTC time>/confirmations.json``, where ``mhabench report`` reads them.
Exit status 1 when a shift is confirmed, 0 otherwise."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from mhabench.cli.common import (
    CLIError,
    add_history_args,
    add_results_args,
    history_threshold,
    load_results,
)

# What re-measurement can decide: asv's test needs samples, which only time_ cells have.
RECONSIDERED = ("candidate", "holds", "disturbed")


def add_command(sub: Any) -> None:
    p = sub.add_parser("confirm", help="re-measure the report's candidate regressions in "
                       "fresh interleaved rounds of processes at the commits on either "
                       "side; the report then reads confirmed or cleared")
    add_results_args(p)
    add_history_args(p)
    p.add_argument("--cell", default=None, metavar="REGEX",
                   help="only the shifts whose cell (asv's name with parameters) matches")
    p.add_argument("--at", default=None, metavar="COMMIT",
                   help="only the shifts at this commit (the first on the new level; a "
                        "hash prefix), e.g. the newest")
    p.add_argument("--dry-run", action="store_true",
                   help="list the shifts and the asv commands, run nothing")
    p.set_defaults(func=run)


def _shifts(args: argparse.Namespace) -> tuple[list[Any], Any]:
    """The shifts to re-measure (``RECONSIDERED``, narrowed by ``--cell`` and ``--at``) and
    the confirmations folder."""
    from pathlib import Path

    from mhabench.analysis.fast_speed import beside_results
    from mhabench.analysis.history.confirmations import load_confirmations
    from mhabench.analysis.history.regressions import (
        TIME_KINDS,
        commit_order,
        histories,
        regressions,
    )

    threshold = history_threshold(args, writes_confirmations=True)
    try:
        only = re.compile(args.cell) if args.cell is not None else None
    except re.error as err:
        raise CLIError(f"--cell {args.cell!r} is not a regular expression ({err})") from err
    results = load_results(args, "confirm")
    folder = Path(args.confirmations or beside_results(results.root, "confirm"))
    order = commit_order(results.frame, args.repo)
    if args.at is not None and not any(c.startswith(args.at) for c in order.commits):
        raise CLIError(f"--at {args.at!r} names no commit of the results; they have "
                       f"{', '.join(c[:8] for c in order.commits)}")
    verdicts = regressions(histories(results.frame, order, TIME_KINDS), threshold,
                           results.loads,  # read with the results (--load, or beside them)
                           load_confirmations(folder), order)
    shifts = [s for s in verdicts.shifts if s.verdict in RECONSIDERED
             and (only is None or only.search(s.history.asv_cell))
             and (args.at is None or s.commit.startswith(args.at))]
    return shifts, folder


def _confirm_pair(machine: str, before: str, after: str, cells: list[str],
                  target: Any) -> list[Any]:
    """Re-measure ``cells`` at ``before`` and ``after`` on ``machine``; one confirmation
    per cell, each printed."""
    from datetime import UTC, datetime

    from mhabench.analysis.comparisons.process_compare import verdict as judge
    from mhabench.analysis.history.confirmations import Confirmation
    from mhabench.compare.gate import CONFIRM_ROUNDS, FACTOR, confirm

    results = confirm(before, after, cells, target, asv_args=["--machine", machine],
                      echo=lambda text: print(text, file=sys.stderr, flush=True))
    records = []
    for cell in cells:
        result = results.get(cell)
        verdict = "confirmed" if result is not None and judge(result) == "slower" else "cleared"
        ratio = None if result is None else result.ratio
        records.append(Confirmation(machine, cell, before, after, verdict, ratio,
                                    CONFIRM_ROUNDS, FACTOR, datetime.now(UTC).isoformat(),
                                    str(target), None if result is None else result.low,
                                    None if result is None else result.high))
        shown = "n/a" if result is None else (f"{result.ratio:.2f}x [{result.low:.2f}, "
                                              f"{result.high:.2f}]")
        print(f"{verdict.upper() if verdict == 'confirmed' else verdict:<9} {shown:>7}  "
              f"{cell}", flush=True)
    return records


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from mhabench.analysis.history.confirmations import save_confirmations
    from mhabench.compare.gate import CONFIRM_ROUNDS

    shifts, folder = _shifts(args)
    if not shifts:
        print("mhabench confirm: no shift to re-measure (candidates, shifts that hold, shifts on "
              "disturbed runs; those already re-measured are in "
              f"{folder})")
        return 0
    pairs: dict[tuple[str, str, str], list[Any]] = {}
    for shift in shifts:
        h = shift.history
        pairs.setdefault((h.machine, h.commits[shift.before], shift.commit), []).append(shift)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    records = []
    for index, ((machine, before, after), group) in enumerate(sorted(pairs.items())):
        cells = sorted({s.history.asv_cell for s in group})
        print(f"mhabench confirm: {len(cells)} cell(s) on {machine}, {before[:8]} -> "
              f"{after[:8]}: {CONFIRM_ROUNDS} interleaved rounds each", flush=True)
        if args.dry_run:
            print("\n".join(f"  {c}" for c in cells))
            continue
        records += _confirm_pair(machine, before, after, cells,
                                 folder / stamp / f"{index:02d}-{before[:8]}-{after[:8]}")
    if args.dry_run:
        return 0
    path = save_confirmations(folder / stamp, records)
    confirmed = sum(r.verdict == "confirmed" for r in records)
    print(f"mhabench confirm: {confirmed} of {len(records)} shift(s) confirmed; verdicts in "
          f"{path} (mhabench report reads them)")
    return 1 if confirmed else 0
