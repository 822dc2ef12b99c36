"""``mhabench versions``: one commit timed in two dependency sets.

Real runs, in a scratch clone whose asv environments borrow this interpreter's
site-packages (tests/support/scratch.py) and install each side's own packages on top, as
asv does for users (tests/support/plugin_package.py: a user's plug-in package): a real pair
of JAX releases (an earlier one and the pinned one) runs end to end into the report; a side
that cannot install and a cell that fails on one side only each end in one line and exit
status 2. These assert no timing: their sides run ``--rounds 2``. The verdict on a real
slower release, with the shipped rounds, is the release sweep's (tests/test_releases.py:
the same plug-in, the same process statistics); the gate's rounds on recorded runs,
tests/test_gate_replay.py. The statistics and the side syntax are checked on their own
first, and, with asv's runs faked, which compile-time cells run (those ``-b`` selects, as
asv selects them) and how they print (readings, no verdict).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.plugin_package import NAME, write_release
from support.scratch import asv_env, commit_all, git, scratch_clone

import mhabench.compare.dependency_sets as sets_module
from mhabench.analysis.comparisons.versions import VERDICTS, compile_frame
from mhabench.asvproject.result_files import BENCHMARKS, selected_cells
from mhabench.cli.compare import versions as versions_cli
from mhabench.compare.dependency_sets import COMPILE_BENCH
from mhabench.compare.rounds import cell_pattern
from mhabench.compare.sides import LOCAL_VAR, SIDE_VAR, SideError, parse_side, side_include
from mhabench.compare.versions import Cell, Comparison
from mhabench.core.kernel_codes import KERNEL_CODES

ROOT = Path(__file__).resolve().parents[1]
# The quick grid's GQA cell (batch 2, n 512, d 256, 16 query heads over 4 K/V heads).
GQA = r"MhaGqaMqa\.time_step\('{framework}', '{backend}', 2, 512, 256, 16, 4, "
# The release before the pinned one (flax 0.12.8 takes jax >= 0.10); docs/versions.md has
# 0.9.2 (with flax 0.12.4) against the pinned one on the quick grid.
EARLIER_JAX = "jax==0.10.1 jaxlib==0.10.1"
PINNED_JAX = "jax==0.10.2 jaxlib==0.10.2 flax==0.12.8"


# -- the sides as written ------------------------------------------------------------------
def test_a_side_is_pins_and_local_packages(tmp_path: Path) -> None:
    package = write_release(tmp_path / "pkg", "1.0", written_out=False)
    side = parse_side("new", f"JAX==0.9.2 jax_lib==0.9.2 {package}")
    assert side.pins == {"jax": "0.9.2", "jax-lib": "0.9.2"}
    assert side.local == (package.resolve(),)
    conf = {"matrix": {"req": {"torch": ["2.13.0"], "jax": ["0.10.2"]}}, "pythons": ["3.11"]}
    entry = side_include(conf, side)
    assert entry["req"] == {"torch": "2.13.0", "jax": "0.9.2", "jax-lib": "0.9.2"}
    assert entry["env_nobuild"] == {SIDE_VAR: "new"}
    assert len(entry["env"][LOCAL_VAR]) == 10  # the package's digest: its own environment
    # the same files give the same digest (the environment is reused); a change, another
    before = entry["env"][LOCAL_VAR]
    assert side_include(conf, side)["env"][LOCAL_VAR] == before
    (package / "build").mkdir()  # a build's output in the folder: the same package
    (package / "mysdpa_attention.egg-info").mkdir()
    (package / "mysdpa_attention.egg-info" / "PKG-INFO").write_text("Name: x\n")
    assert side_include(conf, parse_side("new", str(package)))["env"][LOCAL_VAR] == before
    (package / "mysdpa_attention.py").write_text("# changed\n")
    assert side_include(conf, parse_side("new", str(package)))["env"][LOCAL_VAR] != before


def test_a_set_leaves_out_the_framework_its_cells_do_not_name() -> None:
    """JAX cells alone: the sets' environments hold no torch (a pinned package stays);
    cells of both frameworks, or a -b that names neither, keep every requirement."""
    from mhabench.compare.dependency_sets import unused_packages

    jax_only = [GQA.format(framework="jax", backend="fused")]
    assert unused_packages(jax_only) == ("torch",)
    assert unused_packages([GQA.format(framework="torch", backend="(fused|mysdpa)")]) == (
        "jax", "jaxlib", "flax")
    assert unused_packages(["^bench_heads"]) == ()
    assert unused_packages([*jax_only, GQA.format(framework="torch", backend="fused")]) == ()
    conf = {"matrix": {"req": {"torch": ["2.13.0"], "jax": ["0.10.2"], "jaxlib": ["0.10.2"],
                               "flax": ["0.12.8"], "numpy": ["2.4.6"]}}}
    entry = side_include(conf, parse_side("new", EARLIER_JAX), unused_packages(jax_only))
    assert entry["req"] == {"jax": "0.10.1", "jaxlib": "0.10.1", "flax": "0.12.8",
                            "numpy": "2.4.6"}
    pinned = side_include(conf, parse_side("new", "torch==2.12.0"), ("torch",))
    assert pinned["req"]["torch"] == "2.12.0"


@pytest.mark.parametrize("text, message", [
    ("jax>=0.9", "neither NAME==VERSION nor an existing wheel"),
    ("jax==0.9.2 jax==0.10.2", "jax is pinned twice"),
    ("./no/such/folder", "neither NAME==VERSION nor an existing wheel"),
])
def test_a_side_that_cannot_be_read_names_the_item(text: str, message: str) -> None:
    with pytest.raises(SideError, match=re.escape(message)):
        parse_side("base", text)

# -- bad input, before anything runs -------------------------------------------------------
def _versions(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhabench.cli", "versions", *args],
                          cwd=cwd, env=env or {**os.environ}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("base, message", [
    ("no-such-package-mhabench==1.0", "package 'no-such-package-mhabench' is not on the "
                                      "package index"),
    ("jax==0.0.999", "jax 0.0.999 is not on the package index; versions there: 0.10.2"),
    ("jax>0.9", "'jax>0.9' is neither NAME==VERSION"),
])
def test_bad_sides_end_in_one_line_and_write_nothing(base: str, message: str) -> None:
    folder = ROOT / ".asv" / "versions"
    before = sorted(folder.iterdir()) if folder.is_dir() else []
    done = _versions(base, "", "-b", "nothing")
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert (sorted(folder.iterdir()) if folder.is_dir() else []) == before


def test_too_few_rounds_end_in_one_line() -> None:
    done = _versions("", "jax==0.10.1", "--rounds", "1", "-b", "nothing")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "mhabench versions: error: --rounds 1 is too few: a verdict needs 2 processes a side "
        "at least (default 8)"], done.stderr


# -- compile time: run where -b selects it, read without a verdict -------------------------
GQA_PARAMS = [["'jax'"], ["'fused'"], ["2"], ["512"], ["256"], ["16"], ["4"], ["'cpu'"],
              ["'float32'"], ["1"]]
TIMED = f"bench_gqa.MhaGqaMqa.time_step({', '.join(p[0] for p in GQA_PARAMS)})"
KERNEL = TIMED.replace(".time_step(", ".track_kernel(")
COMPILE_PARAMS = [["'torch'", "'jax'"], ["'compiled'", "'batched'"], ["8"], ["512"], ["256"],
                  ["1", "8"], ["'cpu'"], ["'float32'"], ["1"]]
LISTING = {COMPILE_BENCH: {"name": COMPILE_BENCH, "params": COMPILE_PARAMS, "type": "track"},
           "bench_gqa.MhaGqaMqa.track_kernel": {"name": "bench_gqa.MhaGqaMqa.track_kernel",
                                                "params": GQA_PARAMS, "type": "track"}}
COMPILE_SECONDS = {"base": 13.6, "new": 18.15}


def asv_selects(name: str, regexes: list[str]) -> list[str]:
    """The cells of LISTING's benchmark ``name`` that asv's own ``-b`` selection runs."""
    from asv.benchmarks import Benchmarks

    entry = LISTING[name]
    chosen = Benchmarks(SimpleNamespace(benchmark_dir="benchmarks"), [entry], regex=regexes)
    cells = [f"{name}({', '.join(p)})" for p in itertools.product(*entry["params"])]
    return [cells[i] for i in chosen.benchmark_selection[name]]


@pytest.mark.parametrize("regexes", [[], [r"time_step\('jax'"], ["'jax'"],
                                     [r"^bench_compile", "nothing"], [r"'batched', 8, .*, 8,"],
                                     [r"track_compile_seconds\('torch'", r"'compiled'"]])
def test_cells_are_selected_as_asv_selects_them(regexes: list[str]) -> None:
    assert selected_cells(LISTING, COMPILE_BENCH, regexes) == asv_selects(COMPILE_BENCH,
                                                                          regexes)


def _fake_asv(results: Path, commit: str, calls: list[list[str]]):
    """asv run as the kernels' and compile cells' run sees it: each side's results file
    gains a value for every cell the call's -b regexes select, n/a (NaN) for the others."""
    def run_asv(config: Path, args: list[str], env: dict[str, str], root: Path,
                echo: object) -> tuple[int, str]:
        regexes = [args[i + 1] for i, arg in enumerate(args) if arg == "-b"]
        calls.append(regexes)
        for side, seconds in COMPILE_SECONDS.items():
            rows = {}
            for name, entry in LISTING.items():
                chosen = set(asv_selects(name, regexes))
                value = seconds if name == COMPILE_BENCH else KERNEL_CODES["xla"]
                rows[name] = [[value if c in chosen else float("nan") for c in
                               (f"{name}({', '.join(p)})" for p in itertools.product(
                                   *entry["params"]))], entry["params"]]
            path = results / "m" / f"{commit[:8]}-env-{side}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"result_columns": ["result", "params"],
                                        "results": rows}))
        return 0, ""
    return run_asv


