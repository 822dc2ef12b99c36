"""``mhabench bisect GOOD BAD``: which commit between GOOD and BAD changed the selected
cells? The gate's statistics on the ends, then probes that halve the range, with rounds
added only where the answer is unclear (:mod:`mhabench.compare.bisect`). Exit status 1
when a culprit is found, 0 for "no change", 2 for bad input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def add_command(sub: Any) -> None:
    p = sub.add_parser("bisect", help="which commit changed a cell? probes between GOOD and "
                       "BAD with the gate's statistics (exit status 1 when it names one)")
    p.add_argument("good", help="an older commit, before the change (e.g. v1.0)")
    p.add_argument("bad", help="a newer commit, after it (e.g. HEAD)")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv -b regex of the benchmarks to follow (repeatable; default "
                        "all), e.g. time_step or '^bench_heads'")
    p.add_argument("--machine", default=None, help="asv machine name (asv's --machine)")
    p.add_argument("--rounds", type=int, default=4, metavar="N",
                   help="rounds of a batch (default 4): every stage's first and each added "
                        "while a cell is unclear, at most 4N a stage, 2N at least to "
                        "confirm a culprit; 3 does for steps of 1.5x and more on cells of "
                        "a few per cent of scatter")
    p.add_argument("--dry-run", action="store_true",
                   help="say the range, which cells and how long, and run nothing")
    p.set_defaults(func=run)


def lines(search: Any, short: Callable[[str], str] = lambda point: point[:8],
          noun: str = "commits") -> list[str]:
    """The search's answer as the command prints it; its points (commits, or a list of
    releases: ``noun``) named by ``short``."""
    commits = search.commits
    head = (f"mhabench bisect: {len(commits) - 1} {noun} after {short(commits[0])} up to "
            f"{short(commits[-1])}; {len(search.changed)} cell(s) changed between them; "
            f"{search.probes} probe(s), {search.rounds} rounds, "
            f"{search.seconds / 60:.1f} min; results in {search.folder}")
    out = [head]
    if not search.changed:
        out.append(f"no change: no cell differs between {short(commits[0])} and "
                   f"{short(commits[-1])} (a screen, then fresh rounds for the cells that "
                   "leaned)")
    for culprit in search.culprits:
        ways = {"SLOWER" if c.ratio > 1 else "faster" for c in culprit.cells.values()}
        word = "/".join(sorted(ways))
        out.append(f"CULPRIT {short(culprit.commit)} \"{culprit.subject}\": {word} "
                   f"{culprit.ratio:.2f}x on {len(culprit.cells)} cell(s), against "
                   f"{short(culprit.before)}" + (" (a probe ran out of rounds: check it with "
                                                  "mhabench gate)" if culprit.unclear else ""))
        if culprit.unconfirmed:
            out.append(f"  not confirmed by fresh rounds on {len(culprit.unconfirmed)} of "
                       f"its {len(culprit.cells)} cell(s) (marked -)")
        if culprit.skipped:
            out.append(f"  or one of {', '.join(short(c) for c in culprit.skipped)}, which "
                       "failed to run (skipped)")
        for cell, result in sorted(culprit.cells.items()):
            kernel = culprit.kernels.get(cell)
            mark = "-" if cell in culprit.unconfirmed else " "
            out.append(f" {mark}{result.ratio:5.2f}x [{result.low:.2f}, {result.high:.2f}]  "
                       f"{cell}" + (f"  kernel {kernel[0]} -> {kernel[1]}" if kernel else "")
                       + (f"; {result.describe_modes()}" if len(result.modes) > 1 else ""))
    for cleared in search.cleared:
        out.append(f"cleared {cleared.commit[:8]} \"{cleared.subject}\": the probes pointed "
                   "at it, its fresh rounds against the commit before found no change")
    for skipped in sorted(search.skipped, key=commits.index):
        out.append(f"skipped {short(skipped)}: failed to build or run")
    for lost in search.lost:
        out.append(f"no longer changed when probed: {lost}")
    return out


def run(args: argparse.Namespace) -> int:
    import math

    from mhabench.cli.common import CLIError
    from mhabench.compare.bisect import Bisect
    from mhabench.compare.estimate import estimate

    extra = ["--machine", args.machine] if args.machine else []
    search_run = Bisect(args.good, args.bad, args.bench, asv_args=extra,
                        echo=lambda text: print(text, file=sys.stderr, flush=True),
                        batch=args.rounds)
    batch, most = search_run.batch, search_run.most
    found = estimate(args.bench)
    commits = len(search_run.search.commits)
    if found is not None:
        halvings = math.ceil(math.log2(commits - 1))
        print(f"mhabench bisect: {commits - 1} commits, {found.cells} time cell(s); the ends "
              f"take {found.say(2 * batch, 2)}, and each of about {halvings} probes "
              f"{found.say(batch, 3)} for a clear step, up to "
              f"{found.say(most, 3)} for a small one (on the cells that changed)",
              file=sys.stderr)
    if args.dry_run:
        return 0
    try:
        search = search_run.run()
    except RuntimeError as err:  # asv failed: its own message, on one line
        raise CLIError(str(err).replace("\n", " ")) from err
    print("\n".join(lines(search)))
    return 1 if search.culprits else 0
