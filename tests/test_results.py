"""Loading asv results: the real fixture, synthetic folders and damaged copies of both."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from fixtures.synthetic_asv import BENCH, write_results

from mhabench.analysis.results import ResultsError, calibration_table, latest, load_results
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost

REAL = Path(__file__).parent / "fixtures" / "asv_results"


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(params=["real", "synthetic"])
def results_dir(request, tmp_path: Path) -> Path:
    """A writable copy of the real asv fixture, or a synthetic folder."""
    target = tmp_path / "results"
    if request.param == "real":
        if not (REAL / "benchmarks.json").is_file():
            pytest.skip("tests/fixtures/asv_results/ (the real asv run) is not committed yet")
        shutil.copytree(REAL, target)
    else:
        write_results(target)
    return target


def result_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*.json") if p.name != "machine.json")


def add_second_commit(root: Path) -> Path:
    """Copy the first results file as another commit, so one file can be damaged while
    another still loads."""
    first = result_files(root)[0]
    data = json.loads(first.read_text())
    data["commit_hash"] = "f" * 40
    data["date"] = (data.get("date") or 0) + 1
    second = first.with_name("ffffffff-" + first.name.split("-", 1)[1])
    second.write_text(json.dumps(data))
    return first


def test_loads_one_row_per_cell_with_cost_terms(results_dir: Path) -> None:
    before = snapshot(results_dir)
    results = load_results(results_dir)
    frame = results.frame
    timed = frame[(frame["kind"] == "time") & frame["config_id"].notna()]
    assert len(timed) > 0
    for row in timed.head(20).to_dict("records"):
        config = AttentionConfig.from_dict({k: row[k] for k in (
            "framework", "backend", "batch", "n", "m", "d", "heads", "kv_heads", "cross",
            "masked", "dropout", "dtype", "device", "mode")} | {
            k: int(row[k]) for k in ("batch", "n", "m", "d", "heads", "kv_heads")})
        assert row["config_id"] == config.id
        assert row["flops_model"] == cost(config).flops_model
        assert row["kv_cache_bytes_per_token"] == cost(config).kv_cache_bytes_per_token
        assert row["value"] > 0 and math.isfinite(row["value"])
    assert not timed.duplicated(["machine", "commit", "env_name", "benchmark", "cell"]).any()
    assert snapshot(results_dir) == before  # nothing written into the results folder


def test_synthetic_values_follow_product_order(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", time_of=lambda c, i: c.heads * 1e-3 + c.n * 1e-6)
    frame = load_results(root).frame
    timed = frame[frame["benchmark"] == BENCH]
    assert (timed["value"] - (timed["heads"] * 1e-3 + timed["n"] * 1e-6)).abs().max() < 1e-12
    assert (timed["q25"] < timed["value"]).all() and (timed["q75"] > timed["value"]).all()


def test_truncated_file_warns_and_the_rest_loads(results_dir: Path) -> None:
    damaged = add_second_commit(results_dir)
    good = load_results(results_dir).frame
    text = damaged.read_text()
    lost = json.loads(text)["commit_hash"]
    damaged.write_text(text[: len(text) // 2])
    results = load_results(results_dir)
    assert any(damaged.name in w and "not readable JSON" in w for w in results.warnings)
    assert 0 < len(results.frame) < len(good)
    assert "f" * 40 in set(results.frame["commit"]) and lost not in set(results.frame["commit"])


def test_garbage_file_warns(results_dir: Path) -> None:
    machine = result_files(results_dir)[0].parent
    (machine / "garbage.json").write_bytes(b"\x00\xffnot json")
    (machine / "list.json").write_text("[1, 2, 3]")
    rows = len(load_results(results_dir).frame)
    results = load_results(results_dir)
    assert any("garbage.json" in w for w in results.warnings)
    assert any("list.json" in w and "not an asv results file" in w for w in results.warnings)
    assert len(results.frame) == rows


def test_benchmark_missing_from_benchmarks_json_warns(results_dir: Path) -> None:
    spec = json.loads((results_dir / "benchmarks.json").read_text())
    full = load_results(results_dir).frame
    removed = sorted(full["benchmark"].unique())[0]
    del spec[removed]
    (results_dir / "benchmarks.json").write_text(json.dumps(spec))
    results = load_results(results_dir)
    assert any(removed in w and "not in benchmarks.json" in w and ".json" in w.split(":")[0]
               for w in results.warnings)
    assert removed not in set(results.frame["benchmark"])
    assert len(results.frame) == (full["benchmark"] != removed).sum()


def test_a_failed_cell_warns_first_and_a_skipped_one_is_only_counted(results_dir: Path
                                                                      ) -> None:
    """asv writes NaN for a skipped cell (n/a by design: not in this grid, not supported)
    and null for a failed one: both are left out of the frame and counted in ``missing``;
    only the failed one is a warning, listed before the others."""
    path = result_files(results_dir)[0]
    before = load_results(results_dir)
    full = before.frame
    data = json.loads(path.read_text())

    def finite(values: list) -> list[int]:
        return [i for i, v in enumerate(values) if isinstance(v, float) and math.isfinite(v)]

    name = sorted(n for n in data["results"] if n in set(full["benchmark"])
                  and len(finite(data["results"][n][0])) >= 2)[0]
    values = data["results"][name][0]
    skipped, failed = finite(values)[:2]
    values[skipped], values[failed] = float("nan"), None
    data["results"]["no.such.benchmark"] = data["results"][name]  # one other warning
    path.write_text(json.dumps(data))  # json writes NaN, as asv does
    results = load_results(results_dir)
    assert len(results.frame) == len(full) - 2
    new = [m for m in results.missing if m not in before.missing]
    assert sorted(m[4] for m in new) == ["failed", "skipped"]
    assert all(m[2] == name for m in new)
    about = [w for w in results.warnings if path.name in w and name in w]
    assert len(about) == 1 and "1 of" in about[0] and "failed" in about[0], about
    assert results.warnings[0] == about[0]  # failures first
    assert any("no.such.benchmark" in w for w in results.warnings[1:])

    values[failed] = float("nan")  # both skipped: counted, no warning
    path.write_text(json.dumps(data))
    results = load_results(results_dir)
    assert sum(m[2] == name and m[4] == "skipped" for m in results.missing) >= 2
    assert not any(path.name in w and name in w for w in results.warnings)


def test_missing_and_empty_folders_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="does not exist"):
        load_results(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="benchmarks.json"):
        load_results(tmp_path / "empty")
    (tmp_path / "empty" / "benchmarks.json").write_text("{}")
    with pytest.raises(ResultsError, match="no asv results files"):
        load_results(tmp_path / "empty")


def test_machine_filter(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", machine="alpha")
    write_results(root, machine="beta")
    assert set(load_results(root).frame["machine"]) == {"alpha", "beta"}
    assert set(load_results(root, machine="beta").frame["machine"]) == {"beta"}
    with pytest.raises(ResultsError, match="'gamma' is not in .*alpha, beta"):
        load_results(root, machine="gamma")


def test_latest_keeps_the_newest_measurement_of_each_cell(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", commits=["a" * 40, "b" * 40],
                         time_of=lambda c, i: (1 + i) * 1e-3)
    frame = load_results(root).frame
    newest = latest(frame)
    assert set(newest["commit"]) == {"b" * 40}
    assert len(newest) == len(frame) / 2
    # a partial run at a newer commit replaces only the cells it ran
    partial = frame[(frame["commit"] == "a" * 40) & (frame["heads"] == 1)].assign(
        commit="c" * 40, date=frame["date"].max() + pd.Timedelta(hours=1), value=5.0)
    mixed = latest(pd.concat([frame, partial]))
    assert len(mixed) == len(frame) / 2
    assert (mixed[mixed["heads"] == 1]["value"] == 5.0).all()
    assert set(mixed[mixed["heads"] == 2]["commit"]) == {"b" * 40}


def test_calibration_peak(tmp_path: Path) -> None:
    root = write_results(tmp_path / "r", peak_gflops=123.0)
    table = calibration_table(load_results(root).frame)
    assert table[["machine", "framework", "device", "dtype"]].values.tolist() == [
        ["synth", "torch", "cpu", "float32"]]
    assert table["peak_gflops"].iloc[0] == pytest.approx(123.0)


def test_a_design_point_parameter_loads_as_the_config_fields_it_holds(tmp_path: Path) -> None:
    """A class whose shapes are one ``point`` parameter (a dict of config fields, as
    benchmarks/bench_design.py has them): each cell's row carries the point's fields, with
    the same label a class with one parameter per field gives, and no warning."""
    from mhabench.core.grids import Point

    name = "bench_design.Design.time_step"
    points = [Point(mode="forward", batch=2, n=64, m=64, d=32, heads=4, kv_heads=4,
                    cross=False, masked=False),
              Point(mode="decode", batch=1, n=1, m=96, d=64, heads=8, kv_heads=2,
                    cross=True, masked=True)]
    params = [["'torch'"], ["'batched'"], [repr(p) for p in points], ["'cpu'"],
              ["'float32'"], ["1"]]
    root = tmp_path / "results"
    (root / "m").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({name: {
        "name": name, "param_names": ["framework", "backend", "point", "device", "dtype",
                                      "threads"], "params": params, "type": "time",
        "unit": "seconds", "version": "1"}, "version": 2}))
    (root / "m" / "machine.json").write_text(json.dumps({"machine": "m", "version": 1}))
    (root / "m" / "aaaaaaaa-env.json").write_text(json.dumps({
        "commit_hash": "a" * 40, "env_name": "env", "date": 1700000000000,
        "params": {"machine": "m"}, "result_columns": ["result", "params", "version"],
        "results": {name: [[1e-3, 2e-3], params, "1"]}, "version": 2}))
    results = load_results(root)
    assert results.warnings == []
    rows = results.frame.sort_values("value")
    assert rows["config_id"].tolist() == [
        AttentionConfig(framework="torch", backend="batched", **p).id for p in points]
    assert rows["n"].tolist() == [64, 1] and rows["kv_heads"].tolist() == [4, 2]
    assert rows["cell"].iloc[1] == ("framework=torch, backend=batched, mode=decode, batch=1, "
                                    "n=1, m=96, d=64, heads=8, kv_heads=2, cross=True, "
                                    "masked=True, device=cpu, dtype=float32, threads=1")
    assert rows["asv_cell"].iloc[0] == f"{name}('torch', 'batched', {points[0]!r}, 'cpu', " \
                                       "'float32', 1)"
