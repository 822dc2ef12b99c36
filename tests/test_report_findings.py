"""The report answers first: the findings computed from the results and linked to their
evidence, per-cell tables collapsed, plots whose lines a reader can tell apart, the b*h*n*m
term named for what each kernel does, human units, kernel changes beside time steps."""

from __future__ import annotations

import io
import json
import re
import shutil
from html import escape
from pathlib import Path

import pandas as pd
import pytest
from fixtures.synthetic_asv import BENCH, synthetic_time, write_results

from mhabench.analysis.results import load_results
from mhabench.cluster.merge import merge
from mhabench.core.backends import BUILTIN
from mhabench.core.kernel_codes import KERNEL_CODES, SCORE_TERMS
from mhabench.report.build import SECTION_IDS, build_report, write_report
from mhabench.report.render.excerpt import MAX_SHOWN_ROWS, csv_name, excerpt
from mhabench.report.render.formatting import size_text
from mhabench.report.render.html import MAX_OPEN_ROWS
from mhabench.report.render.palette import Palette, clashes, series_labels
from mhabench.report.render.plots import (
    DPI,
    FACET_COLUMNS_SMALL,
    FACET_SMALL,
    MAX_LINES,
    panels,
    plot_png,
)
from mhabench.report.types import Plot, Report, Section, Table

FIXTURES = Path(__file__).parent / "fixtures"
QUIET = {"log": lambda m: None}


def sections_of(report: Report) -> dict[str, Section]:
    return {s.id: s for s in report.sections}


