"""``mhabench releases``: one commit timed in an ordered list of dependency sets.

With asv faked (tests/support/fake_asv.py: each round appends one process's samples per
cell and set, in the config's order): the sets' rounds alternate their order and read one
median per process per set; a sweep compares each pair of adjacent releases and writes
``releases.json``; a search on simulated processes names the release that changed a cell,
building only the sets it probes; every kind of bad input ends in one line. The labels of a
list and the expansion of a range (pip mocked, and once pip's real resolver) are checked
on their own. The real-run test at the end (slow, timing) sweeps the test plug-in at three
releases, the last of them slower. The search runs on simulated processes here; the same
search on real processes is the culprit search's test (tests/test_bisect_real.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.fake_asv import CELLS, FakeAsv
from support.plugin_package import NAME, write_release
from support.scratch import asv_env, commit_all, git, scratch_clone

import mhabench.compare.dependency_sets as sets_module
import mhabench.compare.sides as sides_module
from mhabench.analysis.comparisons.releases import changes_frame, load_summary, times_frame
from mhabench.cli import main
from mhabench.cli.compare.bisect import lines
from mhabench.compare.releases import RELEASES_DIR, SWEEP_ROUNDS, ReleaseError, Releases
from mhabench.compare.sides import SideError, parse_side, release_range, set_labels

FUSED, BATCHED, BROKEN = CELLS
INSTALLED = {"torch": "2.13.0", "jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"}


# -- the sets as written --------------------------------------------------------------------
def _sides(*texts: str) -> list:
    return [parse_side(str(i + 1), text, "set") for i, text in enumerate(texts)]


def test_a_list_is_labelled_by_what_tells_its_sets_apart(tmp_path: Path) -> None:
    project = {"torch": "2.13.0", "jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"}
    labels, varying = set_labels(_sides("jax==0.9.2 jaxlib==0.9.2 flax==0.12.4", "",
                                        "jax==0.10.0 jaxlib==0.10.0"), project)
    assert labels == ["0.9.2", "0.10.2", "0.10.0"] and varying == ["jax", "jaxlib", "flax"]
    # the first package that differs at one version in two sets: the next one joins
    labels, varying = set_labels(_sides("jax==0.9.2 flax==0.12.4", "jax==0.9.2 flax==0.12.5",
                                        "jax==0.10.0 flax==0.12.5"), project)
    assert labels == ["0.9.2+0.12.4", "0.9.2+0.12.5", "0.10.0+0.12.5"]
    assert varying == ["jax", "flax"]
    # local releases: their pyproject's version; the same version twice: the folders' names
    one = write_release(tmp_path / "one", "1.0", written_out=False)
    two = write_release(tmp_path / "two", "1.1", written_out=True)
    again = write_release(tmp_path / "again", "1.1", written_out=False)
    assert set_labels(_sides(str(one), str(two)), project)[0] == ["1.0", "1.1"]
    assert set_labels(_sides(str(two), str(again)), project)[0] == ["two", "again"]
    with pytest.raises(SideError, match=r"sets 1 and 3 are one dependency set \('jax==0.9.2'\)"):
        set_labels(_sides("jax==0.9.2", "jax==0.10.0", "jax==0.9.2"), project)


def _index(name: str) -> list[str] | None:
    return {"jax": ["0.6.0", "0.5.3", "0.5.2", "0.5.1", "0.5.0", "0.4.38"],
            "jaxlib": ["0.6.0", "0.5.3", "0.5.1", "0.5.0", "0.4.38"]}.get(name)


def test_a_range_is_each_release_with_its_jaxlib_and_a_resolved_flax() -> None:
    asked = []

    def resolve(requirements: dict[str, str], free: list[str]) -> dict[str, str]:
        asked.append((dict(requirements), list(free)))
        if requirements["jax"] == "0.5.1":
            raise SideError("ERROR: ResolutionImpossible: flax needs jax>=0.5.3")
        return {"flax": "0.10.4" if requirements["jax"] < "0.6" else "0.11.2"}

    project = {"torch": "2.13.0", "jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8",
               "numpy": "2.4.6"}
    texts, left_out = release_range("jax", "0.5.0", "0.6.0", project, lookup=_index,
                                    resolve=resolve)
    assert texts == ["jax==0.5.0 jaxlib==0.5.0 flax==0.10.4",
                     "jax==0.5.3 jaxlib==0.5.3 flax==0.10.4",
                     "jax==0.6.0 jaxlib==0.6.0 flax==0.11.2"]
    assert left_out == ["jax 0.5.1 left out: pip resolves no flax for it (ERROR: "
                        "ResolutionImpossible: flax needs jax>=0.5.3)",
                        "jax 0.5.2 left out: jaxlib 0.5.2 is not on the package index"]
    # the resolver sees the project's other pins, the release's own, and flax free
    assert asked[0] == ({"torch": "2.13.0", "numpy": "2.4.6", "jax": "0.5.0",
                         "jaxlib": "0.5.0"}, ["flax"])
    # a package without companions: its own pins only, nothing resolved
    texts, left_out = release_range("jaxlib", "0.5.0", "0.5.3", project, lookup=_index,
                                    resolve=resolve)
    assert texts == ["jaxlib==0.5.0", "jaxlib==0.5.1", "jaxlib==0.5.3"] and not left_out


@pytest.mark.parametrize("package, first, last, message", [
    ("jax", "0.5.5", "0.5.9", "no release of jax on the package index from 0.5.5 to 0.5.9; "
                              "the nearest there: 0.5.3, 0.6.0"),
    ("jax", "0.6.0", "0.5.0", "give the older version first"),
    ("jax", "zero", "0.6.0", "Invalid version: 'zero'"),
    ("nosuchpackage", "1.0", "2.0", "package 'nosuchpackage' is not on the package index"),
])
def test_a_range_that_holds_no_release_is_one_clear_error(package, first, last,
                                                          message) -> None:
    with pytest.raises(SideError, match=re.escape(message)):
        release_range(package, first, last, {}, lookup=_index, resolve=lambda r, f: {})


def test_pips_own_resolver_picks_an_older_flax_for_an_older_jax() -> None:
    """One real call to pip's resolver against the index (a few seconds): flax 0.12.8, the
    pinned one, needs jax 0.10 or later, so jax 0.6.0 gets an older flax."""
    from packaging.version import Version

    picked = sides_module.resolve_newest({"jax": "0.6.0", "jaxlib": "0.6.0"}, ["flax"])
    assert set(picked) == {"flax"}
    assert Version(picked["flax"]) < Version("0.12.8")
    assert picked["flax"] in (sides_module.index_versions("flax") or [])


# -- the rounds of N sets, asv faked --------------------------------------------------------
@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with an asv.conf.json, the current folder; builds read back the
    pinned packages (no environment exists)."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "repo": ".", "environment_type": "virtualenv",
        "matrix": {"req": {"torch": ["2.13.0"]}}}))
    commit_all(repo, "one commit")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(sets_module, "installed_versions",
                        lambda python, names: {n: INSTALLED.get(n) for n in names})
    return repo


def _releases(tmp: Path, count: int, **kwargs) -> list[str]:
    """``count`` local releases of the plug-in, 1.0, 1.1, ...: their folders."""
    return [str(write_release(tmp / f"r{i}", f"1.{i}", written_out=False))
            for i in range(count)]


def _medians(asv: FakeAsv, name: str, label: str) -> list[float]:
    """The medians of the processes the fake drew (each process's middle sample)."""
    return pytest.approx([m * 1.002 for m in asv.drawn[(name, label)]])


def _fake(monkeypatch: pytest.MonkeyPatch, asv: FakeAsv) -> FakeAsv:
    monkeypatch.setattr(sets_module, "run_asv", asv)
    return asv


def test_the_rounds_alternate_the_order_and_read_a_median_per_process(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    labels = ["1.0", "1.1", "1.2"]
    asv = _fake(monkeypatch, FakeAsv({
        FUSED: dict.fromkeys(labels, 0.01),
        # fails at two of three sets: nothing left to compare after the first half
        BROKEN: {"1.0": 0.02, "1.1": None, "1.2": None},
        BATCHED: {"1.0": 0.03, "1.1": None, "1.2": 0.03}}))
    releases = Releases(_releases(tmp_path, 3), [], root=project, echo=lambda t: None)
    assert releases.labels == labels
    sets = releases.sets
    for label in labels:
        sets.build(label)
    assert asv.builds == labels  # one at a time, each on its own
    configs = sets.orders(labels, sets.folder)
    timed = sets.rounds(configs, labels, [], 5)
    assert [(r["order"], r["rounds"]) for r in asv.runs] == [(labels, 3), (labels[::-1], 2)]
    # the second half runs only the cells that two sets or more timed in the first
    assert asv.runs[1]["benches"] == [f"^{re.escape(c)}$" for c in (FUSED, BATCHED)]
    for label in labels:
        assert timed[FUSED][label] == _medians(asv, FUSED, label)
        assert len(timed[FUSED][label]) == 5
    assert timed[BATCHED] == {"1.0": _medians(asv, BATCHED, "1.0"), "1.1": None,
                              "1.2": _medians(asv, BATCHED, "1.2")}
    assert timed[BROKEN] == {"1.0": _medians(asv, BROKEN, "1.0"), "1.1": None, "1.2": None}
    assert len(asv.drawn[(BROKEN, "1.0")]) == 3  # the first half's rounds only
    # more rounds appended to the same files: only these rounds' processes are read
    again = sets.rounds(configs, labels, [f"^{re.escape(FUSED)}$"], 2)
    assert again[FUSED]["1.0"] == pytest.approx([m * 1.002 for m in
                                                 asv.drawn[(FUSED, "1.0")][5:]])
    assert set(again) == {FUSED}


# -- the sweep ------------------------------------------------------------------------------
STEP = {"1.0": 0.010, "1.1": 0.010, "1.2": 0.015, "1.3": 0.015}


def _sweep(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, levels: dict,
           argv: tuple[str, ...] = (), **kwargs) -> tuple[int, FakeAsv]:
    asv = _fake(monkeypatch, FakeAsv(levels, **kwargs))
    monkeypatch.setattr("mhabench.compare.estimate.estimate", lambda *a, **k: None)
    return main(["releases", *_releases(tmp_path, 4), *argv]), asv


def test_a_sweep_names_the_release_where_a_cell_changed(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    kernels = {FUSED: {"1.0": "flash", "1.1": "flash", "1.2": "math", "1.3": "math"},
               BATCHED: dict.fromkeys(STEP, "explicit")}
    code, asv = _sweep(project, tmp_path, monkeypatch,
                       {FUSED: STEP, BATCHED: dict.fromkeys(STEP, 0.02)}, kernels=kernels)
    out = capsys.readouterr().out
    assert code == 1, out  # a release is slower
    assert [r["rounds"] for r in asv.runs] == [(SWEEP_ROUNDS + 1) // 2, SWEEP_ROUNDS // 2]
    folder = Path(re.search(r"results in (\S+)", out).group(1))
    assert folder.parent == (project / RELEASES_DIR).resolve()
    summary = load_summary(folder / "results")
    assert [r["label"] for r in summary["releases"]] == list(STEP)
    fused = next(c for c in summary["cells"] if c["cell"] == FUSED)
    assert [(s["from"], s["to"], s["verdict"]) for s in fused["steps"]] == [
        ("1.0", "1.1", "unchanged"), ("1.1", "1.2", "slower"), ("1.2", "1.3", "unchanged")]
    assert fused["steps"][1]["ratio"] == pytest.approx(1.5, rel=0.05)
    assert fused["times"]["1.0"] == pytest.approx(0.010 * 1.002, rel=0.05)
    assert fused["overall"]["ratio"] == pytest.approx(1.5, rel=0.05)
    assert all(len(p) == SWEEP_ROUNDS for p in fused["processes"].values())
    assert [(c["cell"], c["to"]) for c in summary["changes"]] == [(FUSED, "1.2")]
    # printed: the change with its interval, where it happened and the kernels
    change = next(line for line in out.splitlines() if line.startswith("slower"))
    assert re.match(r"slower +1\.\d\dx \[1\.\d\d, 1\.\d\d\] at 1\.2 \(from 1\.1\)  "
                    + re.escape(FUSED) + "  kernel flash -> math  KERNEL CHANGED$", change)
    assert re.search(r"^unchanged .* at 1\.3 against 1\.0, no step between  "
                     + re.escape(BATCHED), out, re.MULTILINE)
    # the tables the report shows
    assert list(changes_frame(summary)["at"]) == ["1.2"]
    times = times_frame(summary)
    assert list(times.columns[1:5]) == [f"{label} (ms)" for label in STEP]
    assert not (project / ".asv" / "results").exists()


def test_a_sweep_where_a_release_is_faster_exits_0_and_says_a_failure(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    faster = {label: 0.02 / STEP[label] * 0.01 for label in STEP}  # 2/3 at 1.2
    code, _ = _sweep(project, tmp_path, monkeypatch,
                     {FUSED: faster, BATCHED: {**dict.fromkeys(STEP, 0.02), "1.1": None}})
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"^faster .* at 1\.2 \(from 1\.1\)  " + re.escape(FUSED), out,
                     re.MULTILINE)
    assert f"failed    at 1.1  {BATCHED}" in out
    summary = load_summary(Path(re.search(r"results in (\S+)", out).group(1)))
    batched = next(c for c in summary["cells"] if c["cell"] == BATCHED)
    # the failed release is passed over: the step runs from the one before it
    assert [(s["from"], s["to"]) for s in batched["steps"]] == [("1.0", "1.2"), ("1.2", "1.3")]


# -- the search -----------------------------------------------------------------------------
def test_a_search_names_the_release_and_builds_only_what_it_probes(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    labels = [f"1.{i}" for i in range(9)]
    levels = {FUSED: {label: 0.02 * (1.6 if i >= 5 else 1.0) for i, label in enumerate(labels)},
              BATCHED: dict.fromkeys(labels, 0.01)}
    asv = _fake(monkeypatch, FakeAsv(levels, broken={"1.4": "No matching distribution "
                                                     "found for mysdpa"}, scatter=0.03,
                                     slow=0.15))
    said: list[str] = []
    releases = Releases(_releases(tmp_path, 9), [], root=project, echo=said.append, least=3)
    search = releases.search()
    assert [c.commit for c in search.culprits] == ["1.5"], lines(search, str, "releases")
    culprit = search.culprits[0]
    assert list(culprit.cells) == [FUSED] and culprit.subject == "r5"
    assert culprit.cells[FUSED].ratio == pytest.approx(1.6, rel=0.08)
    # the ends, then the middles probed: never every release
    assert asv.builds[:2] == ["1.0", "1.8"] and len(set(asv.builds)) < len(labels) - 1
    assert "1.4" in search.skipped and any("set 1.4" in line and "skipped" in line
                                           for line in said)
    text = "\n".join(lines(search, str, "releases"))
    assert 'CULPRIT 1.5 "r5": SLOWER' in text and "8 releases after 1.0 up to 1.8" in text
    assert (releases.folder / "search" / "bisect.json").is_file()


# -- bad input: one line, nothing stored lost -----------------------------------------------
def _one_line(capsys, code: int, message: str) -> None:
    err = capsys.readouterr()
    assert code == 2 and err.out == "", err
    assert err.err.count("\n") == 1 and message in err.err, err.err


def test_too_few_sets_and_an_empty_range_are_one_line(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    _one_line(capsys, main(["releases", "jax==0.9.2"]), "a sweep needs at least 2")
    _one_line(capsys, main(["releases", "jax==0.9.2", "jax==0.10.0", "--search"]),
              "a search needs at least 3")
    monkeypatch.setattr(sides_module, "index_versions", _index)
    _one_line(capsys, main(["releases", "--range", "jax", "0.5.5", "0.5.9"]),
              "no release of jax on the package index from 0.5.5 to 0.5.9")
    _one_line(capsys, main(["releases", "jax==0.9.2", "--range", "jax", "0.5.0", "0.6.0"]),
              "give the sets or --range, not both")
    _one_line(capsys, main(["releases", "jax==0.9.2", "jax==0.10.0", "--rounds", "1"]),
              "--rounds 1 is too few")
    assert not (project / RELEASES_DIR).exists()


def test_a_set_that_fails_to_install_names_itself_and_pips_reason(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    kept = project / RELEASES_DIR / "20260101T000000000000Z" / "releases.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    code, _ = _sweep(project, tmp_path, monkeypatch, {FUSED: STEP},
                     broken={"1.2": "No matching distribution found for torch==9"})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == ("mhabench releases: error: set 1.2 (r2) failed to install: ERROR: No "
                       "matching distribution found for torch==9")
    assert kept.read_text() == "{}"  # an earlier sweep's folder is left as it was


def test_a_cell_that_fails_at_every_release_is_bad_input(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    code, asv = _sweep(project, tmp_path, monkeypatch,
                       {FUSED: STEP, BROKEN: dict.fromkeys(STEP, None)})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "1 cell(s) fail at every release" in err[-1] and BROKEN in err[-1]
    # the cell that fails is not run again; the others' times are kept
    assert asv.runs[1]["benches"] == [f"^{re.escape(FUSED)}$"]
    summary = json.loads(Path(re.search(r"are in (\S+\.json)", err[-1]).group(1)).read_text())
    assert [c["to"] for c in summary["changes"]] == ["1.2"]
    with pytest.raises(ReleaseError, match="selects no time cell"):
        _fake(monkeypatch, FakeAsv({FUSED: STEP}))
        Releases(_releases(tmp_path / "more", 2), ["nothing-matches"], root=project,
                 echo=lambda t: None).sweep()


# -- the report's "Across releases" ---------------------------------------------------------
def test_the_report_section_and_finding_read_releases_json(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from types import SimpleNamespace

    from mhabench.report import findings
    from mhabench.report.render.plots import plot_png
    from mhabench.report.sections.changes.releases import SECTION_ID, releases_section

    kernels = {FUSED: {"1.0": "flash", "1.1": "flash", "1.2": "math", "1.3": "math"}}
    _sweep(project, tmp_path, monkeypatch, {FUSED: STEP, BATCHED: dict.fromkeys(STEP, 0.02)},
           kernels=kernels)
    folder = Path(re.search(r"results in (\S+)", capsys.readouterr().out).group(1))
    ctx = SimpleNamespace(results=SimpleNamespace(root=folder / "results"))
    section = releases_section(ctx)  # type: ignore[arg-type]
    tables = {t.name: t for t in section.tables}
    assert list(tables) == ["times", "changes", "kernels", "packages"]
    assert all(tables[name].detail for name in ("times", "changes", "kernels"))
    assert list(tables["changes"].frame[["at", "from", "verdict"]].itertuples(index=False,
                                                                           name=None)) == [
        ("1.2", "1.1", "slower")]
    assert list(tables["kernels"].frame.iloc[0]) == [FUSED, "flash", "flash", "math", "math"]
    (plot,) = section.plots
    assert plot.logy and plot.xticks == list(STEP) and plot.marks == [1.5]
    assert sorted(plot.series) == ["Attention(torch, batched)", "Attention(torch, fused)"]
    fused_y = plot.series["Attention(torch, fused)"][1]
    assert fused_y[2] / fused_y[1] == pytest.approx(1.5, rel=0.05)
    assert plot_png(plot)[:4] == b"\x89PNG"
    line = findings.releases(ctx, {SECTION_ID: section}, "m")  # type: ignore[arg-type]
    assert re.match(r"mysdpa-attention 1\.0 to 1\.3 \(4 releases\) at \w{8}: "
                    r"Attention\(torch, fused\) 1\.\d\dx at 1\.2; 1 change\(s\) in 1 cell\(s\) "
                    r"\(1 slower\); 1 of 2 cell\(s\) unchanged at every step; kernel changed "
                    r"in 1\.$", line), line
    absent = releases_section(SimpleNamespace(results=SimpleNamespace(root=tmp_path)))
    assert absent.absent and "mhabench releases" in absent.absent


# -- a real run in a scratch clone (tests/support/scratch.py: torch borrowed) ---------------
# The quick grid's GQA cell (batch 2, n 512, d 256, 16 query heads over 4 K/V heads).
GQA = r"MhaGqaMqa\.time_step\('torch', '{backend}', 2, 512, 256, 16, 4, "


def _releases_cli(*args: str, cwd: Path, env: dict[str, str], timeout: float
                  ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhabench.cli", "releases", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timing
def test_a_slowed_release_is_found_by_the_sweep(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The plug-in at 1.0, 1.1 (the same code, a new version) and 1.2 (its softmax written
    out: about 1.4x slower on this cell), each installed into its own environment beside
    the borrowed torch: a sweep with the shipped rounds finds one change, at 1.2 (1.0 to
    1.1 is a new version of the same code: no change). One cell: a torch cell beside it
    (the same code in every set) would double the sweep's processes."""
    from conftest import _machine_home

    tmp = tmp_path_factory.mktemp("releases")
    repo, _ = scratch_clone(tmp)
    env = asv_env(_machine_home(tmp))
    folders = [str(write_release(tmp / "plugin" / f"1.{i}", f"1.{i}", written_out=slowed))
               for i, slowed in enumerate((False, False, True))]
    mine = GQA.format(backend=NAME)

    sweep = _releases_cli(*folders, "-b", mine, cwd=repo, env=env, timeout=1800)
    print(sweep.stdout)
    assert sweep.returncode == 1, sweep.stdout + sweep.stderr[-3000:]
    summary = load_summary(Path(re.search(r"results in (\S+)", sweep.stdout).group(1)))
    assert [r["label"] for r in summary["releases"]] == ["1.0", "1.1", "1.2"]
    assert len(summary["cells"]) == 1
    assert [(mine.replace("\\", "") in c["cell"], c["to"], c["verdict"])
            for c in summary["changes"]] == [(True, "1.2", "slower")], summary["changes"]
    assert not (repo / ".asv" / "results").exists()  # asv's configured results: untouched
