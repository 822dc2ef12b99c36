"""The random off-grid validation: the sample is seeded and wider than the grid, the
comparison is right on a known truth, and `mhabench validate` times fresh configs the
model never saw (and the report shows them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures.synthetic_asv import grid, synthetic_time, write_results

from mhabench.analysis.prediction.sampling import ANCHOR_MAX_S, anchor_cells, sample_configs
from mhabench.analysis.prediction.timemodel import fit_models, groups
from mhabench.analysis.prediction.validation import (
    anchored_line,
    load_validation,
    machine_drift,
    random_validation,
    summary_dict,
)
from mhabench.analysis.results import load_results
from mhabench.cli import main
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost
from mhabench.measure.timing import Measurement
from mhabench.report.build import build_report

REAL = Path(__file__).parent / "fixtures" / "asv_results"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """Exact synthetic times (the model's own form) for torch/batched and torch/fused."""
    root = tmp_path_factory.mktemp("synthetic") / "r"
    write_results(root, params=[["torch"], ["batched", "fused"], *grid()[2:]])
    frame = load_results(root).frame
    return frame, fit_models(frame)


def test_sample_is_seeded_valid_off_grid_and_wider_than_the_grid(synthetic: tuple) -> None:
    frame, models = synthetic
    cells = groups(frame)
    sample = sample_configs(models, cells, 24, seed=0, wide=True)
    assert sample == sample_configs(models, cells, 24, seed=0, wide=True)
    assert sample != sample_configs(models, cells, 24, seed=1, wide=True)
    configs = [c for _, c in sample]
    assert len({c.id for c in configs}) == 24
    assert not {c.id for c in configs} & set(frame["config_id"].dropna())  # never a grid cell
    assert all(cost(c).flops_model <= 2e9 for c in configs)
    # the grid has even d, powers of two for h, n == m, MHA only, no masking
    assert any(c.d % 2 for c in configs)
    assert any(c.heads & (c.heads - 1) for c in configs)
    assert any(c.n != c.m for c in configs)
    assert any(1 < c.kv_heads < c.heads for c in configs)  # GQA, not only MQA
    assert any(c.masked for c in configs)
    assert {key[2] for key, _ in sample} == {"batched", "fused"}
    assert any(models[key].extrapolation(c) for key, c in sample)  # the wide box leaves them


def test_default_sample_stays_inside_the_fitted_ranges_yet_off_the_grid(
        synthetic: tuple) -> None:
    frame, models = synthetic
    sample = sample_configs(models, groups(frame), 24, seed=5)
    assert len(sample) == 24
    assert all(not models[key].extrapolation(c) for key, c in sample)
    assert not {c.id for _, c in sample} & set(frame["config_id"].dropna())
    # off the grid all the same: odd widths, head counts off the powers of two
    assert any(c.d % 2 for _, c in sample) and any(c.heads & (c.heads - 1) for _, c in sample)
    # the grid fitted neither cross-attention nor masking: the default draws none
    assert not any(c.cross or c.masked for _, c in sample)


def _measured(time_s: float) -> Measurement:
    return Measurement(AttentionConfig(), (time_s,) * 3, threads=1)


def test_validation_compares_fresh_times_with_the_model(synthetic: tuple) -> None:
    frame, models = synthetic
    sample = sample_configs(models, groups(frame), 12, seed=3, wide=True)
    # A truth of the model's own form: every prediction exact, extrapolated or not.
    exact = random_validation(frame, models, sample,
                              {c: _measured(synthetic_time(c)) for _, c in sample})
    assert len(exact) == 12 and exact["rel_error"].max() < 1e-6
    assert exact["flop_rate_rel_error"].median() > 0.1  # the one-rate baseline is not exact
    # A truth with a cost the model lacks (masking adds 1 ms): only masked configs miss.
    masked = random_validation(frame, models, sample, {c: _measured(
        synthetic_time(c) + (1e-3 if c.masked else 0.0)) for _, c in sample})
    assert (masked["rel_error"] > 1e-3).tolist() == [c.masked for _, c in sample]
    assert (masked["signed_error"][masked["rel_error"] > 1e-3] < 0).all()  # predicted too low
    s = summary_dict(masked)
    assert s["all"]["cells"] == 12
    assert s["all"]["worst_rel_error"] == pytest.approx(masked["rel_error"].max())
    assert s["inside"]["cells"] + s["extrapolated"]["cells"] == 12
    for _, row in masked.iterrows():  # every extrapolation is the model's own verdict
        config = AttentionConfig(**row["config"])
        key = tuple(row[k] for k in ("machine", "framework", "backend", "device", "dtype"))
        assert row["extrapolation"] == "; ".join(models[key].extrapolation(config))


def test_common_scale_removes_a_uniform_slowdown_and_nothing_else(synthetic: tuple) -> None:
    """A machine 1.5x slower on every config: the exact model's raw errors all read 33 %,
    after the common scale none, and the scale reads the slowdown; the FLOP model keeps
    its spread (it does not follow the configs), and a missing cost stays visible."""
    frame, models = synthetic
    sample = sample_configs(models, groups(frame), 12, seed=3, wide=True)
    slow = random_validation(frame, models, sample,
                             {c: _measured(1.5 * synthetic_time(c)) for _, c in sample})
    assert slow["rel_error"].min() == pytest.approx(1 / 3)
    c = summary_dict(slow)["common_scale"]
    assert c["cells"] == 12 and c["scale"] == pytest.approx(1.5)
    assert c["worst_factor_error"] < 1e-6 < 0.1 < c["flop_rate_median_factor_error"]
    masked = random_validation(frame, models, sample, {c: _measured(
        1.5 * synthetic_time(c) + (1e-3 if c.masked else 0.0)) for _, c in sample})
    assert summary_dict(masked)["common_scale"]["worst_factor_error"] > 1e-3


def test_anchor_cells_measure_the_machine_drift_and_the_errors_against_the_grid_day(
        synthetic: tuple) -> None:
    """The machine 1.3x slower than when it timed the grid, on grid cells and sample alike:
    the anchors read 1.3, the exact model's errors against the grid's day read 0 (23 % as
    measured), a cost the model lacks stays visible; anchors are the sample's groups' grid
    cells, seeded, none over ANCHOR_MAX_S."""
    frame, models = synthetic
    cells = groups(frame)
    sample = sample_configs(models, cells, 12, seed=3, wide=True)
    keys = [k for k, _ in sample]
    anchors = anchor_cells(cells, keys, 8, seed=3)
    assert anchors == anchor_cells(cells, keys, 8, seed=3) != anchor_cells(cells, keys, 8, 4)
    grid_ids = {k: set(cells[k]["config_id"]) for k in keys}
    assert len(anchors) == 8 and all(
        any(c.id in grid_ids[k] for k in keys) and asv_s <= ANCHOR_MAX_S for c, asv_s in anchors)
    assert {c.backend for c, _ in anchors} <= {k[2] for k in keys}
    slow = {c: _measured(1.3 * asv_s) for c, asv_s in anchors}
    drift = machine_drift(anchors, slow)
    assert drift["anchors"] == 8 and drift["drift"] == pytest.approx(1.3)
    errors = random_validation(frame, models, sample,
                               {c: _measured(1.3 * synthetic_time(c)) for _, c in sample})
    s = summary_dict(errors, drift)
    assert s["all"]["median_rel_error"] == pytest.approx(0.3 / 1.3)
    assert s["anchored"]["all"]["worst_rel_error"] < 1e-6 and s["anchored"]["anchors"] == 8
    assert "x1.30" in anchored_line(s) and "median of 8 grid cells" in anchored_line(s)
    masked = random_validation(frame, models, sample, {c: _measured(
        1.3 * (synthetic_time(c) + (1e-3 if c.masked else 0.0))) for _, c in sample})
    assert summary_dict(masked, drift)["anchored"]["all"]["worst_rel_error"] > 1e-3
    assert "anchored" not in summary_dict(errors)  # no anchors timed: no such figures
    assert "no anchor cells" in anchored_line(summary_dict(errors))
    # The floor: each anchor's own distance from the drift. Uniformly slow: none.
    assert drift["floor_median"] == pytest.approx(0) and "within 0.0%" in anchored_line(s)
    factors = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]
    spread = machine_drift(anchors, {c: _measured(asv_s * f) for (c, asv_s), f in
                                     zip(anchors, factors, strict=True)})
    assert spread["drift"] == pytest.approx(1.35)
    assert spread["floor_median"] == pytest.approx((0.15 / 1.35 + 0.25 / 1.35) / 2)
    assert spread["floor_worst"] == pytest.approx(0.35 / 1.35)


