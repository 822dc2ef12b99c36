"""``mhabench check``: a backend's outputs against the reference in every variant it runs
(``mhabench.measure.agreement``): what a user runs on their own registered backend."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mhabench.cli.common import CLIError, add_model_args, model_from_args


def add_command(sub: Any) -> None:
    p = sub.add_parser("check", help="a backend's outputs against the reference backend "
                       "(MHA/GQA/MQA, cross, masked, decode, prefix, train)")
    p.add_argument("--framework", default="torch", help="torch or jax")
    p.add_argument("--backend", required=True,
                   help="a registered backend (built-in, entry point or MHABENCH_BACKENDS)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--json", action="store_true", help="one JSON object per variant")
    add_model_args(p)  # every variant at that model's width and heads (batch 3, n 7)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.core import backends
    from mhabench.measure import agreement

    backends.get(args.framework, args.backend)  # an unknown name: the registry's error
    model = model_from_args(args)
    rows = agreement.check(args.framework, args.backend, device=args.device,
                           shape=None if model is None else model.fields())
    for row in rows:
        if args.json:
            print(json.dumps({"variant": row.variant, "id": row.config_id,
                              "max_error": row.max_error, "ok": row.ok, "reason": row.reason,
                              "raised": row.raised}))
        elif row.raised:
            print(f"{row.variant:<13} FAIL  {row.reason}  {row.config_id}")
        elif row.max_error is None:
            print(f"{row.variant:<13} n/a   {row.reason}")
        else:
            verdict = "ok" if row.ok else f"FAIL (tolerance {agreement.ATOL:g})"
            print(f"{row.variant:<13} {row.max_error:.2e} {verdict}  {row.config_id}")
    failed = [r.variant for r in rows if not r.ok]
    if failed:
        raise CLIError(f"{args.framework}/{args.backend} disagrees with "
                       f"{'/'.join(agreement.REFERENCE)} in {', '.join(failed)}")
    if all(r.max_error is None for r in rows):
        raise CLIError(f"{args.framework}/{args.backend} ran no variant")
    return 0
