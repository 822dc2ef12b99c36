"""What every subcommand shares: the one-line error type, the parser that prints argparse's
errors on one line, and the config flags with their one conversion to
:class:`AttentionConfig` (so a bad value gets the config's own error message).

Subcommand modules import this module, never :mod:`mhabench.cli` itself: the package
imports them to build the parser, so the arrows point one way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from mhabench.core.backends import BUILTIN as BACKENDS
from mhabench.core.config import (
    DEVICES,
    DTYPES,
    FRAMEWORKS,
    MODES,
    PRESETS,
    AttentionConfig,
    preset,
)
from mhabench.core.models import MODELS, ModelShape, model_shape, read_hf_config

DEFAULT_D, DEFAULT_HEADS = 256, 8
# The flags a model's shape sets, by their config field.
SHAPE_FLAGS = {"d": "-d", "heads": "--heads", "kv_heads": "--kv-heads",
               "head_dim": "--head-dim", "scale": "--scale"}


class CLIError(Exception):
    """A user error to print as one line (bad flag values, bad paths, bad results)."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (``PROG: error: MESSAGE``) and exit status 2,
    like every other bad-input error of the command."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_config_args(parser: argparse.ArgumentParser, preset_allowed: bool = False) -> None:
    g = parser.add_argument_group("config")
    g.add_argument("--framework", default="torch", help=f"one of {', '.join(FRAMEWORKS)}")
    g.add_argument("--backend", default="batched",
                   help=f"one of {', '.join(BACKENDS)} or a registered plug-in "
                   "(mhabench.core.backends)")
    g.add_argument("--device", default="cpu", help=f"one of {', '.join(DEVICES)}")
    g.add_argument("--dtype", default="float32", help=f"one of {', '.join(DTYPES)}")
    g.add_argument("--mode", default="forward", help=f"one of {', '.join(MODES)}")
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("-n", type=int, default=512, help="queries per sequence")
    g.add_argument("-m", type=int, default=None, help="keys/values per sequence (default n)")
    g.add_argument("-d", type=int, default=None, help=f"model width (default {DEFAULT_D})")
    g.add_argument("--heads", type=int, default=None,
                   help=f"query heads h (default {DEFAULT_HEADS})")
    g.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads (default h: MHA; 1: MQA; else GQA)")
    g.add_argument("--head-dim", type=int, default=None,
                   help="head width p (default d/h; a model's own may differ)")
    g.add_argument("--scale", type=float, default=None,
                   help="the factor on the scores before the softmax (default 1/sqrt(p))")
    add_model_args(g)
    g.add_argument("--cross", action="store_true", help="cross-attention: n queries over m keys")
    g.add_argument("--masked", action="store_true", help="mask keys with valid_lens")
    g.add_argument("--causal", action="store_true",
                   help="causal self-attention: each token sees itself and earlier ones")
    g.add_argument("--dropout", type=float, default=0.0)
    if preset_allowed:
        g.add_argument("--preset", default=None,
                       help=f"a named head sweep instead of --heads: {', '.join(PRESETS)}")


