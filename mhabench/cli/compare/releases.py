"""``mhabench releases SET SET ...``: which release of a dependency changed this commit's
cells? Every set of the list timed in interleaved rounds, each adjacent pair compared, or
(``--search``) the culprit search over the list (:mod:`mhabench.compare.releases`).
``--range PACKAGE FIRST LAST`` lists a package's releases on the index. Exit status 1
when a release is slower than the one before it, 2 on bad input, 0 otherwise."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from mhabench.cli.common import CLIError


def add_command(sub: Any) -> None:
    from mhabench.core.grids import GRIDS

    p = sub.add_parser("releases", help="one commit in an ordered list of dependency sets "
                       "(a package's releases): the release where each cell changed (exit "
                       "status 1 if a release is slower)")
    p.add_argument("sets", nargs="*", metavar="SET",
                   help='the dependency sets, oldest first, each written as for mhabench '
                   'versions: "jax==0.9.2 jaxlib==0.9.2 flax==0.12.4", paths of local '
                   "wheels or project folders, \"\" for the project's own pins")
    p.add_argument("--range", nargs=3, metavar=("PACKAGE", "FIRST", "LAST"), default=None,
                   help="the package's releases on the index from FIRST to LAST instead of "
                   "SETs (jax: each with the jaxlib of its version and the newest flax "
                   "pip's resolver picks for it, a few seconds a release)")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv -b regex of the benchmarks to time (repeatable; default all), "
                        "e.g. \"time_step\\('jax'\"")
    p.add_argument("--grid", default="quick", choices=GRIDS,
                   help="the benchmark grid (MHABENCH_GRID; default quick)")
    p.add_argument("--machine", default=None, help="asv machine name (asv's --machine)")
    p.add_argument("--search", action="store_true",
                   help="search the list (first and last, then middles) instead of timing "
                        "every set")
    p.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="rounds of every set in a sweep (default 12), or of a search's batch "
                        "(default 4; see mhabench bisect --rounds)")
    p.add_argument("--dry-run", action="store_true",
                   help="say the sets, which cells and how long, and run nothing")
    p.set_defaults(func=run)


def change_line(change: dict[str, Any]) -> str:
    """A change between adjacent releases: verdict, ratio, interval, where, the cell, the
    kernel each release ran and the cell's modes where it has several."""
    kernels = ""
    if change.get("kernel_from") or change.get("kernel_to"):
        kernels = f"  kernel {change['kernel_from']} -> {change['kernel_to']}" + (
            "  KERNEL CHANGED" if change["kernel_from"] != change["kernel_to"] else "")
    modes = f"; {change['modes_text']}" if change.get("modes_text") else ""
    return (f"{change['verdict']:<9} {change['ratio']:5.2f}x [{change['low']:.2f}, "
            f"{change['high']:.2f}] at {change['to']} (from {change['from']})  "
            f"{change['cell']}{kernels}{modes}")


def cell_lines(cell: dict[str, Any]) -> list[str]:
    """A cell's changes, one line each; one line where it has none, and where it failed."""
    out = [change_line({"cell": cell["cell"], **s}) for s in cell["steps"]
           if s["verdict"] in ("slower", "faster")]
    overall = cell.get("overall")
    if not out and overall is not None:
        out.append(f"{'unchanged':<9} {overall['ratio']:5.2f}x [{overall['low']:.2f}, "
                   f"{overall['high']:.2f}] at {overall['to']} against {overall['from']}, no "
                   f"step between  {cell['cell']}")
    if cell["failed"]:
        out.append(f"{'failed':<9} at {', '.join(cell['failed'])}  {cell['cell']}")
    return out


def compile_line(row: dict[str, Any]) -> str:
    """A compile-time cell: one process a set, so its seconds and no ratio or verdict."""
    seconds = ", ".join(f"{label} " + ("failed" if value is None else f"{value:.2f} s")
                        for label, value in row["seconds"].items())
    return f"{'no verdict':<9} {seconds}, one process a set  {row['cell']}"


def _estimate(args: argparse.Namespace, sets: int, echo: Any) -> None:
    from mhabench.compare.bisect import FIRST_ROUNDS
    from mhabench.compare.estimate import estimate
    from mhabench.compare.releases import SWEEP_ROUNDS

    found = estimate(args.bench, grid=args.grid)
    if found is None:
        return
    if args.search:
        batch = args.rounds or FIRST_ROUNDS
        halvings = math.ceil(math.log2(sets - 1))
        echo(f"mhabench releases: {sets} sets, {found.cells} time cell(s); besides building "
             f"the sets it probes, the ends take {found.say(2 * batch, 2)}, and each "
             f"of about {halvings} probes {found.say(batch, 3)} for a clear step, up "
             f"to {found.say(4 * batch, 3)} for a small one (on the cells that changed)")
    else:
        echo(f"mhabench releases: {sets} sets, {found.cells} time cell(s); besides building "
             f"{sets} environments, {args.rounds or SWEEP_ROUNDS} rounds of every set take "
             f"{found.say(args.rounds or SWEEP_ROUNDS, sets)}")


def run(args: argparse.Namespace) -> int:
    from mhabench.compare.bisect import BisectError
    from mhabench.compare.releases import SEARCH_LEAST, ReleaseError, Releases
    from mhabench.compare.sides import SideError

    def echo(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    if args.range and args.sets:
        raise CLIError(f"give the sets or --range, not both (sets: {args.sets[0]!r} ...)")
    options = {"grid": args.grid, "machine": args.machine, "echo": echo,
               "least": SEARCH_LEAST if args.search else 2, "rounds": args.rounds}
    try:  # bad input is one line, before anything else is said
        if args.range:
            releases = Releases.from_range(*args.range, args.bench, **options)
        else:
            releases = Releases(args.sets, args.bench, **options)
        releases.check()
    except (SideError, ReleaseError) as err:
        raise CLIError(str(err)) from err
    for line in releases.left_out:
        echo(f"mhabench releases: {line}")
    echo("mhabench releases: " + ", ".join(f"{label} ({releases.describe(label)})"
                                            for label in releases.labels))
    _estimate(args, len(releases.labels), echo)
    if args.dry_run:
        return 0
    try:
        if args.search:
            return _search(releases)
        summary = releases.sweep()
    except (SideError, ReleaseError, BisectError) as err:
        raise CLIError(str(err)) from err
    except RuntimeError as err:  # asv failed outright: its own message, on one line
        raise CLIError(str(err).replace("\n", " ")) from err
    return _print_sweep(summary)


def _search(releases: Any) -> int:
    from mhabench.cli.compare.bisect import lines

    search = releases.search()
    print("\n".join(lines(search, short=str, noun="releases")))
    slower = any(result.ratio > 1 for culprit in search.culprits
                 for cell, result in culprit.cells.items() if cell not in culprit.unconfirmed)
    return 1 if slower else 0


def _print_sweep(summary: dict[str, Any]) -> int:
    from mhabench.analysis.comparisons.releases import cell_order, what

    print(f"mhabench releases: {what(summary)} at {summary['commit'][:8]}, "
          f"{len(summary['cells'])} cell(s) in {summary['seconds']['total']:.0f} s; "
          f"results in {summary['folder']}")
    for cell in cell_order(summary):
        for line in cell_lines(cell):
            print(line)
    for row in summary["compile_seconds"]:
        print(compile_line(row))
    for line in summary.get("left_out") or ():
        print(line)
    print(f"report: mhabench report --results {summary['folder']}/results --out "
          "reports/releases.html")
    return 1 if any(c["verdict"] == "slower" for c in summary["changes"]) else 0
