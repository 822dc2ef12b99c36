"""``mhabench report`` and ``mhabench predict``: the subcommands that read asv results.

Top-level imports stay light (the CLI imports this module for every command); pandas,
matplotlib and the analysis modules are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mhabench.cli import CLIError, add_config_args, config_from_args


def _load(args: argparse.Namespace, command: str) -> Any:
    from mhabench.results import load_results

    results = load_results(args.results, machine=args.machine)
    for warning in results.warnings:
        print(f"mhabench {command}: warning: {warning}", file=sys.stderr)
    return results


def cmd_predict(args: argparse.Namespace) -> int:
    from mhabench.timemodel import FEATURES, feature_values, fit_models, select_model

    config = config_from_args(args)  # bad flags fail before the results are read
    results = _load(args, "predict")
    model = select_model(fit_models(results.frame), config, args.machine)
    terms = model.terms(config)
    out = {"id": config.id, "machine": model.key[0], "predicted_s": sum(terms.values()),
           "terms": {f"{f}_s": terms[f] for f in FEATURES},
           "features": feature_values(config, model.cache_bytes, model.kv_cache_bytes),
           "cache_bytes": model.cache_bytes, "kv_cache_bytes": model.kv_cache_bytes,
           "coefficients": {f"{f}": model.coef[f] for f in FEATURES},
           "fit": {"cells": model.cells, "r2": model.r2,
                   "median_rel_error": model.median_rel_error}}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{config.id} on {model.key[0]}: predicted {out['predicted_s'] * 1e3:.3f} ms")
        for name, seconds in out["terms"].items():
            print(f"  {name:<8} {seconds * 1e3:10.3f} ms")
        print(f"  (fit on {model.cells} cells, R^2 {model.r2:.3f})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from mhabench.report import (
        DEFAULT_THRESHOLD,
        build_report,
        check_outputs,
        progress,
        write_report,
    )

    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    if not threshold > 1:
        raise CLIError(f"--threshold {threshold} is not allowed; it must be above 1 "
                       "(a slowdown factor, e.g. 1.1)")
    check_outputs(args.out, args.results)  # refuse before any slow work
    progress(f"loading {args.results}")
    results = _load(args, "report")
    traces = None
    if args.traces is not None:
        from pathlib import Path

        from mhabench.profiling import breakdown_table

        if not Path(args.traces).is_dir():
            raise CLIError(f"--traces {args.traces!r} is not a folder")
        progress(f"reading traces under {args.traces}")
        traces = breakdown_table(args.traces)
    report = build_report(results, traces, threshold)
    progress("rendering plots and writing files")
    paths = write_report(report, args.out)
    print(f"wrote {paths['html']} (Markdown {paths['markdown']}, CSV tables in "
          f"{paths['tables']}/)")
    return 0


def add_cli_commands(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict a config's time from fitted asv results")
    p.add_argument("--results", required=True, help="asv results folder (e.g. .asv/results)")
    p.add_argument("--machine", default=None, help="machine name (needed if several)")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("report", help="HTML/Markdown/CSV report from asv results")
    p.add_argument("--results", required=True, help="asv results folder (e.g. .asv/results)")
    p.add_argument("--out", required=True,
                   help="new report file NAME.html (NAME.md and NAME_tables/ go beside it)")
    p.add_argument("--traces", default=None, help="profiler logdir from mhabench profile")
    p.add_argument("--machine", default=None, help="only this machine's results")
    p.add_argument("--threshold", type=float, default=None,
                   help="regression factor new/previous commit (default 1.1, as asv)")
    p.set_defaults(func=cmd_report)
