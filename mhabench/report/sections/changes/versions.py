"""The section "Versions side by side": one commit timed in two dependency sets by
``mhabench versions``, read from the ``versions.json`` beside the results."""

from __future__ import annotations

import pandas as pd

from mhabench.analysis.comparisons.versions import (
    cells_frame,
    compile_frame,
    finding,
    load_summary,
    side_label,
)
from mhabench.report.context import Context
from mhabench.report.types import Section, Table


def versions_section(ctx: Context) -> Section:
    summary = load_summary(ctx.results.root)
    if summary is None:
        return Section("", "", absent="No versions comparison beside these results "
                       "(mhabench versions BASE NEW writes one; report on its results "
                       "folder).")
    section = Section("", "", facts={"summary": summary})
    settings = summary.get("settings", {})
    sides = summary["sides"]
    section.text.append(
        f"Commit {summary['commit'][:8]} timed in two asv environments: base "
        f"{side_label(summary, 'base')} (`{sides['base'].get('env_name')}`) and new "
        f"{side_label(summary, 'new')} (`{sides['new'].get('env_name')}`).")
    section.text.append(
        f"Each side's evidence is its processes' medians, the sides alternating (ABAB, then BABA); "
        f"{settings.get('screen_rounds')} rounds screen every cell, a ratio past "
        f"{settings.get('screen_factor')}x either way gets {settings.get('confirm_rounds')} "
        f"fresh rounds, and a cell is slower or faster only where that confirmation's 95 % "
        f"interval (a bootstrap over processes) clears 1.0 and its ratio passes "
        f"{settings.get('factor')}x. new/base is the factor that lines up the two sides' "
        "levels, so the machine's slow mode and a cell's fast mode count as levels of their "
        "own (docs/gate.md).")
    section.text.append(finding(summary))
    seconds = summary.get("seconds", {})
    if seconds:
        section.text.append("Time taken: " + ", ".join(f"{k} {v:.0f} s"
                                                      for k, v in seconds.items()) + ".")
    section.tables.append(Table("cells", "Each cell: verdict, new/base and the kernel each "
                                "side ran (the worst verdicts first)", cells_frame(summary),
                                detail=True))
    compiled = compile_frame(summary)
    if len(compiled):
        section.tables.append(Table("compile", "Compile time on each side: one process a "
                                    "side, no verdict", compiled))
    section.tables.append(Table("environments", "What each side had installed",
                                _environments(sides)))
    return section


def _environments(sides: dict) -> pd.DataFrame:
    names = sorted({n for s in sides.values() for n in (s.get("versions") or {})})
    return pd.DataFrame([{"package": n, **{label: (s.get("versions") or {}).get(n)
                                           for label, s in sides.items()}} for n in names],
                        columns=["package", *sides])
