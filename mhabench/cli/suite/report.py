"""``mhabench report``: the HTML/Markdown/CSV report from asv results (never overwrites)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mhabench.cli.common import (
    CLIError,
    add_history_args,
    add_results_args,
    history_threshold,
    load_results,
)


def add_command(sub: Any) -> None:
    p = sub.add_parser("report", help="HTML/Markdown/CSV report from asv results")
    add_results_args(p)
    p.add_argument("--out", required=True,
                   help="new report file NAME.html (NAME.md and NAME_tables/ go beside it)")
    p.add_argument("--traces", default=None, help="profiler logdir from mhabench profile")
    add_history_args(p)
    p.add_argument("--validation", nargs="+", default=[], metavar="FILE.json",
                   help="random-config validation(s) written by mhabench validate --save; "
                        "several: one row per sample and their pooled tail")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mhabench.report.build import (
        build_report,
        check_outputs,
        progress,
        write_report,
    )

    threshold = history_threshold(args)
    check_outputs(args.out, args.results)  # refuse before any slow work
    validations = []
    if args.validation:
        from mhabench.analysis.prediction.validation import load_validation

        given = [Path(p).resolve() for p in args.validation]
        twice = sorted({str(p) for p in given if given.count(p) > 1})
        if twice:
            raise CLIError(f"--validation names {', '.join(map(repr, twice))} more than once: "
                           "each sample may count once")
        validations = [load_validation(p) for p in args.validation]
    if args.traces is not None and not Path(args.traces).is_dir():
        raise CLIError(f"--traces {args.traces!r} is not a folder")
    progress(f"loading {args.results}")
    results = load_results(args, "report")
    traces = None
    if args.traces is not None:
        from mhabench.measure.profiler.profiling import breakdown_table

        progress(f"reading traces under {args.traces}")
        traces = breakdown_table(args.traces)
    report = build_report(results, traces, threshold, repo=args.repo, validations=validations,
                          confirm_dir=args.confirmations)  # --load: read with the results
    progress("rendering plots and writing files")
    paths = write_report(report, args.out)
    print(f"wrote {paths['html']} (Markdown {paths['markdown']}, CSV tables in "
          f"{paths['tables']}/)")
    return 0
