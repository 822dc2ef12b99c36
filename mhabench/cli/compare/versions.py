"""``mhabench versions BASE NEW``: did another dependency set (a torch or JAX upgrade, a
local package at two versions) make this commit's cells slower? One asv environment per
side, fresh processes alternating between them, a verdict per cell and the kernel each
side ran (:mod:`mhabench.compare.versions`). Exit status 1 when a cell is slower on NEW, 2 on
bad input and when a cell fails on one side only (its verdict line says which)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mhabench.cli.common import CLIError


def add_command(sub: Any) -> None:
    from mhabench.core.grids import GRIDS

    p = sub.add_parser("versions", help="one commit in two dependency sets: a verdict per "
                       "cell and the kernel each side ran (exit status 1 if NEW is slower, 2 "
                       "if a cell fails on one side)")
    p.add_argument("base", help='the dependency set to compare against, e.g. '
                   '"jax==0.9.2 jaxlib==0.9.2 flax==0.12.2": NAME==VERSION pins swapped '
                   "into asv.conf.json's matrix, or paths of local wheels or project "
                   "folders; \"\" for the project's own pins")
    p.add_argument("new", help="the dependency set under test, written the same way")
    p.add_argument("-b", "--bench", action="append", default=[],
                   help="asv -b regex of the benchmarks to time (repeatable; default all), "
                        "e.g. '^bench_heads' or \"time_step\\('jax'\"")
    p.add_argument("--grid", default="quick", choices=GRIDS,
                   help="the benchmark grid (MHABENCH_GRID; default quick)")
    p.add_argument("--machine", default=None, help="asv machine name (asv's --machine)")
    p.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="rounds of the screen (default 8); the confirmation takes half as "
                        "many again (12)")
    p.add_argument("--dry-run", action="store_true",
                   help="say which cells and how long, and run nothing")
    p.set_defaults(func=run)


def _line(cell: dict[str, Any]) -> str:
    ratio = "n/a" if cell["ratio"] is None else f"{cell['ratio']:.2f}x"
    interval = "" if cell["low"] is None else f" [{cell['low']:.2f}, {cell['high']:.2f}]"
    kernels = ""
    if cell["kernel_base"] or cell["kernel_new"]:
        kernels = f"  kernel {cell['kernel_base']} -> {cell['kernel_new']}" + (
            "  KERNEL CHANGED" if cell["kernel_changed"] else "")
    return f"{cell['verdict']:<14} {ratio:>7}{interval:<15} {cell['cell']}{kernels}"


def _compile_line(row: dict[str, Any]) -> str:
    """A compile-time cell: one process a side, so its seconds and no ratio or verdict."""
    base, new = ("n/a" if side not in row else "failed" if row[side] is None
                 else f"{row[side]:.2f} s" for side in ("base", "new"))
    return f"{'no verdict':<14} {base} -> {new}, one process a side  {row['cell']}"


def run(args: argparse.Namespace) -> int:
    from mhabench.analysis.comparisons.versions import side_label
    from mhabench.compare.sides import SideError
    from mhabench.compare.versions import Comparison

    def echo(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    from mhabench.compare.estimate import estimate

    try:  # bad input is one line, before anything else is said
        comparison = Comparison(args.base, args.new, args.bench, grid=args.grid,
                                machine=args.machine, echo=echo, rounds=args.rounds)
        comparison.check()
    except ValueError as err:  # a side that cannot be built as written (SideError), --rounds
        raise CLIError(str(err)) from err
    screen, confirm = comparison.screen_rounds, comparison.confirm_rounds
    if args.base.split() == args.new.split():
        echo(f"mhabench versions: BASE and NEW are one dependency set ({args.base!r}): every "
             "cell is compared with itself, which measures only the noise")
    found = estimate(args.bench, grid=args.grid)
    if found is not None:
        echo(f"mhabench versions: {found.cells} time cell(s); besides building both "
             f"environments, the screen ({screen} rounds of both sides) takes "
             f"{found.say(screen, 2)}, and confirming every cell it passes on up to "
             f"{found.say(confirm, 2)} more")
    if args.dry_run:
        return 0
    try:
        summary = comparison.run()
    except SideError as err:
        raise CLIError(str(err)) from err
    except RuntimeError as err:  # asv failed outright: its own message, on one line
        raise CLIError(str(err).replace("\n", " ")) from err
    print(f"mhabench versions: {side_label(summary, 'new')} against "
          f"{side_label(summary, 'base')} at {summary['commit'][:8]}, "
          f"{len(summary['cells'])} cell(s) in {summary['seconds']['total']:.0f} s; "
          f"results in {summary['folder']}")
    order = {"failed on new": 0, "slower": 1, "failed on base": 2, "faster": 3,
             "cleared": 4, "unchanged": 5}
    for cell in sorted(summary["cells"], key=lambda c: (order.get(c["verdict"], 6),
                                                        c["cell"])):
        print(_line(cell))
    for row in summary["compile_seconds"]:
        print(_compile_line(row))
    print(f"report: mhabench report --results {summary['folder']}/results --out "
          "reports/versions.html")
    if any(c["verdict"].startswith("failed") for c in summary["cells"]):
        return 2  # a cell that runs on one side only: its line above says which
    return 1 if any(c["verdict"] == "slower" for c in summary["cells"]) else 0
