"""The moment's slowness taken out of timings: the speed probe recorded beside each asv
timing process, the slowdown the CLI's results carry, the fit at the machine's fast speed,
and validate's own timings read against the same reference."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from fixtures.synthetic_asv import synthetic_time, write_results

from mhabench.analysis.fast_speed import SLOWDOWN, add_slowdown, fast_values
from mhabench.analysis.prediction.timemodel import timing_cells
from mhabench.analysis.prediction.validation import leave_out
from mhabench.analysis.results import load_results
from mhabench.cli import main
from mhabench.core.config import AttentionConfig
from mhabench.measure.conditions import speed
from mhabench.measure.conditions.machine_load import CellLoad, read_records
from mhabench.measure.interleaved import measure_interleaved

FAST = 50e-6  # the synthetic machine's fast probe reading
REAL = Path(__file__).parent / "fixtures" / "asv_results"


def _slow_results(tmp_path: Path, seed: int = 1) -> tuple[Path, dict[str, float]]:
    """Synthetic results where a third of the cells ran in a slow stretch (1.3-1.9x) and
    their processes' probes read it (with their own noise: 5 %); returns the results
    folder and each slowed cell's factor by asv cell."""
    rng = np.random.default_rng(seed)
    factors: dict[AttentionConfig, float] = {}

    def time_of(config: AttentionConfig, _: int) -> float:
        factors[config] = float(rng.uniform(1.3, 1.9)) if rng.random() < 1 / 3 else 1.0
        return synthetic_time(config) * factors[config]

    root = write_results(tmp_path / ".asv" / "results", time_of=time_of)
    frame = load_results(root).frame
    load = tmp_path / ".asv" / "load" / "aaaaaaaa-env"
    load.mkdir(parents=True)
    slowed = {}
    for i, row in enumerate(frame[frame["kind"] == "time"].to_dict("records")):
        if row["config_id"] is None or not isinstance(row["config_id"], str):
            continue
        config = next(c for c in factors if c.id == row["config_id"])
        factor = factors[config]
        probes = [FAST * factor * float(rng.uniform(0.975, 1.025)) for _ in range(2)]
        (load / f"{i}.json").write_text(json.dumps({
            "version": 1, "commit": row["commit"], "env_name": row["env_name"],
            "cell": row["asv_cell"], "pid": i, "start": 1e9 + i, "seconds": 0.2,
            "cpus": 2, "other_cpu_seconds": 0.0, "steal_seconds": 0.0,
            "load1": [0.1, 0.1], "probe_s": probes}))
        if factor > 1:
            slowed[row["asv_cell"]] = factor
    return root, slowed


