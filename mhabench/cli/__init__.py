"""The ``mhabench`` command line: cost, time, check, predict, validate, report, confirm,
profile, gate, bisect, versions, releases, init, shard, merge.

One module per subcommand, each with ``add_command(sub)``, in three subpackages:
:mod:`.compare` (gate, bisect, versions, releases, confirm: did a change of commit or of
dependency set make cells slower?), :mod:`.configs` (cost, time, predict, validate,
profile, check: one config, or a sample of them, costed, timed, predicted, traced or
checked) and :mod:`.suite` (init, shard, merge, report: the asv suite set up, run across
hosts, merged and reported). The shared flags and the error type live in
:mod:`mhabench.cli.common`. Subcommand modules import only the standard library and
``mhabench.cli.common``/``mhabench.core.config`` at the top (pandas, torch, JAX load inside
the handlers), so start-up stays cheap. Errors print one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mhabench.cli.common import CLIError, Parser
from mhabench.cli.compare import bisect, confirm, gate, releases, versions
from mhabench.cli.configs import check, cost, predict, profile, time, validate
from mhabench.cli.suite import init, merge, report, shard

# --help lists them in this order
COMMANDS = (cost, time, check, predict, validate, report, confirm, profile, gate, bisect,
            versions, releases, init, shard, merge)


def build_parser() -> Parser:
    parser = Parser(prog="mhabench", description="Benchmark and profile multi-head attention "
                    "in PyTorch and JAX: cost model, timing, prediction, reports, traces.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the subcommand in the error, as its own flags' errors do
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        sys.stderr.close()
        return 0
    except (ValueError, CLIError, OSError) as exc:  # UnavailableError is a ValueError
        print(f"mhabench {args.command}: error: {exc}", file=sys.stderr)
        return 2


__all__ = ["CLIError", "build_parser", "main"]
