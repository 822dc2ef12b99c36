"""``mhabench cost``: the cost model's terms for one config (pure arithmetic, no timing)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mhabench.cli.common import add_config_args, config_from_args


def add_command(sub: Any) -> None:
    p = sub.add_parser("cost", help="the cost model's terms for one config")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def _table(rows: list[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v:>16,}" if isinstance(v, int) else f"{k:<{width}}  {v}"
                     for k, v in rows)


def run(args: argparse.Namespace) -> int:
    from mhabench.core.cost import cost

    config = config_from_args(args)
    terms = cost(config)
    if args.json:
        print(json.dumps({"id": config.id, "form": terms.form, **terms.as_dict()}))
    else:
        print(f"config {config.id}")
        print(_table([("form", terms.form), *terms.as_dict().items()]))
    return 0