def test_the_fit_reads_cells_at_the_machine_fast_speed(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """Through the CLI (its results carry the load records' slowdown): with a third of
    the cells slowed 1.3-1.9x, the model predicts the fast machine within 5 % once the
    probes take the stretches out; the same results without their records miss it."""
    root, slowed = _slow_results(tmp_path)
    assert len(slowed) >= 10
    configs = [AttentionConfig(batch=4, n=384, d=128, heads=32),
               AttentionConfig(batch=2, n=200, d=192, heads=6)]

    said: list[float | None] = []

    def predicted(config: AttentionConfig) -> float:
        argv = ["predict", "--results", str(root), "--batch", str(config.batch), "-n",
                str(config.n), "-d", str(config.d), "--heads", str(config.heads), "--json"]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        said.append(out["fast_probe_s"])  # the reference the fit's cells were read at
        return out["predicted_s"]

    for config in configs:
        assert predicted(config) == pytest.approx(synthetic_time(config), rel=0.05)
    assert said[-1] == pytest.approx(FAST, rel=0.03)
    (tmp_path / ".asv" / "load").rename(tmp_path / "elsewhere")  # no records: as read
    misses = [predicted(c) / synthetic_time(c) - 1 for c in configs]
    assert max(misses) > 0.1, misses
    assert said[-1] is None


def test_the_slowdown_is_the_probe_over_the_machine_fast_reading(tmp_path: Path) -> None:
    root, slowed = _slow_results(tmp_path)
    results = load_results(root)
    loads = read_records(tmp_path / ".asv" / "load")
    frame, references = add_slowdown(results.frame, loads)
    assert set(references) == {"synth"}
    probes = [load.probe_s for load in loads.values()]
    assert references["synth"] == pytest.approx(np.quantile(probes, speed.FAST_QUANTILE))
    timed = frame[frame["kind"] == "time"].set_index("asv_cell")
    for cell, factor in slowed.items():
        assert timed.loc[cell, SLOWDOWN] == pytest.approx(factor, rel=0.06), cell
    assert (frame[SLOWDOWN] >= 1).all()  # never quicker than the fast reading
    assert (frame.loc[frame["kind"] != "time", SLOWDOWN] == 1).all()
    fast = fast_values(frame[frame["kind"] == "time"])
    assert np.allclose(fast, frame.loc[frame["kind"] == "time", "value"]
                       / frame.loc[frame["kind"] == "time", SLOWDOWN])
    # a machine none of whose cells has a probe: no reference, nothing divided
    bare, none = add_slowdown(results.frame, {})
    assert none == {} and (bare[SLOWDOWN] == 1).all()


def test_timing_cells_read_each_cell_at_fast_speed_once(tmp_path: Path) -> None:
    """The fit's cells passed through again (the report fits its leave-out on the cells it
    already holds) read the same values, and the leave-out from them is the one from the
    frame: a cell is not divided by its slowdown twice."""
    root, slowed = _slow_results(tmp_path)
    frame, _ = add_slowdown(load_results(root).frame, read_records(tmp_path / ".asv" / "load"))
    cells = timing_cells(frame)
    again = timing_cells(cells)
    assert list(again["config_id"]) == list(cells["config_id"])
    assert np.allclose(again["value"], cells["value"], rtol=1e-12)
    timed = frame[frame["kind"] == "time"].set_index("config_id")
    slow = timed[timed[SLOWDOWN] > 1.2].index  # cells read in the slow stretch
    assert len(slow) >= 5
    read = cells.set_index("config_id")["value"]
    assert np.allclose(read[slow], timed.loc[slow, "value"] / timed.loc[slow, SLOWDOWN])
    from_frame, from_cells = leave_out(frame), leave_out(cells)
    assert np.allclose(from_cells["predicted_s"], from_frame["predicted_s"], rtol=1e-9)


def test_a_cell_probe_is_the_geometric_mean_of_its_processes_and_none_when_one_lacks_it(
        tmp_path: Path) -> None:
    folder = tmp_path / "abc-env"
    folder.mkdir()
    base = {"version": 1, "commit": "abc", "env_name": "env", "cell": "b.C.time_step(1)",
            "start": 1.0, "seconds": 1.0, "other_cpu_seconds": 0.0, "steal_seconds": 0.0}
    for i, probes in enumerate(([1e-5, 4e-5], [2e-5, 2e-5])):
        (folder / f"{i}.json").write_text(json.dumps({**base, "pid": i, "probe_s": probes}))
    (folder / "2.json").write_text(json.dumps({**base, "cell": "b.C.time_step(2)", "pid": 2}))
    loads = read_records(tmp_path)
    assert loads[("abc", "env", "b.C.time_step(1)")].probe_s == pytest.approx(2e-5)
    assert loads[("abc", "env", "b.C.time_step(2)")].probe_s is None
    assert CellLoad(0.0, 0.0, None, 1).probe_s is None  # records from before the probes


def test_validate_divides_each_timing_by_its_own_probe() -> None:
    """measure_interleaved reads the probe after each visit's timed calls and keeps it
    beside each of them; at_fast_speed divides each timing by its own probe's slowdown
    (never speeding a timing up: a probe below the reference counts as fast)."""
    readings = iter([FAST * f for f in (1.0, 2.0, 0.5, 1.5, 1.0, 3.0)])
    configs = [AttentionConfig(batch=1, n=8, d=16, heads=2),
               AttentionConfig(batch=1, n=16, d=16, heads=4)]
    measured = measure_interleaved(configs, rounds=3, repeats=2, threads=1,
                                   probe=lambda: next(readings))
    first, second = (measured[c] for c in configs)
    assert first.probes_s == pytest.approx([FAST * f for f in (1, 1, 0.5, 0.5, 1, 1)])
    assert second.probes_s == pytest.approx([FAST * f for f in (2, 2, 1.5, 1.5, 3, 3)])
    fast = second.at_fast_speed(FAST)
    assert fast.times_s == pytest.approx([t / f for t, f in zip(
        second.times_s, (2, 2, 1.5, 1.5, 3, 3), strict=True)])
    assert first.at_fast_speed(FAST).times_s == pytest.approx(first.times_s)
    plain = measure_interleaved(configs[:1], rounds=1, repeats=1, threads=1)[configs[0]]
    assert plain.probes_s == () and plain.at_fast_speed(FAST) is plain


def test_the_probe_is_positive_and_a_reference_refuses_what_is_no_time() -> None:
    readings = [speed.probe() for _ in range(5)]
    assert all(0 < r < 0.01 and math.isfinite(r) for r in readings)
    assert speed.slowdown(2 * FAST, FAST) == 2 and speed.slowdown(FAST / 2, FAST) == 1
    for bad in ([], [0.0, 1e-5], [float("nan")]):
        with pytest.raises(ValueError, match="positive, finite"):
            speed.fast_reference(bad)


def test_validate_reads_its_sample_at_the_grid_fast_speed_and_shows_it_as_read(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The real fixture's results with load records carrying probes (a quarter of its
    cells slowed 1.5x) whose fast reading, 0.1 us, no real probe comes near: validate
    divides each of its timings by its probe's slowdown against that reference (here
    ~100x, so every config reads ~100x quicker than predicted), says the reference and
    the slowdown, and gives the same timings as read against a model fitted on the cells
    as read (errors of the usual size), in the CLI, the file and the report."""
    from mhabench.analysis.prediction.validation import as_read_line, load_validation
    from mhabench.report.build import build_report

    results = tmp_path / ".asv" / "results"
    shutil.copytree(REAL, results)
    frame = load_results(results).frame
    folder = tmp_path / ".asv" / "load" / "fixture"
    folder.mkdir(parents=True)
    timed = frame[frame["kind"] == "time"].to_dict("records")
    for i, row in enumerate(timed):
        probe = 1e-7 * (1.5 if i % 4 == 0 else 1.0)
        (folder / f"{i}.json").write_text(json.dumps({
            "version": 1, "commit": row["commit"], "env_name": row["env_name"],
            "cell": row["asv_cell"], "pid": i, "start": 1e9 + i, "seconds": 0.1,
            "other_cpu_seconds": 0.0, "steal_seconds": 0.0, "probe_s": [probe, probe]}))
    saved = tmp_path / "validation.json"
    assert main(["validate", "--results", str(results), "--sample", "3", "--seed", "0",
                 "--rounds", "2", "--repeats", "1", "--anchors", "1",
                 "--save", str(saved)]) == 0
    out = capsys.readouterr()
    data = load_validation(saved)
    assert data["fast_probe_s"] == pytest.approx(1e-7)  # the grid's 10th percentile
    assert data["slowdown_median"] > 10  # this machine's probes against that reading
    assert data["summary"]["all"]["median_rel_error"] > 5  # divided: ~100x quicker
    assert data["as_read"]["all"]["median_rel_error"] < 5
    assert data["as_read"]["all"]["cells"] == 3
    assert "read at the machine's fast speed" in out.err
    assert as_read_line(data["as_read"]) in out.out
    report = build_report(load_results(results), log=lambda m: None, validations=[data])
    section = next(s for s in report.sections if s.id == "validation")
    assert as_read_line(data["as_read"]) in section.text[0]
    assert "as the grid's cells were" in section.text[0]


def test_a_grid_timed_in_bursts_is_named_in_the_report(tmp_path: Path) -> None:
    """A third of the grid's cells 1.3-1.9x slow, their probes reading it: the
    report's time-model section tabulates the probes' slowdowns, and the findings say the
    grid was timed in bursts; without the load records neither is claimed."""
    from mhabench.analysis.fast_speed import BURSTY_P90, grid_steadiness

    root, slowed = _slow_results(tmp_path)
    frame, _ = add_slowdown(load_results(root).frame, read_records(tmp_path / ".asv" / "load"))
    steady = grid_steadiness(frame)
    read = frame.loc[frame["kind"] == "time", SLOWDOWN]
    assert steady["machine"].tolist() == ["synth"] and steady["cells"].iloc[0] == len(read)
    assert steady["90th percentile"].iloc[0] == pytest.approx(np.percentile(read, 90))
    assert steady["90th percentile"].iloc[0] > BURSTY_P90 and steady["bursty"].all()
    calm = frame.assign(**{SLOWDOWN: np.minimum(frame[SLOWDOWN], 1.1)})
    assert not grid_steadiness(calm)["bursty"].any()
    assert grid_steadiness(frame.assign(**{SLOWDOWN: 1.0})).empty  # no probe read anything

    out = tmp_path / "report.html"
    assert main(["report", "--results", str(root), "--out", str(out)]) == 0
    table = out.with_name("report_tables") / "time-model--grid-speed.csv"
    assert table.exists()
    findings = out.with_suffix(".md").read_text().split("## ")[1]
    assert "the grid was timed in bursts (probe slowdown 90th percentile x" in findings
    (tmp_path / ".asv" / "load").rename(tmp_path / "elsewhere")
    quiet = tmp_path / "quiet.html"
    assert main(["report", "--results", str(root), "--out", str(quiet)]) == 0
    assert not (quiet.with_name("quiet_tables") / "time-model--grid-speed.csv").exists()
    assert "timed in bursts" not in quiet.with_suffix(".md").read_text()
