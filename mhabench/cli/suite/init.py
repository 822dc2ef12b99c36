"""``mhabench init``: make the current git checkout of a package that registers attention
backends (an entry point in ``mhabench.backends``) an asv project that times them beside a
few built-in baselines at each of its commits (:mod:`mhabench.asvproject.own_repo`). Writes
``asv.conf.json`` and ``benchmarks/bench_mhabench.py``; never overwrites either."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_command(sub: Any) -> None:
    from mhabench.asvproject.own_repo import DEFAULT_BASELINES
    from mhabench.core.grids import GRIDS

    p = sub.add_parser("init", help="make this git checkout of your plug-in package an asv "
                       "project: your backends beside built-in baselines at each commit "
                       "(asv.conf.json, benchmarks/bench_mhabench.py)")
    p.add_argument("--grid", default="quick", help=f"one of {', '.join(GRIDS)} (as "
                   "MHABENCH_GRID; default quick)")
    p.add_argument("--baseline", action="append", default=[], metavar="BACKEND",
                   help="a built-in backend timed beside yours (repeatable; default "
                        f"{', '.join(DEFAULT_BASELINES)} in each of your backends' frameworks)")
    p.add_argument("--mhabench", default=None, metavar="SOURCE",
                   help="the mhabench asv installs: a git checkout (pinned at its commit), "
                        "a wheel, or 'mhabench @ git+URL@COMMIT' (default: where this "
                        "mhabench was installed from)")
    p.add_argument("--show-pin", action="store_true",
                   help="print the install command and MHABENCH_PIN that pin mhabench in "
                        "asv.conf.json (to update it by hand); write nothing")
    p.add_argument("--repo", default=".", help="the package's git checkout (default: here)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.asvproject.own_repo import (
        ASV_FOLDER,
        asv_folder_ignored,
        init,
        pin_entries,
        source_from,
    )

    if args.show_pin:
        source = source_from(args.mhabench)
        _warn(source.warnings)
        command, env = pin_entries(source)
        print(json.dumps({"install_command (last entry)": command, "matrix.env": env},
                         indent=1))
        return 0
    written = init(Path(args.repo), grid=args.grid, baselines=args.baseline,
                   mhabench=args.mhabench)
    _warn(written.source.warnings)
    root = written.config.parent
    mine = ", ".join(f"{b.name} ({b.framework})" for b in written.backends)
    print(f"mhabench init: wrote {written.config.name} and "
          f"{written.module.relative_to(root)}: {mine} beside {', '.join(written.baselines)}, "
          f"grid {args.grid}; mhabench from {written.source.describe}")
    if not asv_folder_ignored(root):
        print(f"mhabench init: add {ASV_FOLDER}/ to .gitignore (asv's environments and "
              "results)")
    print("next: commit them, then asv machine --yes; asv run HEAD~3..HEAD; "
          "mhabench report --results .asv/results --out report.html")
    return 0


def _warn(warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        print(f"mhabench init: warning: {warning}", file=sys.stderr)
