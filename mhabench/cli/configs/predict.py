"""``mhabench predict``: a config's time from the time model fitted to asv results, with
every way the config lies outside what the model was fitted on."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mhabench.cli.common import add_config_args, add_results_args, config_from_args, load_results


def add_command(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict a config's time from fitted asv results")
    add_results_args(p)
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.analysis.prediction.timemodel import (
        FEATURES,
        feature_values,
        fit_models,
        select_model,
        underdetermined,
    )

    config = config_from_args(args)  # bad flags fail before the results are read
    results = load_results(args, "predict")
    model = select_model(fit_models(results.frame), config, args.machine,
                         underdetermined(results.frame))
    terms = model.terms(config)
    outside = model.extrapolation(config)
    reference = results.fast_probe_s.get(model.key[0])
    out = {"id": config.id, "machine": model.key[0], "predicted_s": sum(terms.values()),
           "extrapolation": outside,
           # the fit's cells were read at the machine's fast speed (analysis.fast_speed)
           "fast_probe_s": reference,
           "terms": {f"{f}_s": terms[f] for f in FEATURES},
           "features": feature_values(config, model.cache_bytes, model.kv_cache_bytes),
           "cache_bytes": model.cache_bytes, "kv_cache_bytes": model.kv_cache_bytes,
           "coefficients": {f"{f}": model.coef[f] for f in FEATURES},
           "fit": {"cells": model.cells, "r2": model.r2, "terms": list(model.features),
                   "median_rel_error": model.median_rel_error,
                   "ranges": {k: list(v) for k, v in model.ranges.items()},
                   "seen": {k: list(v) for k, v in model.seen.items()}}}
    if args.json:
        print(json.dumps(out))
    else:
        mark = " (EXTRAPOLATED)" if outside else ""
        print(f"{config.id} on {model.key[0]}: predicted {out['predicted_s'] * 1e3:.3f} ms"
              f"{mark}")
        for name, seconds in out["terms"].items():
            print(f"  {name:<8} {seconds * 1e3:10.3f} ms")
        print(f"  (fit on {model.cells} cells, terms {' + '.join(model.features)}, "
              f"R^2 {model.r2:.3f})")
        if reference is not None:
            print("  (the machine at its fast speed: the cells were divided by the moment's "
                  "slowdown their speed probes read)")
    for reason in outside:  # on stderr too, so a --json consumer's user still sees it
        print(f"mhabench predict: warning: extrapolation: {reason}", file=sys.stderr)
    return 0