def add_model_args(parser: Any) -> None:
    """``--model NAME`` or ``--hf-config PATH``: a published model's attention shape."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--model", metavar="NAME", default=None,
                   help="a published model's attention shape (sets d, heads, kv heads, head "
                        f"width and scale): {', '.join(MODELS)}")
    g.add_argument("--hf-config", metavar="PATH", default=None,
                   help="the attention shape of a Hugging Face config.json on disk (sets the "
                        "same)")


def model_from_args(args: argparse.Namespace) -> ModelShape | None:
    """The shape ``--model`` or ``--hf-config`` names, or None."""
    if getattr(args, "model", None) is not None:
        return model_shape(args.model)
    if getattr(args, "hf_config", None) is not None:
        return read_hf_config(args.hf_config)
    return None


def shape_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """d, heads, kv_heads, head_dim and scale: from ``--model``/``--hf-config``, or from
    their own flags (a model's shape and those flags together are an error)."""
    model = model_from_args(args)
    if model is None:
        given = {k: getattr(args, k) for k in SHAPE_FLAGS}
        return {**given, "d": DEFAULT_D if args.d is None else args.d,
                "heads": DEFAULT_HEADS if args.heads is None else args.heads}
    clash = [flag for key, flag in SHAPE_FLAGS.items() if getattr(args, key) is not None]
    if clash:
        source = "--model" if args.model is not None else "--hf-config"
        raise CLIError(f"{' '.join(clash)} cannot go with {source}, which sets d, heads, kv "
                       "heads, head width and scale; drop one of them")
    return model.fields()


def config_from_args(args: argparse.Namespace) -> AttentionConfig:
    return AttentionConfig(
        framework=args.framework, backend=args.backend, device=args.device, dtype=args.dtype,
        mode=args.mode, batch=args.batch, n=args.n, m=args.m, cross=args.cross,
        masked=args.masked, causal=args.causal, dropout=args.dropout,
        **shape_from_args(args))


def configs_from_args(args: argparse.Namespace) -> list[AttentionConfig]:
    """One config, or a preset's head sweep (the preset fixes batch, n, d and h; the
    framework, backend, device, dtype, mode and variant flags still apply)."""
    base = config_from_args(args)
    if getattr(args, "preset", None) is None:
        return [base]
    if model_from_args(args) is not None:
        raise CLIError(f"--preset {args.preset} sweeps the chapter's heads; it cannot go with "
                       "--model or --hf-config")
    return preset(args.preset, base.framework, base.backend, device=base.device,
                  dtype=base.dtype, mode=base.mode, cross=base.cross, masked=base.masked,
                  causal=base.causal, dropout=base.dropout)


def add_results_args(parser: argparse.ArgumentParser) -> None:
    """``--results`` and ``--machine``, for the subcommands that read asv results."""
    parser.add_argument("--results", required=True,
                        help="asv results folder (e.g. .asv/results)")
    parser.add_argument("--machine", default=None, help="machine name (needed if several)")


def load_results(args: argparse.Namespace, command: str) -> Any:
    """The asv results named by ``--results``/``--machine``, each time cell with the
    moment's slowdown from the load records beside them (or ``--load``;
    :mod:`mhabench.analysis.fast_speed`); loading warnings go to stderr."""
    from mhabench.analysis.fast_speed import add_slowdown, beside_results
    from mhabench.analysis.results import load_results as load
    from mhabench.asvproject.own_repo import checkout_backends
    from mhabench.measure.conditions.machine_load import FOLDER as LOAD_FOLDER
    from mhabench.measure.conditions.machine_load import read_records

    # A plug-in's own checkout (mhabench init): its backends name cells of the results.
    for warning in checkout_backends(Path(getattr(args, "repo", None) or ".")):
        print(f"mhabench {command}: warning: {warning}", file=sys.stderr)
    results = load(args.results, machine=args.machine)
    results.loads = read_records(getattr(args, "load", None)
                                 or beside_results(results.root, LOAD_FOLDER))
    results.frame, results.fast_probe_s = add_slowdown(results.frame, results.loads)
    for warning in results.warnings:
        print(f"mhabench {command}: warning: {warning}", file=sys.stderr)
    return results


def add_history_args(parser: argparse.ArgumentParser) -> None:
    """The flags that judge histories across commits (``report`` and ``confirm``)."""
    parser.add_argument("--threshold", type=float, default=None,
                        help="smallest slowdown factor reported as a regression (default "
                             "1.1, as asv compare)")
    parser.add_argument("--repo", default=".",
                        help="git repository whose history orders the commits (default: the "
                             "current folder; without the commits there, the dates asv "
                             "recorded)")
    parser.add_argument("--load", default=None, metavar="DIR",
                        help="the machine-load records of the runs (default: load/ beside "
                             "the results folder, .asv/load)")
    parser.add_argument("--confirmations", default=None, metavar="DIR",
                        help="the verdicts of mhabench confirm (default: confirm/ beside the "
                             "results folder, .asv/confirm)")


def history_threshold(args: argparse.Namespace, writes_confirmations: bool = False) -> float:
    """``--threshold`` checked (a slowdown factor above 1), its default filled in; the
    folders given must exist (``--confirmations`` only where it is read, not written)."""
    threshold = 1.1 if args.threshold is None else args.threshold
    if not threshold > 1:
        raise CLIError(f"--threshold {threshold} is not allowed; it must be above 1 "
                       "(a slowdown factor, e.g. 1.1)")
    if not Path(args.repo).is_dir():
        raise CLIError(f"--repo {args.repo!r} is not a folder; give the git checkout whose "
                       "history orders the commits")
    for flag in ("load",) if writes_confirmations else ("load", "confirmations"):
        value = getattr(args, flag)
        if value is not None and not Path(value).is_dir():
            raise CLIError(f"--{flag} {value!r} is not a folder")
    return threshold
