"""``mhabench merge SOURCE... --into RESULTS``: put asv results from elsewhere beside this
machine's (another machine's results, or the shards of a plan, whose cells are unioned);
nothing already there is lost or overwritten (:mod:`mhabench.cluster.merge`)."""

from __future__ import annotations

import argparse
from typing import Any


def add_command(sub: Any) -> None:
    p = sub.add_parser("merge", help="merge other asv results (another machine's, or a "
                       "plan's shards) into a results folder, never overwriting")
    p.add_argument("sources", nargs="+", help="results folders or results.tar.gz files")
    p.add_argument("--into", "--results", dest="into", default=".asv/results",
                   help="the results folder to merge into (default .asv/results)")
    p.add_argument("--as-machine", default=None,
                   help="import under this machine name instead of the source's")
    p.add_argument("--plan", default=None, help="a shard plan: every one of its cells must "
                   "be in the sources exactly once, or nothing is merged")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mhabench.cluster.merge import merge
    from mhabench.cluster.shard_run import check_shards

    if args.plan:
        check_shards(args.plan, [Path(s) for s in args.sources])
    for source in args.sources:
        for line in merge(source, args.into, args.as_machine):
            print(line)
    return 0
