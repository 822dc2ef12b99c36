"""The HTML report: well formed, self-contained, every section, escaped strings, never
overwritten; and the report/predict CLI errors."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from fixtures.synthetic_asv import TRUE_COEF, grid, synthetic_time, write_results

from mhabench.analysis.results import load_results
from mhabench.cli import main
from mhabench.report.build import SECTION_IDS, build_report, write_report
from mhabench.report.sections.profile import profile_section

REAL = Path(__file__).parent / "fixtures" / "asv_results"
EVIL_MACHINE = "<img src=x onerror=alert(1)>"
EVIL_CPU = "<script>alert(1)</script>"
VOID = {"meta", "img", "br", "hr", "link", "input"}


class TagChecker(HTMLParser):
    """Collects ids, src/href values and tag-balance errors."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if "id" in values:
            self.ids.add(values["id"] or "")
        self.links += [v or "" for k, v in attrs if k in ("src", "href")]
        self.scripts += tag == "script"
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def parse(text: str) -> TagChecker:
    checker = TagChecker()
    checker.feed(text)
    checker.close()
    return checker


@pytest.fixture
def evil_results(tmp_path: Path) -> Path:
    root = write_results(tmp_path / "results", machine=EVIL_MACHINE, noise=0.03,
                         commits=["a" * 40, "b" * 40],
                         time_of=lambda c, i: synthetic_time(c) * (1.5 if i and c.heads == 64
                                                                   else 1.0))
    info = root / EVIL_MACHINE / "machine.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "cpu": EVIL_CPU}))
    return root


def test_html_well_formed_self_contained_escaped(evil_results: Path, tmp_path: Path) -> None:
    paths = write_report(build_report(load_results(evil_results), log=lambda m: None),
                         tmp_path / "out" / "r.html")
    text = paths["html"].read_text()
    checker = parse(text)
    assert checker.errors == [] and checker.stack == []
    assert set(SECTION_IDS) <= checker.ids
    assert checker.scripts == 0 and EVIL_CPU not in text and EVIL_MACHINE not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # nothing from the network: anchors, embedded images and the CSVs written beside it
    assert checker.links and all(link.startswith(("#", "data:image/png;base64,", "r_tables/"))
                                 for link in checker.links)
    csv_links = [link for link in checker.links if link.startswith("r_tables/")]
    assert csv_links and all((paths["html"].parent / link).is_file() for link in csv_links)
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text)
    assert text.count("data:image/png;base64,") >= 5
    markdown = paths["markdown"].read_text()
    assert all(f"## {title}" in markdown for title in
               [s.title for s in build_report(load_results(evil_results),
                                              log=lambda m: None).sections])
    csvs = sorted(p.name for p in paths["tables"].iterdir())
    assert "exercise-6-4--ratios.csv" in csvs and "time-model--leave-out.csv" in csvs


def table(section, name: str) -> pd.DataFrame:
    return next(t.frame for t in section.tables if t.name == name)


def test_sections_hold_the_numbers(evil_results: Path) -> None:
    report = build_report(load_results(evil_results), log=lambda m: None)
    sections = {s.id: s for s in report.sections}
    ratios = table(sections["exercise-6-4"], "ratios")
    frame = load_results(evil_results).frame
    newest = frame[(frame["commit"] == "b" * 40) & frame["config_id"].notna()]
    for r in ratios.to_dict("records"):
        sweep = newest[(newest["n"] == int(r["shape"].split()[1][1:]))
                       & (newest["batch"] == int(r["shape"].split()[0][1:]))
                       & (newest["d"] == int(r["shape"].split()[3][1:]))]
        assert r["slowest/fastest"] == pytest.approx(sweep["value"].max() / sweep["value"].min())
    # the second commit made every h=64 cell 1.5x slower, but a history of two commits
    # rests on one commit a side: at most a candidate, never confirmed by the history
    regressions = sections["regressions"]
    text = " ".join(regressions.text)
    assert "1.1x" in text and "noise between commits" in text
    for shifts in regressions.tables:
        if shifts.name == "shifts":
            assert not shifts.frame["verdict"].isin(["holds", "confirmed"]).any()
    # absent data: one line, no failure
    for sid in ("self-vs-cross", "mha-gqa-mqa", "decoding", "forward-backward",
                "torch-vs-jax", "machines", "profile", "memory-and-track", "validation"):
        assert sections[sid].absent and "\n" not in sections[sid].absent
    assert "leave-out" in " ".join(sections["time-model"].text).lower()