def _compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, benches: list[str]
              ) -> tuple[dict, list[list[str]]]:
    """A versions run's last stage on one timed JAX cell with ``-b benches`` (asv faked):
    the summary, the -b regexes of each asv run and what the command prints."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "asv.conf.json").write_text('{"version": 1, "repo": "."}\n')
    commit = commit_all(repo, "one commit")
    comparison = Comparison("", "", benches, root=repo, echo=lambda text: None)
    comparison.configs["ab"] = repo / "asv.conf.json"
    comparison.sets.env_names = {side: f"env-{side}" for side in ("base", "new")}
    comparison.results.mkdir(parents=True)
    (comparison.results / BENCHMARKS).write_text(json.dumps({**LISTING, "version": 2}))
    comparison.cells[TIMED] = Cell(TIMED, verdict="unchanged")
    calls: list[list[str]] = []
    monkeypatch.setattr(sets_module, "run_asv", _fake_asv(comparison.results, commit, calls))
    comparison.kernels_and_compile()
    summary = comparison.summary()
    summary["seconds"]["total"] = 1.0
    monkeypatch.setattr(Comparison, "run", lambda self: summary)
    monkeypatch.chdir(repo)
    versions_cli.run(SimpleNamespace(base="", new="", bench=benches, grid="quick",
                                     machine=None, rounds=None, dry_run=False))
    return summary, calls


def test_compile_cells_neither_run_nor_print_unless_b_selects_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    summary, calls = _compared(tmp_path, monkeypatch, [r"time_step\('jax'"])
    assert calls == [[cell_pattern(KERNEL)]]  # the timed cell's kernel, nothing compiled
    assert summary["cells"][0]["kernel_base"] == summary["cells"][0]["kernel_new"] == "xla"
    assert summary["compile_seconds"] == []
    out = capsys.readouterr().out
    assert COMPILE_BENCH not in out and "no verdict" not in out, out
    assert len(compile_frame(summary)) == 0  # and no table in the report


@pytest.mark.parametrize("bench, framework", [(r"track_compile_seconds\('jax'", "jax"),
                                              ("^bench_compile", None)])
def test_compile_cells_b_selects_are_readings_without_a_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, bench: str,
        framework: str | None) -> None:
    summary, calls = _compared(tmp_path, monkeypatch, [r"time_step\('jax'", bench])
    chosen = [f"{COMPILE_BENCH}({', '.join(p)})" for p in itertools.product(*COMPILE_PARAMS)
              if framework is None or p[0] == f"'{framework}'"]
    assert calls == [[cell_pattern(c) for c in [KERNEL, *chosen]]]
    assert summary["compile_seconds"] == [{"cell": c, **COMPILE_SECONDS} for c in chosen]
    out = capsys.readouterr().out.splitlines()
    printed = [line for line in out if COMPILE_BENCH in line]
    assert printed == [f"no verdict     13.60 s -> 18.15 s, one process a side  {c}"
                       for c in chosen]
    assert not any("1.33x" in line for line in out)  # no ratio read as a finding
    frame = compile_frame(summary)
    assert list(frame.columns) == ["cell", "base (s)", "new (s)"] and len(frame) == len(chosen)


# -- real runs in a scratch clone ----------------------------------------------------------
@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """(the clone, the environment to run in, a folder with the plug-in's releases)."""
    from conftest import _machine_home

    tmp = tmp_path_factory.mktemp("versions")
    repo, _ = scratch_clone(tmp)
    releases = tmp / "releases"
    write_release(releases / "1.0", "1.0", written_out=False)
    return repo, asv_env(_machine_home(tmp)), releases


def _summary(done: subprocess.CompletedProcess) -> dict:
    folder = re.search(r"results in (\S+)", done.stdout).group(1)
    return json.loads((Path(folder) / "versions.json").read_text())


def _verdicts(summary: dict) -> dict[str, str]:
    return {cell["cell"]: cell["verdict"] for cell in summary["cells"]}


@pytest.mark.slow
def test_a_side_that_fails_to_install_ends_in_one_line(scratch) -> None:
    repo, env, releases = scratch
    broken = write_release(releases.parent / "broken", "1.0", written_out=False)
    (broken / "pyproject.toml").write_text((broken / "pyproject.toml").read_text().replace(
        'requires-python = ">=3.10"', 'requires-python = ">=9.0"'))
    done = _versions(str(releases / "1.0"), str(broken), "-b", GQA.format(
        framework="torch", backend=NAME), cwd=repo, env=env, timeout=900)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("mhabench versions: error: side new (broken) failed to install"), last
    assert "Python" in last  # pip's own reason


@pytest.mark.slow
def test_a_cell_failing_on_one_side_is_a_verdict(scratch) -> None:
    """Release 1.2 breaks the attention (a mask built with the wrong shape): its cell
    reads "failed on new", the run ends with exit status 2 and the verdict table."""
    repo, env, releases = scratch
    bad = write_release(releases.parent / "1.2", "1.2", written_out=False)
    module = bad / "mysdpa_attention.py"
    module.write_text(module.read_text().replace(
        "    return torch.softmax(scores, dim=-1) @ v",
        "    keep = torch.ones(scores.shape[-1] + 1, scores.shape[-2], dtype=torch.bool)\n"
        "    return torch.softmax(scores.masked_fill(~keep, -1e6), dim=-1) @ v"))
    done = _versions(str(releases / "1.0"), str(bad), "--rounds", "2", "-b", GQA.format(
        framework="torch", backend=NAME), cwd=repo, env=env, timeout=1200)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if f"'{NAME}'" in line]
    assert len(rows) == 1 and rows[0].startswith("failed on new"), (
        done.stdout + done.stderr[-3000:])


