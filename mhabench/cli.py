"""The ``mhabench`` command line: cost, time, predict, report, profile.

Every subcommand that takes a config shares one set of flags (:func:`add_config_args`)
and one conversion to :class:`AttentionConfig` (:func:`config_from_args`), so a bad
value gets the config's own error message. Errors print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from mhabench.config import (
    BACKENDS,
    DEVICES,
    DTYPES,
    FRAMEWORKS,
    MODES,
    PRESETS,
    AttentionConfig,
    preset,
)


class CLIError(Exception):
    """A user error to print as one line (bad flag values, bad paths, bad results)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: usage + one line
        self.print_usage(sys.stderr)
        self.exit(2, f"mhabench: error: {message}\n")


def add_config_args(parser: argparse.ArgumentParser, preset_allowed: bool = False) -> None:
    g = parser.add_argument_group("config")
    g.add_argument("--framework", default="torch", help=f"one of {', '.join(FRAMEWORKS)}")
    g.add_argument("--backend", default="batched", help=f"one of {', '.join(BACKENDS)}")
    g.add_argument("--device", default="cpu", help=f"one of {', '.join(DEVICES)}")
    g.add_argument("--dtype", default="float32", help=f"one of {', '.join(DTYPES)}")
    g.add_argument("--mode", default="forward", help=f"one of {', '.join(MODES)}")
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("-n", type=int, default=512, help="queries per sequence")
    g.add_argument("-m", type=int, default=None, help="keys/values per sequence (default n)")
    g.add_argument("-d", type=int, default=256, help="model width")
    g.add_argument("--heads", type=int, default=8, help="query heads h")
    g.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads (default h: MHA; 1: MQA; else GQA)")
    g.add_argument("--cross", action="store_true", help="cross-attention: n queries over m keys")
    g.add_argument("--masked", action="store_true", help="mask keys with valid_lens")
    g.add_argument("--dropout", type=float, default=0.0)
    if preset_allowed:
        g.add_argument("--preset", default=None,
                       help=f"a named head sweep instead of --heads: {', '.join(PRESETS)}")


def config_from_args(args: argparse.Namespace) -> AttentionConfig:
    return AttentionConfig(
        framework=args.framework, backend=args.backend, device=args.device, dtype=args.dtype,
        mode=args.mode, batch=args.batch, n=args.n, m=args.m, d=args.d, heads=args.heads,
        kv_heads=args.kv_heads, cross=args.cross, masked=args.masked, dropout=args.dropout)


def configs_from_args(args: argparse.Namespace) -> list[AttentionConfig]:
    """One config, or a preset's head sweep (the preset fixes batch, n, d and h; the
    framework, backend, device, dtype, mode and variant flags still apply)."""
    base = config_from_args(args)
    if getattr(args, "preset", None) is None:
        return [base]
    return preset(args.preset, base.framework, base.backend, device=base.device,
                  dtype=base.dtype, mode=base.mode, cross=base.cross, masked=base.masked,
                  dropout=base.dropout)


def _table(rows: list[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v:>16,}" if isinstance(v, int) else f"{k:<{width}}  {v}"
                     for k, v in rows)


def cmd_cost(args: argparse.Namespace) -> int:
    from mhabench.cost import cost

    config = config_from_args(args)
    terms = cost(config).as_dict()
    if args.json:
        print(json.dumps({"id": config.id, **terms}))
    else:
        print(f"config {config.id}")
        print(_table(list(terms.items())))
    return 0


def cmd_time(args: argparse.Namespace) -> int:
    from mhabench.timing import configure_threads, measure

    configs = configs_from_args(args)
    configure_threads(args.threads)  # before JAX touches a device
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mhabench", description="Benchmark and profile multi-head attention "
                     "in PyTorch and JAX: cost model, timing, prediction, reports, traces.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("cost", help="the cost model's terms for one config")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("time", help="time one config (or a preset sweep) on this machine")
    add_config_args(p, preset_allowed=True)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default MHABENCH_THREADS or 1)")
    p.add_argument("--json", action="store_true", help="one JSON object per config")
    p.set_defaults(func=cmd_time)

    _add_extension_commands(sub)
    return parser


def _add_extension_commands(sub: Any) -> None:
    """Subcommands whose flags live beside their work (report/predict, profile); those
    modules import only the standard library at the top, so start-up stays cheap."""
    from mhabench import profiling_cli, report_cli

    report_cli.add_cli_commands(sub)
    profiling_cli.add_cli_commands(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        sys.stderr.close()
        return 0
    except (ValueError, CLIError, OSError) as exc:  # UnavailableError is a ValueError
        print(f"mhabench {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