@pytest.mark.parametrize("map_coef, heads_coef, lead", [(4e-9, 1e-6, "map"),
                                                        (1e-11, 3e-4, "per-head")])
def test_decomposition_verdict_names_the_term_that_grows(tmp_path: Path, map_coef: float,
                                                         heads_coef: float, lead: str) -> None:
    coef = {**TRUE_COEF, "map": map_coef, "heads": heads_coef}
    root = write_results(tmp_path / "r", time_of=lambda c, i: synthetic_time(c, coef))
    report = build_report(load_results(root), log=lambda m: None)
    section = next(s for s in report.sections if s.id == "per-head-decomposition")
    verdict = section.text[-1]
    assert verdict.startswith("torch/batched:")
    # batched writes the map: the b*h*n*m term is named for that
    assert verdict.split(": ", 1)[1].startswith({
        "map": "the map written and read over b*h*n*m scores explains",
        "per-head": "the fixed per-head"}[lead])
    frame = table(section, "decomposition")
    share = "share map (%)" if lead == "map" else "share heads (%)"
    assert (frame[share] > 80).all()
    assert (frame["R^2 on sweep"] > 0.999).all()
    assert (frame["b*h*n*m term"] == "map written and read").all()


def test_decomposition_names_no_share_where_the_model_misses_the_sweep(tmp_path: Path) -> None:
    """The chapter's sweep alone runs 2x slower at h=64 (a cost none of the model's terms
    has): the group's fit misses it there, so its verdict names no share but the part of
    the measured trend left unexplained, and the residual at each h shows where."""
    chapter = (8, 512, 256, 64)
    root = write_results(tmp_path / "r", time_of=lambda c, i: synthetic_time(c) * (
        2 if (c.batch, c.n, c.d, c.heads) == chapter else 1))
    section = next(s for s in build_report(load_results(root), log=lambda m: None).sections
                   if s.id == "per-head-decomposition")
    frame = table(section, "decomposition")
    row = frame[frame["shape"] == "b8 n512 m512 d256"].iloc[0]
    assert not row["good fit"] and row["R^2 on sweep"] < 0.9
    assert pd.isna(row["share map (%)"]) and pd.isna(row["share heads (%)"])
    unexplained = 100 * (1 - row["trend model (ms)"] / row["trend measured (ms)"])
    assert row["trend unexplained (%)"] == pytest.approx(unexplained) and unexplained > 20
    verdict = section.text[-1]
    assert verdict.startswith("torch/batched: the model does not fit this sweep")
    assert f"leave {unexplained:.0f}% of the measured h-trend unexplained" in verdict
    assert "explains" not in verdict
    residuals = table(section, "residuals")
    chapter_rows = residuals[residuals["shape"] == "b8 n512 m512 d256"].set_index("h")
    assert chapter_rows.loc[64, "residual (%)"] < -20
    assert (chapter_rows.drop(index=64)["residual (%)"].abs() < 5).all()
    # the sweeps the model does fit keep their shares
    fitted = frame[frame["good fit"]]
    assert len(fitted) >= 10 and fitted["share map (%)"].notna().all()