@pytest.mark.parametrize("argv, message", [
    (["--sample", "0"], "--sample 0 is not allowed"),
    (["--repeats", "0"], "--repeats 0 is not allowed"),
    (["--rounds", "0"], "--rounds 0 is not allowed"),
    (["--anchors", "-1"], "--anchors -1 is not allowed"),
    (["--max-gflop", "0"], "--max-gflop 0.0 is not allowed"),
    (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
])
def test_validate_bad_flags_one_line_exit_2(argv: list[str], message: str,
                                             capsys: pytest.CaptureFixture) -> None:
    try:
        code = main(["validate", "--results", str(REAL), *argv])
    except SystemExit as exc:  # argparse's own errors exit from inside parse_args
        code = exc.code
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and err[0].startswith("mhabench validate: error:") and message in err[0]


def test_validate_times_fresh_configs_saves_once_and_feeds_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    saved = tmp_path / "validation.json"
    argv = ["validate", "--results", str(REAL), "--sample", "3", "--seed", "0",
            "--rounds", "2", "--repeats", "2", "--warmup", "1", "--anchors", "2",
            "--save", str(saved), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(saved.read_text())
    rows = out["rows"]
    assert len(rows) == 3 and out["seed"] == 0 and out["threads"] == 1  # as the fixture ran
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 and r["repeats"] == 4
               for r in rows)  # 2 rounds x 2 calls
    assert out["box"] == "fitted" and out["rounds"] == 2
    # two grid cells timed with the sample: the machine's drift since the fixture's day
    assert len(out["anchors"]) == 2 and {a["config_id"] for a in out["anchors"]} <= set(
        load_results(REAL).frame["config_id"].dropna())
    assert out["summary"]["anchored"]["drift"] == pytest.approx(
        float(np.median([a["ratio"] for a in out["anchors"]])))
    cells = set(load_results(REAL).frame["config_id"].dropna())
    assert not {r["config_id"] for r in rows} & cells  # measurements the model never saw
    assert out["summary"]["all"]["median_rel_error"] == pytest.approx(
        float(np.median([r["rel_error"] for r in rows])))
    # never overwritten; one line, exit 2, before any timing
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mhabench validate: error:") and "never overwritten" in err[-1]
    report = build_report(load_results(REAL), log=lambda m: None,
                          validations=[load_validation(saved)])
    section = next(s for s in report.sections if s.id == "validation")
    configs = next(t.frame for t in section.tables if t.name == "random-configs")
    assert not section.absent and len(configs) == 3
    assert f"{100 * out['summary']['all']['median_rel_error']:.1f}%" in section.text[0]
    assert anchored_line(out["summary"]) in section.text[0]
    summary = next(t.frame for t in section.tables if t.name == "summary")
    assert "all, against the grid's day" in summary["configs"].tolist()
    by_mode = next(t.frame for t in section.tables if t.name == "by-mode")
    modes = sorted({r["mode"] for r in rows})
    assert by_mode["mode"].tolist() == modes and by_mode["cells"].sum() == 3
    for mode, median in zip(by_mode["mode"], by_mode["median error (%)"], strict=True):
        assert median == pytest.approx(100 * float(np.median(
            [r["rel_error"] for r in rows if r["mode"] == mode])))


def test_report_refuses_a_file_that_is_not_a_validation(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"kind": "something else"}))
    assert main(["report", "--results", str(REAL), "--out", str(tmp_path / "r.html"),
                 "--validation", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a file written by mhabench validate --save" in err[0]
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
@pytest.mark.timing
def test_model_beats_one_flop_rate_on_random_configs_it_never_saw(
        capsys: pytest.CaptureFixture) -> None:
    """24 fresh configs against the real fixture's models (this machine type, another day).

    Compared after one common scale per model (``summary["common_scale"]``): the
    fixture's day and today's differ in speed by 20-40 % on these shared VMs, and the raw
    errors then favour whichever model erred the same way (CI once read the calibrated
    model's raw median 78 % against the FLOP model's 67 % on a slow machine, where it
    read 51 % against 97 % here). With the scale, what is compared is how each model
    follows the configs, which is what the fit on another day can still be judged on."""
    assert main(["validate", "--results", str(REAL), "--sample", "24", "--seed", "0",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["all"]["cells"] == 24
    s = summary["common_scale"]
    print(s)
    assert s["cells"] == 24
    assert s["median_factor_error"] < s["flop_rate_median_factor_error"]
    assert s["worst_factor_error"] < s["flop_rate_worst_factor_error"]


def _file(seed: int, errors: list[float], ratios: list[float], inside: int | None = None,
          machine: str = "m") -> dict:
    """A saved validation with configs whose predictions miss by ``errors`` (predicted over
    measured against the grid's day, the drift being the anchors' median) and anchors at
    ``ratios``; the first ``inside`` configs lie inside the fitted ranges."""
    drift = float(np.median(ratios))
    inside = len(errors) if inside is None else inside
    rows = [{"config_id": f"c{seed}-{i}", "mode": "forward", "measured_s": 1e-3 * drift,
             "predicted_s": 1e-3 * (1 + e), "flop_rate_s": 2e-3, "signed_error": e,
             "rel_error": abs(e), "flop_rate_rel_error": 1.0, "extrapolated": i >= inside,
             "extrapolation": "" if i < inside else "n 9 > 8"} for i, e in enumerate(errors)]
    return {"kind": "mhabench-validation", "machine": machine, "seed": seed, "box": "fitted",
            "created": f"2026-12-0{seed}", "sample": len(errors), "rows": rows,
            "anchors": [{"config_id": f"a{i}", "asv_s": 1e-3, "measured_s": 1e-3 * r,
                         "ratio": r} for i, r in enumerate(ratios)],
            "summary": {"anchored": {"drift": drift}}}


def test_floor_judges_each_anchor_by_the_others_and_the_tail_counts_past_the_goal() -> None:
    from mhabench.analysis.prediction.validation_samples import (
        WORST_GOAL,
        floor_errors,
        newest,
        pooled_tail,
        samples_table,
        tail_line,
    )

    # the drift of the other three anchors is 1.0: the slow one is 50 % off as a
    # prediction of its own grid time; with the drift of all four (1.0) it would be too,
    # but a lone anchor near the median would read 0 against a drift it set itself
    assert floor_errors(_file(1, [0.0], [1.0, 1.0, 1.0, 2.0])) == pytest.approx(
        [0.0, 0.0, 0.0, 0.5])
    assert floor_errors(_file(1, [0.0], [0.8, 1.25])) == pytest.approx([0.5625, 0.36])
    assert len(floor_errors(_file(1, [0.0], [1.0]))) == 0  # no other anchor to judge by
    a = _file(1, [0.1, -0.2, 0.5, 0.9], [1.0, 1.1, 0.9, 1.0], inside=3)
    b = _file(2, [0.05, -0.4, 0.0, 0.3], [2.0, 2.0, 2.0, 3.0])
    assert newest([a, b]) is b
    table = samples_table([a, b])
    assert table["seed"].tolist() == [1, 2] and table["inside"].tolist() == [3, 4]
    # errors against the grid's day: the drift the file recorded comes out again
    assert table["worst (%)"].tolist() == pytest.approx([90, 40])
    assert table["inside worst (%)"].tolist() == pytest.approx([50, 40])
    assert table["FLOP model median (%)"].tolist() == pytest.approx([100, 100])
    assert table["floor worst (%)"].iloc[1] == pytest.approx(100 / 3)
    tail = pooled_tail([a, b]).set_index("what")
    model = tail.loc["configs inside the fitted ranges"]
    # 7 configs inside (the 0.9 one is an extrapolation): 0.5 and -0.4 lie past 35 %
    assert (model["count"], model["past goal"]) == (7, 2)
    assert model["sample meets goal (%)"] == pytest.approx(100 * (5 / 7) ** 4)
    floor = tail.loc["grid cells re-timed (the floor)"]
    assert (floor["count"], floor["past goal"]) == (8, 0)
    assert floor["sample meets goal (%)"] == pytest.approx(100)
    assert pooled_tail([a, b], sample=24).set_index("what").loc[
        "configs inside the fitted ranges", "sample meets goal (%)"] == pytest.approx(
            100 * (5 / 7) ** 24)
    line = tail_line(pooled_tail([a, b]))
    assert "2 of 7 configs" in line and f"more than {100 * WORST_GOAL:.0f}% off" in line
    # machines apart: a third file of another machine makes its own rows
    other = pooled_tail([a, b, _file(3, [0.0, 0.0], [1.0, 1.0], machine="n")])
    assert sorted(set(other["machine"])) == ["m", "n"]
    assert other[other["machine"] == "m"]["count"].tolist() == [7, 8]


def test_report_pools_several_real_validations_and_refuses_one_given_twice(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two samples timed here (seeds 0 and 1) against the real fixture, then the report
    CLI with both: one row per sample and the pooled tail, counted from the files."""
    from mhabench.analysis.prediction.validation_samples import floor_errors

    files = []
    for seed in (0, 1):
        files.append(tmp_path / f"v{seed}.json")
        assert main(["validate", "--results", str(REAL), "--sample", "3", "--seed", str(seed),
                     "--rounds", "1", "--repeats", "2", "--warmup", "1", "--anchors", "3",
                     "--save", str(files[-1])]) == 0
    capsys.readouterr()
    out = tmp_path / "r.html"
    # the same file twice would count its sample twice: refused, nothing written
    assert main(["report", "--results", str(REAL), "--out", str(out),
                 "--validation", str(files[0]), str(files[0])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "more than once" in err[-1] and not out.exists()
    assert main(["report", "--results", str(REAL), "--out", str(out),
                 "--validation", *map(str, files)]) == 0
    data = [load_validation(f) for f in files]
    tables = out.with_name("r_tables")
    samples = pd.read_csv(tables / "validation--samples.csv")
    assert samples["seed"].tolist() == [0, 1] and samples["configs"].tolist() == [3, 3]
    for row, d in zip(samples.to_dict("records"), data, strict=True):
        assert row["drift"] == pytest.approx(d["summary"]["anchored"]["drift"])
        assert row["median (%)"] == pytest.approx(
            100 * d["summary"]["anchored"]["all"]["median_rel_error"])
    tail = pd.read_csv(tables / "validation--tail.csv").set_index("what")
    inside = [r for d in data for r in d["rows"] if not r["extrapolated"]]
    assert tail.loc["configs inside the fitted ranges", "count"] == len(inside)
    floor = np.concatenate([floor_errors(d) for d in data])
    assert tail.loc["grid cells re-timed (the floor)", "count"] == 6
    assert tail.loc["grid cells re-timed (the floor)", "past goal"] == int((floor > 0.35).sum())
    configs = pd.read_csv(tables / "validation--random-configs.csv")
    assert sorted(configs["seed"].tolist()) == [0, 0, 0, 1, 1, 1]
    page = out.read_text()
    assert "2 samples given" in page and "Configs past the worst-error goal" in page
