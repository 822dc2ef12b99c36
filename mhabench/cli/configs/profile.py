"""``mhabench profile``: write traces (``--logdir``) or print their region breakdown
(``--summary``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mhabench.cli.common import CLIError, add_config_args, configs_from_args
from mhabench.core.config import FRAMEWORKS, AttentionConfig

FRAMEWORK_CHOICES = (*FRAMEWORKS, "both")


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "profile", help="trace configs for TensorBoard, or summarise saved traces by region",
        description="Write a torch.profiler and a jax.profiler trace per config into --logdir "
                    "(open with: tensorboard --logdir DIR), or print the time share of each "
                    "labelled region from saved traces (--summary DIR).")
    add_config_args(p, preset_allowed=True)
    # Both frameworks by default: the point is to compare them in one TensorBoard.
    p.set_defaults(framework="both")
    for action in p._actions:  # the shared flag's help names torch and jax only
        if action.dest == "framework":
            action.help = f"one of {', '.join(FRAMEWORK_CHOICES)} (default both)"
    p.add_argument("--logdir", default=None,
                   help="folder to write traces into (one new run folder per config)")
    p.add_argument("--summary", metavar="DIR", default=None,
                   help="print the region breakdown of the traces under DIR instead")
    p.add_argument("--steps", type=int, default=3, help="traced steps per config, after warm-up")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default MHABENCH_THREADS or 1)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="with --summary: JSON records")
    out.add_argument("--csv", action="store_true", help="with --summary: CSV")
    p.set_defaults(func=run)


def profile_configs_from_args(args: argparse.Namespace) -> list[AttentionConfig]:
    """The configs to trace: the config flags (or preset) for each requested framework."""
    if args.framework not in FRAMEWORK_CHOICES:
        raise ValueError(f"framework={args.framework!r} is not allowed; "
                         f"choose one of {', '.join(FRAMEWORK_CHOICES)}")
    frameworks = FRAMEWORKS if args.framework == "both" else (args.framework,)
    configs = []
    for framework in frameworks:
        configs += configs_from_args(argparse.Namespace(**{**vars(args),
                                                           "framework": framework}))
    return configs


def run(args: argparse.Namespace) -> int:
    if (args.logdir is None) == (args.summary is None):
        raise CLIError("give --logdir DIR to write traces or --summary DIR to read them "
                       "(one of the two)")
    if args.summary is not None:
        return _summary(args)
    if args.json or args.csv:
        raise CLIError("--json and --csv go with --summary DIR")
    from mhabench.measure.profiler.profiling import profile_configs

    configs = profile_configs_from_args(args)
    written = profile_configs(configs, args.logdir, steps=args.steps, threads=args.threads,
                              progress=sys.stderr)
    for path in written:
        print(path)
    print(f"open with: tensorboard --logdir {args.logdir}  (PYTORCH_PROFILER tab: torch runs; "
          "PROFILE tab: jax runs)", file=sys.stderr)
    return 0


def _summary(args: argparse.Namespace) -> int:
    from mhabench.measure.profiler.trace_breakdown import breakdown_table, format_table

    frame = breakdown_table(args.summary)
    if args.json:
        for record in frame.to_dict(orient="records"):
            print(json.dumps(record))
    elif args.csv:
        sys.stdout.write(frame.to_csv(index=False))
    else:
        print(format_table(frame))
    return 0