def test_every_section_says_in_one_line_when_its_data_is_absent(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", time_of=lambda c, i: float("nan"))  # all cells n/a
    report = build_report(load_results(root), log=lambda m: None)
    assert [s.id for s in report.sections] == list(SECTION_IDS)
    absent = [s for s in report.sections if s.absent]
    assert {s.id for s in absent} == set(SECTION_IDS) - {"machine"}
    assert all("\n" not in s.absent and not s.tables and not s.plots for s in absent)
    checker = parse(write_report(report, tmp_path / "o.html")["html"].read_text())
    assert checker.errors == [] and set(SECTION_IDS) <= checker.ids


def test_profile_section_pivots_region_shares() -> None:
    rows = []
    for fw, be, fused in (("torch", "batched", ""), ("jax", "fused", "scores+softmax+mixing")):
        for h in (1, 8, 64):
            shares = {"projections": 0.5 / h ** 0.2, "scores": 0.2, "softmax": 0.1 * h ** 0.3}
            total = sum(shares.values())
            for region, value in shares.items():
                rows.append({"framework": fw, "config_id": f"{fw}-{be}-h{h}", "backend": be,
                             "batch": 8, "n": 512, "m": 512, "d": 256, "heads": h,
                             "kv_heads": h, "region": region, "time_s": value / 100,
                             "share": value / total,
                             "fused_group": fused if region != "projections" else ""})
    from mhabench.report.context import Context

    ctx = Context(None, pd.DataFrame(), pd.DataFrame(), {}, pd.DataFrame(rows), 1.1)
    section = profile_section(ctx)
    shares = section.tables[0].frame
    assert len(shares) == 6
    torch_h64 = shares[(shares["framework"] == "torch") & (shares["heads"] == 64)].iloc[0]
    assert torch_h64[["projections (%)", "scores (%)", "softmax (%)"]].sum() == pytest.approx(100)
    assert "softmax [fused] (%)" in shares.columns
    assert len(section.tables[1].frame) == 6  # the jax fused regions, one per h and region
    assert len(section.plots) == 2 and all(p.style == "stacked" for p in section.plots)


def test_report_never_overwrites(evil_results: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "--results", str(evil_results), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    before = {p: p.read_bytes() for p in tmp_path.glob("r*") if p.is_file()}
    assert main(["report", "--results", str(evil_results), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "already exists" in err[0]
    assert before == {p: p.read_bytes() for p in tmp_path.glob("r*") if p.is_file()}
    inside = evil_results / "report.html"
    assert main(["report", "--results", str(evil_results), "--out", str(inside)]) == 2
    assert "inside the results folder" in capsys.readouterr().err
    assert not inside.exists()


@pytest.mark.parametrize("argv, message", [
    (["report", "--results", "{missing}", "--out", "{out}"], "does not exist"),
    (["report", "--results", "{results}", "--out", "{out}", "--machine", "nope"],
     "machine 'nope' is not in"),
    (["report", "--results", "{results}", "--out", "{tmp}/r.txt"], "ending in .html"),
    (["report", "--results", "{results}", "--out", "{out}", "--threshold", "0.9"],
     "--threshold 0.9"),
    (["report", "--results", "{results}", "--out", "{out}", "--repo", "{missing}"],
     "is not a folder; give the git checkout"),
    (["report", "--results", "{results}", "--out", "{out}", "--validation", "{missing}"],
     "is not readable JSON"),
    (["predict", "--results", "{missing}"], "does not exist"),
    (["predict", "--results", "{results}", "--machine", "nope"], "machine 'nope' is not in"),
    (["predict", "--results", "{results}", "--heads", "3"], "heads=3 must divide d=256"),
    (["predict", "--results", "{results}", "--backend", "flash"], "backend='flash'"),
    (["predict", "--results", "{results}", "--framework", "jax"], "no time model"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                        argv: list[str], message: str) -> None:
    results = write_results(tmp_path / "results", params=grid()[:4] + [[256], [1, 8, 64]]
                            + grid()[6:])
    fill = {"missing": str(tmp_path / "missing"), "results": str(results),
            "out": str(tmp_path / "r.html"), "tmp": str(tmp_path)}
    assert main([a.format(**fill) for a in argv]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if ": error:" in line]
    assert len(err) == 1 and err[0].startswith(f"mhabench {argv[0]}: error:") and message in err[0]
    assert not (tmp_path / "r.html").exists()


# The tiny fixture's page in full (every row, a PNG per view) times the factor that takes
# the quick grid's page in full to 600 kB: docs/report.md, "Size".
PAGE_BUDGET = 290_000


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The report of the committed tiny-grid run, written by the CLI, with the context and
    sections its findings were built from."""
    from mhabench.report import findings

    built: dict = {}
    original = findings.findings_section

    def spy(ctx, sections):
        built.update(ctx=ctx, sections=sections)
        return original(ctx, sections)

    out = tmp_path_factory.mktemp("real") / "real.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(findings, "findings_section", spy)
        assert main(["report", "--results", str(REAL), "--out", str(out)]) == 0
    return {**built, "out": out, "tables": out.with_name("real_tables")}


def test_report_from_the_real_fixture(real_report: dict) -> None:
    text = real_report["out"].read_text()
    checker = parse(text)
    assert checker.errors == [] and set(SECTION_IDS) <= checker.ids
    assert "Exercise 6.4" in text


def test_the_real_page_stays_light_and_its_csvs_hold_every_row(real_report: dict) -> None:
    from mhabench.report.render.excerpt import MAX_SHOWN_ROWS, csv_name

    size = real_report["out"].stat().st_size
    assert size <= PAGE_BUDGET, f"the page takes {size:,} bytes, over {PAGE_BUDGET:,}"
    text = real_report["out"].read_text()
    cut = 0
    for section in real_report["sections"].values():
        for table in section.tables:
            name = csv_name(section, table)
            assert len(pd.read_csv(real_report["tables"] / name)) == len(table.frame), name
            hidden = len(table.frame) - MAX_SHOWN_ROWS
            if table.detail and hidden > 0:
                cut += 1
                assert f'{hidden} more rows in <a href="real_tables/{name}">' in text, name
    assert cut >= 5  # the fixture's long per-cell tables: the cut is exercised
    # a row per timed cell, counted apart from the table
    cells = pd.read_csv(real_report["tables"] / "measured-vs-model--cells.csv")
    assert len(cells) == len(real_report["ctx"].timings) > MAX_SHOWN_ROWS


def test_the_real_findings_are_built_from_the_tables_in_the_csvs(real_report: dict) -> None:
    """The findings rebuilt from every table as its CSV holds it (the full rows, not the
    page's cut) are the lines the page shows."""
    from dataclasses import replace
    from html import escape

    from mhabench.report.findings import findings_section
    from mhabench.report.render.excerpt import csv_name

    def read(section, table):
        return pd.read_csv(real_report["tables"] / csv_name(section, table))

    sections = {sid: replace(s, tables=[replace(t, frame=read(s, t)) for t in s.tables])
                for sid, s in real_report["sections"].items()}
    rebuilt = findings_section(real_report["ctx"], sections).findings
    text = real_report["out"].read_text()
    body = text[text.index('<table class="findings">'):text.index("<nav>")].split("<tbody>")[1]
    shown = [re.findall(r"<td>(.*?)</td>", row) for row in body.split("</tr>")[:-1]]
    assert len(rebuilt) >= 8 and shown == [[escape(a, quote=True) for a in f.answers.values()]
                                           for f in rebuilt]


def test_compile_seconds_and_break_even_calls_beside_the_step_time() -> None:
    import pandas as pd

    from mhabench.core.config import AttentionConfig
    from mhabench.report.sections.overview import _compile_columns

    compiled = AttentionConfig(framework="torch", backend="compiled", batch=8, heads=8)
    eager, jax_cell = compiled.replace(backend="batched"), compiled.replace(framework="jax",
                                                                            backend="fused")
    compiles = pd.Series({("m", compiled.id): 10.0, ("m", jax_cell.id): 2.0})
    times = pd.Series({("m", eager.id): 0.030, ("m", compiled.id): 0.020})

    def row(config, value):
        return {**config.to_dict(), "machine": "m", "config_id": config.id, "value": value}

    assert _compile_columns(row(compiled, 0.020), compiles, times) == {
        "compile (s)": 10.0, "break-even calls": 1000}  # 10 s / 10 ms saved a call
    assert _compile_columns(row(compiled, 0.031), compiles, times)["break-even calls"] == \
        "never"
    assert _compile_columns(row(jax_cell, 0.05), compiles, times) == {
        "compile (s)": 2.0, "break-even calls": ""}  # no eager JAX step to pay back against
    assert _compile_columns(row(eager, 0.03), pd.Series(dtype=float), times) == {}