@pytest.mark.slow
@pytest.mark.own_worker  # ~300 s: beside its file's other slow tests, not after them
def test_a_real_pair_of_jax_releases_runs_into_the_report(scratch, tmp_path: Path) -> None:
    """The release before the pinned JAX against the pinned one, on JAX's fused cell: each
    side has the versions it was asked for, the cell a verdict and the kernel each side
    ran, and the report's "Versions side by side" and findings carry them."""
    repo, env, _ = scratch
    done = _versions(EARLIER_JAX, PINNED_JAX, "--rounds", "2", "-b", GQA.format(
        framework="jax", backend="fused"), cwd=repo, env=env, timeout=2400)
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    summary = _summary(done)
    assert summary["sides"]["base"]["versions"]["jax"] == "0.10.1"
    assert summary["sides"]["base"]["versions"]["jaxlib"] == "0.10.1"
    assert summary["sides"]["new"]["versions"]["jax"] == "0.10.2"
    assert summary["sides"]["new"]["versions"]["flax"] == "0.12.8"
    assert summary["settings"]["screen_rounds"] == 2  # --rounds 2: a screen of 2, confirm 3
    assert summary["settings"]["confirm_rounds"] == 3
    verdicts = _verdicts(summary)
    assert len(verdicts) == 1 and set(verdicts.values()) <= set(VERDICTS), verdicts
    fused = next(c for c in summary["cells"] if "'fused'" in c["cell"])
    assert fused["kernel_base"] == fused["kernel_new"] == "xla"
    assert not fused["kernel_changed"]
    out = tmp_path / "versions.html"
    report = subprocess.run([sys.executable, "-m", "mhabench.cli", "report", "--results",
                             f"{summary['folder']}/results", "--out", str(out)], cwd=repo,
                            env=env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    markdown = out.with_suffix(".md").read_text()
    findings, section = markdown.split("## Versions side by side", 1)
    finding = "jax 0.10.2, jaxlib 0.10.2, flax 0.12.8 against jax 0.10.1, jaxlib 0.10.1"
    assert finding in findings and finding in section
    assert "MhaGqaMqa.time_step('jax', 'fused', 2, 512, 256, 16, 4" in section
    tables = out.with_name(out.stem + "_tables")
    cells = (tables / "versions--cells.csv").read_text()
    assert cells.count("xla") == 2 and all(v in cells for v in verdicts.values())


def test_one_dependency_set_on_both_sides_is_said_before_anything_runs() -> None:
    done = _versions("", "", "-b", r"^bench_heads\.HeadsAtFixedWidth\.time_step\('jax', 'fused'",
                     "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "BASE and NEW are one dependency set" in done.stderr
    assert re.search(r"versions: \d+ time cell\(s\); besides building both environments",
                     done.stderr), done.stderr