def frame_of(section: Section, name: str) -> pd.DataFrame:
    return next(t.frame for t in section.tables if t.name == name)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real CPU fixture and the H200 fixture in one results folder."""
    root = tmp_path_factory.mktemp("both") / "results"
    shutil.copytree(FIXTURES / "asv_results", root)
    merge(FIXTURES / "gpu_results", root)
    return root


@pytest.fixture(scope="module")
def both_report(both: Path) -> Report:
    return build_report(load_results(both), **QUIET)


# ----- palette and plots ------------------------------------------------------------------
def test_palette_gives_each_backend_its_colour_and_each_framework_its_marker() -> None:
    palette = Palette(["plain", "zeta"])
    colours = [palette.backend("torch", b).colour for b in (*BUILTIN, "plain", "zeta")]
    assert len(set(colours)) == len(colours)  # plug-ins take the next free colours
    assert palette.backend("torch", "batched").marker != palette.backend("jax",
                                                                         "batched").marker
    # the same backend keeps its colour in every plot of the report
    one = Plot("a", "x", "y", {"torch/fused": ([1], [1]), "jax/batched": ([1], [1])})
    two = Plot("b", "x", "y", {"jax/batched": ([1], [1])})
    assert palette.styles(one)["jax/batched"] == palette.styles(two)["jax/batched"]
    every = Plot("all", "x", "y", {f"{fw}/{b}": ([1], [1]) for fw in ("torch", "jax")
                                   for b in (*BUILTIN, "plain")})
    assert clashes(palette.styles(every)) == []
    # the check itself finds two series drawn alike
    assert clashes({"a": ("#000", "o"), "b": ("#000", "o")}) == [("a", "b")]


def test_a_plot_of_many_lines_gets_one_panel_per_framework() -> None:
    series = {f"{fw}/{b}": ([1.0, 2.0, 4.0], [1.0, 2.0, 3.0]) for fw in ("torch", "jax")
              for b in BUILTIN[:4]}
    assert len(series) > MAX_LINES
    plot = Plot("many", "heads h", "ms", series, logx=True, logy=True)
    split = panels(plot)
    assert [name for name, _ in split] == ["PyTorch", "JAX"]
    assert sorted(label for _, labels in split for label in labels) == sorted(series)
    few = Plot("few", "heads h", "ms", dict(list(series.items())[:MAX_LINES]))
    assert len(panels(few)) == 1
    from PIL import Image

    plot.styles = dict(Palette().styles(plot))
    image = Image.open(io.BytesIO(plot_png(plot)))
    assert image.width > Image.open(io.BytesIO(plot_png(few))).width  # two panels wide


def test_no_plot_of_the_report_draws_two_lines_alike(both_report: Report) -> None:
    plots = [p for s in both_report.sections for p in s.plots]
    assert plots and any(p.facets for p in plots)
    for plot in plots:
        assert set(plot.styles) == set(series_labels(plot)), plot.title
        assert clashes(plot.styles) == [], plot.title
        for part in plot.facets or [plot]:
            if part.style == "line":  # a line joins its points left to right
                assert all(x == sorted(x) for x, _ in part.series.values()), plot.title


def test_facets_are_one_figure_under_one_legend_in_the_reports_colours() -> None:
    import numpy as np
    from PIL import Image

    from mhabench.report.render.html import plot_html

    def facet(i: int, labels: tuple[str, ...]) -> Plot:
        return Plot("", f"x{i}", "ms", {lab: ([1.0, 2.0, 4.0], [1.0, 3.0, 2.0 + j])
                                        for j, lab in enumerate(labels)}, small=True)

    plot = Plot("a family", "", "ms", {}, facets=[
        facet(0, ("torch/batched", "jax/fused")), facet(1, ("torch/batched",)),
        facet(2, ("torch/loop", "jax/fused"))])
    plot.styles = dict(Palette().styles(plot))
    assert list(plot.styles) == series_labels(plot) == ["torch/batched", "jax/fused",
                                                        "torch/loop"]
    image = Image.open(io.BytesIO(plot_png(plot)))
    # three panels and the legend's cell in one row of small panels
    assert image.size == (round(FACET_COLUMNS_SMALL * FACET_SMALL[0] * DPI),
                          round(FACET_SMALL[1] * DPI))
    pixels = np.asarray(image.convert("RGB"), int).reshape(-1, 3)
    for colour, _ in plot.styles.values():  # every line in its colour, wherever it is drawn
        rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(pixels - rgb).max(axis=1) <= 8).sum() > 20, colour
    assert all(f"&quot;{label}&quot;" in plot_html(plot) for label in plot.styles)


def test_the_compact_png_keeps_every_lines_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from PIL import Image

    from mhabench.report.render import plots

    series = {f"torch/{b}": ([1.0, 2.0, 4.0], [1.0 + i, 2.0 + i, 3.0 + i])
              for i, b in enumerate(BUILTIN)}
    plot = Plot("colours", "heads h", "ms", series, style="scatter")
    plot.styles = dict(Palette().styles(plot))
    compact = Image.open(io.BytesIO(plot_png(plot)))
    monkeypatch.setattr(plots, "_compact", lambda png: png)
    raw = Image.open(io.BytesIO(plot_png(plot))).convert("RGB")
    assert compact.mode == "P"  # palette PNG: the report's size
    error = np.abs(np.asarray(raw, int) - np.asarray(compact.convert("RGB"), int))
    assert error.max() <= 8


def test_exercise_plot_is_the_chapters_sweep_of_at_least_three_head_counts(
        tmp_path: Path) -> None:
    root = write_results(tmp_path / "r")  # b 2 and 8, n 128-512, d 64 and 256, h 1-64
    exercise = sections_of(build_report(load_results(root), **QUIET))["exercise-6-4"]
    assert len(exercise.plots) == 1 and "b8 n512 m512 d256" in exercise.plots[0].title
    summary = frame_of(exercise, "summary")
    assert set(summary["shape"]) == {"b8 n512 m512 d256"}
    two = write_results(tmp_path / "two", params=[["torch"], ["batched"], [8], [512], [256],
                                                  [8, 16], ["cpu"], ["float32"], ["forward"]])
    exercise = sections_of(build_report(load_results(two), **QUIET))["exercise-6-4"]
    assert exercise.plots == []  # two head counts are a comparison, not a sweep


# ----- findings ---------------------------------------------------------------------------
def test_findings_come_first_computed_from_the_results(tmp_path: Path) -> None:
    slow = {}
    for factor in (1.0, 3.0):  # the h=64 cells 3x slower: the finding's ratio moves with it
        root = write_results(tmp_path / f"r{factor}", time_of=lambda c, i, f=factor: (
            synthetic_time(c) * (f if c.heads == 64 else 1.0)))
        report = build_report(load_results(root), **QUIET)
        assert report.sections[0].id == "findings" == SECTION_IDS[0]
        findings = report.sections[0].findings
        assert {f.target for f in findings} <= {*SECTION_IDS, "warnings"}
        summary = frame_of(sections_of(report)["exercise-6-4"], "summary")
        ratio = summary[summary["backend"] == "batched"]["slowest/fastest"].iloc[0]
        text = findings[0].answers["synth (CPU, 2 cores)"]
        assert f"{ratio:.1f}x (PyTorch)" in text
        slow[factor] = ratio
    assert slow[3.0] > 2 * slow[1.0]


def test_findings_name_each_machine_beside_the_other(both_report: Report) -> None:
    findings = both_report.sections[0].findings
    columns = list(findings[0].answers)
    assert columns == ["fixture-machine (CPU)", "h200 (NVIDIA H200)"]
    by = {f.question: f.answers for f in findings}
    exercise = by["Exercise 6.4: is h free at fixed d?"]
    assert exercise["fixture-machine (CPU)"].startswith("b2 n32 m32 d32 float32, h 1-16")
    assert exercise["h200 (NVIDIA H200)"].startswith("b2 n512 m512 d256 float32")  # its own
    assert by["Regressions since the previous commit"]["fixture-machine (CPU)"].startswith(
        "one commit measured")
    # every answer is a computed line, or says that nothing was measured
    assert all(a == "not measured" or re.search(r"\d", a) for f in findings
               for a in f.answers.values())


# ----- sections: summaries whole, per-cell tables cut to their worst rows ----------------
def html_rows(text: str, section: Section, title: str) -> int:
    """The rows the page shows of the table captioned ``title`` in ``section``."""
    start = text.index(f"<caption>{escape(title)}</caption>", text.index(f'id="{section.id}"'))
    return text[start:text.index("</tbody>", start)].count("<tr>") - 1  # less the header


def test_summaries_are_whole_and_per_cell_tables_show_their_worst_rows(both_report: Report,
                                                                       tmp_path: Path) -> None:
    report = both_report
    paths = write_report(report, tmp_path / "r.html")
    text = paths["html"].read_text()
    markdown = paths["markdown"].read_text()
    # the findings come before the contents, and each links to an element of the page
    ids = set(re.findall(r'id="([^"]+)"', text))
    targets = re.findall(r'<tr><th><a href="#([^"]+)">', text)
    assert targets and set(targets) <= ids
    assert text.index('id="findings"') < text.index("<nav>")
    assert markdown.index("## Findings") < markdown.index("## Machine and calibration")
    details = re.findall(r"<details><summary>(.*?)</summary>", text)
    tables = [(s, t) for s in report.sections for t in s.tables]
    assert len(details) == sum(t.detail or len(t.frame) > MAX_OPEN_ROWS for _, t in tables)
    cut = 0
    for section, table in tables:
        name = csv_name(section, table)
        hidden = len(table.frame) - MAX_SHOWN_ROWS
        assert len(pd.read_csv(paths["tables"] / name)) == len(table.frame), name
        if table.detail and hidden > 0:  # the worst rows, the rest counted and linked
            cut += 1
            assert html_rows(text, section, table.title) == MAX_SHOWN_ROWS, name
            assert f'{hidden} more rows in <a href="r_tables/{name}">{name}</a>' in text
            assert f"{hidden} more rows in [{name}](r_tables/{name})" in markdown
        else:  # a summary, or a short per-cell table: whole on the page and in the Markdown
            assert html_rows(text, section, table.title) == len(table.frame), name
            assert f"**{table.title}**" in markdown and f"more rows in [{name}]" not in markdown
    assert cut > 5
    assert any(t.title == "Each timed cell against the FLOP model (flops_model = 8nd^2 + "
               "4n^2 d for self-attention MHA)" and t.detail for _, t in tables)


def test_a_per_cell_table_shows_its_worst_rows_by_its_rank() -> None:
    frame = pd.DataFrame({"cell": list("abcdefg"), "x": [0.4, 3.0, None, 1.0, -4.0, 2.0, 0.9]})
    # n/a last; a ratio's "far from 1" reads a value at or below 0 as n/a
    expected = {"high": "bfdgaec", "low": "eagdfbc", "far from 0": "ebfdgac",
                "far from 1": "bafgdce"}
    for order, rows in expected.items():
        table = Table("t", "T", frame, detail=True, rank="x", rank_order=order)
        assert "".join(excerpt(table, limit=6).frame["cell"]) == rows[:6], order
        shown = excerpt(table, limit=3)
        assert "".join(shown.frame["cell"]) == rows[:3] and shown.hidden == 4, order
        assert "x" in shown.order
    # no rank: the first rows; a summary table: whole
    assert list(excerpt(Table("t", "T", frame, detail=True), limit=3).frame["cell"]) == \
        ["a", "b", "c"]
    assert len(excerpt(Table("t", "T", frame), limit=3).frame) == len(frame)
    # a column of n/a ranks nothing
    blank = excerpt(Table("t", "T", frame.assign(x=None), detail=True, rank="x"), limit=3)
    assert list(blank.frame["cell"]) == ["a", "b", "c"] and blank.order == ""


@pytest.mark.parametrize("kwargs, message", [
    ({"detail": True, "rank": "x", "rank_order": "worst"}, "rank_order 'worst' of table 't' "
     "is not allowed; use one of 'high', 'low', 'far from 0', 'far from 1'"),
    ({"detail": True, "rank": "y"}, "rank 'y' of table 't' is not one of its columns: x"),
    ({"rank": "x"}, "a summary table is shown whole; rank only a detail table"),
])
def test_a_bad_rank_is_one_line_naming_it(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Table("t", "T", pd.DataFrame({"x": [1.0]}), **kwargs)


def test_machine_table_in_human_units(both_report: Report) -> None:
    machines = frame_of(sections_of(both_report)["machine"], "machines").set_index("machine")
    h200 = machines.loc["h200"]
    assert h200["gpu"].startswith("NVIDIA H200, 140 GiB, driver 580")
    assert h200["frameworks"] == "torch 2.11.0+cu130, jax 0.11.2, flax 0.12.10"
    assert machines.loc["fixture-machine", "frameworks"].startswith("torch 2.13.0, jax 0.10.2")
    assert float(h200["float32 matmul (GFLOP/s, calibrated)"]) > 1000
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", h200["newest run"])
    assert size_text(25275990016) == "23.5 GiB" and size_text("24GB") == "24GB"


def test_map_term_is_named_for_what_the_kernel_does(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", params=[["jax"], ["blockwise", "batched"], [2, 8],
                                                 [128, 256, 512], [64, 256], [1, 4, 16, 64],
                                                 ["cpu"], ["float32"], ["forward"]])
    section = sections_of(build_report(load_results(root), **QUIET))["per-head-decomposition"]
    terms = frame_of(section, "decomposition").groupby("backend")["b*h*n*m term"].unique()
    assert list(terms["blockwise"]) == [SCORE_TERMS[False]]
    assert list(terms["batched"]) == [SCORE_TERMS[True]]
    verdicts = {line.split(":", 1)[0]: line for line in section.text if line.startswith("jax/")}
    assert "map written" not in verdicts["jax/blockwise"]
    [plot] = section.plots  # one figure, a facet per sweep
    labels = {p.title.split(":")[1].split()[1]: list(p.series) for p in plot.facets}
    assert f"{SCORE_TERMS[False]} (b*h*n*m)" in labels["jax/blockwise"]


def test_missing_cells_are_counted_as_skipped_or_failed(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r")
    path = next((root / "synth").glob("aaaaaaaa-*.json"))
    data = json.loads(path.read_text())
    data["results"][BENCH][0][:3] = [None, float("nan"), float("nan")]
    path.write_text(json.dumps(data))
    results = load_results(root)
    kinds = [m[4] for m in results.missing]
    assert kinds.count("failed") == 1 and kinds.count("skipped") >= 2
    report = build_report(results, **QUIET)
    line = report.sections[0].findings[-1].answers["synth (CPU, 2 cores)"]
    assert f"{kinds.count('skipped')} skipped" in line and "1 failed" in line


# ----- kernel changes beside the time change ----------------------------------------------
def test_regressions_name_the_kernel_change_beside_the_time_step(tmp_path: Path) -> None:
    flash, math_ = KERNEL_CODES["flash"], KERNEL_CODES["math"]
    late = 4  # from the fifth commit on, the h=64 cells run math and 1.6x slower

    def moved(config, i: int) -> bool:
        return i >= late and config.heads == 64

    root = write_results(
        tmp_path / "r", params=[["torch"], ["fused"], [8], [256, 512], [256], [8, 16, 64],
                                ["cpu"], ["float32"], ["forward"]],
        commits=[f"{c}" * 40 for c in "abcdefgh"], noise=0.02, samples=5,
        time_of=lambda c, i: synthetic_time(c) * (1.6 if moved(c, i) else 1.0),
        kernel_of=lambda c, i: math_ if moved(c, i) else flash)
    report = build_report(load_results(root), **QUIET)
    section = sections_of(report)["regressions"]
    shifts = frame_of(section, "shifts")
    at_shift = shifts[shifts["shift at commit"] == "e" * 8]
    assert len(at_shift) and (at_shift["kernel"] == "flash → math").all()
    assert (shifts[shifts["shift at commit"] != "e" * 8]["kernel"] == "").all()
    changes = frame_of(section, "kernel-changes")
    assert set(changes["kernel"]) == {"flash → math"} and len(changes) == 2
    assert changes["after/before"].to_numpy() == pytest.approx(1.6, rel=0.1)
    assert any("flash → math" in line for line in section.text)
