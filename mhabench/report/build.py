"""Build a report from loaded asv results and write it (HTML, Markdown, CSV).

:data:`SECTIONS` lists every section in page order with its builder; each builder takes
the shared :class:`~mhabench.report.context.Context` and returns a
:class:`~mhabench.report.types.Section`. The findings come first on the page and are built
last, from the other sections' tables (:mod:`mhabench.report.findings`); then every plot
gets its colours and markers from one palette for the whole report. :func:`write_report`
never overwrites a file: it refuses before writing anything if one of its outputs exists,
or if the output would land inside the results folder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from mhabench.report import findings
from mhabench.report.context import Context
from mhabench.report.render.palette import Palette
from mhabench.report.sections import (
    compare,
    gpu,
    memory,
    model,
    models,
    overview,
    profile,
    validation,
)
from mhabench.report.sections.changes import history, releases, versions
from mhabench.report.types import Report, Section

# asv compare / continuous flag a change when new/old passes this factor (asv's default).
DEFAULT_THRESHOLD = 1.1
# (id, title, builder) of every section, in page order; ids are HTML anchors and CSV prefixes.
SECTIONS: tuple[tuple[str, str, Callable[[Context], Section]], ...] = (
    ("machine", "Machine and calibration", overview.machine_section),
    ("exercise-6-4", "Exercise 6.4: time against the head count h",
     overview.exercise_section),
    ("measured-vs-model", "Measured time against the FLOP model",
     overview.model_section),
    ("gpu-peak", "GPU kernels against the peak", gpu.gpu_section),
    ("kernels", "The attention kernel each fused cell ran", memory.kernels_section),
    ("memory", "Memory: the model against the step's measured memory",
     memory.memory_section),
    ("per-head-decomposition", "Per-head overhead: what grows with h",
     model.decomposition_section),
    ("time-model", "Calibrated time model and its leave-out accuracy",
     model.timemodel_section),
    ("validation", "The time model on random configs off the grid",
     validation.validation_section),
    ("scaling", "Scaling in n and d", compare.scaling_section),
    ("self-vs-cross", "Self- against cross-attention", compare.cross_section),
    ("mha-gqa-mqa", "MHA against GQA and MQA", compare.variants_section),
    ("decoding", "Decoding with and without caches", compare.decoding_section),
    ("forward-backward", "Forward against forward + backward", compare.train_section),
    ("torch-vs-jax", "PyTorch against JAX", compare.frameworks_section),
    (models.SECTION_ID, "Models", models.models_section),
    ("regressions", "Regressions across commits (time)", history.regressions_section),
    ("memory-and-track", "Memory and track_ values across commits",
     history.values_section),
    ("versions", "Versions side by side", versions.versions_section),
    (releases.SECTION_ID, "Across releases", releases.releases_section),
    ("machines", "Machines side by side", compare.machines_section),
    ("profile", "Profile breakdown by region", profile.profile_section),
)
FINDINGS = ("findings", "Findings")  # built from the sections below, shown above them
SECTION_IDS = (FINDINGS[0], *(sid for sid, _, _ in SECTIONS))


def progress(message: str) -> None:
    print(f"mhabench report: {message}", file=sys.stderr, flush=True)


def build_report(results: Any, traces: pd.DataFrame | None = None,
                 threshold: float = DEFAULT_THRESHOLD,
                 log: Callable[[str], None] = progress, repo: str | Path | None = None,
                 validations: Sequence[dict[str, Any]] = (),
                 load_dir: str | Path | None = None,
                 confirm_dir: str | Path | None = None) -> Report:
    """Every section of the report from loaded :class:`mhabench.analysis.results.Results`.

    ``repo``: the git repository whose history orders the commits (else the dates asv
    recorded); ``validations``: the files ``mhabench validate --save`` wrote, for its section;
    ``load_dir``: the machine-load records (``mhabench.measure.conditions.machine_load``);
    ``confirm_dir``: the verdicts of ``mhabench confirm``. Both default to their folders beside the
    results (``.asv/load`` and ``.asv/confirm`` for ``.asv/results``).
    """
    from mhabench.analysis.fast_speed import beside_results
    from mhabench.analysis.history.confirmations import load_confirmations
    from mhabench.analysis.history.regressions import commit_order
    from mhabench.analysis.prediction.timemodel import (
        fit_models,
        groups,
        timing_cells,
        underdetermined,
    )
    from mhabench.measure.conditions.machine_load import FOLDER as LOAD_FOLDER
    from mhabench.measure.conditions.machine_load import read_records

    log(f"{len(results.frame)} result rows from {results.root}; fitting time models")
    order = commit_order(results.frame, repo)
    # once: the models, the gaps and the sections
    cells = timing_cells(results.frame, order.commits)
    by_group = groups(results.frame, cells)
    context = Context.from_results(results, cells, fit_models(results.frame, by_group),
                                   traces, threshold,
                                   underdetermined=underdetermined(results.frame, by_group),
                                   order=order,
                                   validations=list(validations),
                                   loads=read_records(load_dir) if load_dir
                                   else results.loads if results.loads is not None
                                   else read_records(beside_results(results.root, LOAD_FOLDER)),
                                   confirmations=load_confirmations(
                                       confirm_dir or beside_results(results.root, "confirm")))
    sections = []
    for sid, title, builder in SECTIONS:
        log(f"section {sid}")
        section = builder(context)
        section.id, section.title = sid, title
        sections.append(section)
    log("findings")
    first = findings.findings_section(context, {s.id: s for s in sections})
    first.id, first.title = FINDINGS
    sections.insert(0, first)
    palette = Palette(results.frame["backend"].dropna().unique())
    for section in sections:
        for plot in section.plots:
            plot.styles = dict(palette.styles(plot))
    machines = ", ".join(results.machine_names) or "no machine"
    return Report(f"mhabench report: {machines}", str(results.root), sections,
                  list(results.warnings))


def output_paths(out: str | Path) -> dict[str, Path]:
    """The files a report named ``out`` (``.../NAME.html``) writes: the page, its Markdown
    twin and a folder with one CSV per table."""
    out = Path(out)
    if out.suffix.lower() != ".html":
        raise ValueError(f"--out {str(out)!r} is not allowed; give a file name ending in .html "
                         "(the Markdown and CSV exports go beside it)")
    return {"html": out, "markdown": out.with_suffix(".md"),
            "tables": out.with_name(out.stem + "_tables")}


def check_outputs(out: str | Path, results_root: str | Path) -> dict[str, Path]:
    """Refuse (FileExistsError / ValueError) before any work if an output exists or would
    land inside the results folder."""
    paths = output_paths(out)
    root = Path(results_root).resolve()
    for path in paths.values():
        resolved = path.resolve()
        if resolved == root or root in resolved.parents:
            raise ValueError(f"report output {str(path)!r} is inside the results folder "
                             f"{str(results_root)!r}, which is never written to; "
                             "choose another --out")
        if path.exists():
            raise FileExistsError(f"{str(path)!r} already exists and reports are never "
                                  "overwritten; choose a new --out name")
    return paths


def write_report(report: Report, out: str | Path) -> dict[str, Path]:
    """Write the HTML page, the Markdown export and the CSV tables (every row of every
    table; the pages show a per-cell table's worst rows and link its CSV); returns their
    paths."""
    from mhabench.report.render.excerpt import csv_name
    from mhabench.report.render.html import render_html
    from mhabench.report.render.markdown import render_markdown

    paths = check_outputs(out, report.results_root)
    paths["html"].parent.mkdir(parents=True, exist_ok=True)
    html = render_html(report, paths["tables"].name)  # render all before writing anything
    markdown = render_markdown(report, paths["tables"].name)
    paths["tables"].mkdir()
    for section in report.sections:
        for table in section.tables:
            target = paths["tables"] / csv_name(section, table)
            with target.open("x", encoding="utf-8", newline="") as fh:
                table.frame.to_csv(fh, index=False)
    for key, text in (("markdown", markdown), ("html", html)):
        with paths[key].open("x", encoding="utf-8") as fh:
            fh.write(text)
    return paths
