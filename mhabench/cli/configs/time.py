"""``mhabench time``: time one config, or a preset's head sweep, on this machine through
:func:`mhabench.measure.timing.measure` (the same path the asv benchmarks use)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mhabench.cli.common import add_config_args, configs_from_args


def add_command(sub: Any) -> None:
    p = sub.add_parser("time", help="time one config (or a preset sweep) on this machine")
    add_config_args(p, preset_allowed=True)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default MHABENCH_THREADS or 1)")
    p.add_argument("--json", action="store_true", help="one JSON object per config")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.measure.timing import configure_process, measure

    configs = configs_from_args(args)
    configure_process(args.threads)  # before JAX touches a device
    for i, config in enumerate(configs, 1):
        if len(configs) > 1:
            print(f"[{i}/{len(configs)}] {config.id}", file=sys.stderr, flush=True)
        result = measure(config, repeats=args.repeats, warmup=args.warmup, threads=args.threads)
        if args.json:
            print(json.dumps(result.as_dict()), flush=True)
        else:
            print(f"{config.id}: median {result.median_s * 1e3:.2f} ms "
                  f"(IQR {result.q25_s * 1e3:.2f}-{result.q75_s * 1e3:.2f} ms, "
                  f"{result.repeats} repeats, {result.threads} thread(s))", flush=True)
    return 0
