"""Profiler traces and their offline region breakdown: layout, shares, the softmax-heavy
ranking, fused groups from the HLO metadata, no overwriting, and CLI errors."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mhabench.cli import main
from mhabench.core.config import AttentionConfig, preset
from mhabench.measure.profiler.profiling import (
    breakdown_table,
    profile_config,
    profile_configs,
    run_dir,
)
from mhabench.measure.profiler.trace_breakdown import COLUMNS, META_FILE, OTHER, hlo_op_regions

# Softmax-heavy: large n, small d, so the n x m map outweighs the projections.
CONFIGS = preset("softmax-heavy", "torch") + preset("softmax-heavy", "jax")


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[Path, str]:
    logdir = tmp_path_factory.mktemp("traces")
    progress = io.StringIO()
    profile_configs(CONFIGS, logdir, steps=2, progress=progress)
    return logdir, progress.getvalue()


@pytest.fixture(scope="module")
def table(traced) -> pd.DataFrame:
    return breakdown_table(traced[0])


def regions_of(group: str) -> set[str]:
    return set(group.split("+"))


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_layout_is_what_both_tensorboard_plugins_scan(traced):
    logdir, progress = traced
    for config in CONFIGS:
        folder = run_dir(config, logdir)
        if config.framework == "torch":  # torch-tb-profiler: a folder with *.pt.trace.json
            assert folder == logdir / config.id
            assert len(list(folder.glob("*.pt.trace.json"))) == 1
        else:  # xprof: <tb run>/plugins/profile/<run>/*.xplane.pb
            assert folder == logdir / "plugins" / "profile" / config.id
            assert len(list(folder.glob("*.xplane.pb"))) == 1
            assert (folder / "jit_forward.hlo.txt").read_text().startswith("HloModule jit_forward")
        meta = json.loads((folder / META_FILE).read_text())
        assert AttentionConfig.from_dict(meta["config"]) == config
    # one progress line per config, in order
    lines = progress.strip().splitlines()
    assert [line.split()[0] for line in lines] == [f"[{i}/4]" for i in range(1, 5)]
    assert all(c.id in line for c, line in zip(CONFIGS, lines, strict=True))


def test_table_schema_and_shares_sum_to_one(table):
    assert list(table.columns) == COLUMNS
    assert set(table["config_id"]) == {c.id for c in CONFIGS}
    assert (table["time_s"] >= 0).all() and (table["share"] >= 0).all()
    sums = table.groupby("config_id")["share"].sum()
    assert sums.to_numpy() == pytest.approx(1.0, abs=1e-9)
    by_id = {c.id: c for c in CONFIGS}
    for _, row in table.iterrows():  # config columns come from the saved config
        assert row["heads"] == by_id[row["config_id"]].heads
        assert row["n"] == by_id[row["config_id"]].n
        assert row["fused_group"] in ("", row["region"])
        assert ("+" in row["region"]) == bool(row["fused_group"])


# Shares of profiled time: with other tests on the cores, the unlabelled dispatch between
# regions grows (0.73 of a batched step labelled, under make test's three workers, against
# > 0.8 alone): a timing test, run where nothing else does.
@pytest.mark.timing
def test_labelled_regions_cover_most_of_the_step(table):
    for config_id, rows in table.groupby("config_id"):
        labelled = rows.loc[rows["region"] != OTHER, "share"].sum()
        assert labelled > 0.8, (config_id, labelled)


# Profiled times again: under make test's three workers a torch batched step at d = 16 once
# read 2.2 ms of projections against 1.1 ms of softmax (alone, softmax leads): phase 2.
@pytest.mark.timing
def test_softmax_outweighs_projections_when_softmax_heavy(table):
    for config_id, rows in table.groupby("config_id"):
        groups = [regions_of(r) for r in rows["region"]]
        with_softmax = rows.loc[["softmax" in g for g in groups], "time_s"].sum()
        projections_only = rows.loc[["projections" in g and "softmax" not in g
                                     for g in groups], "time_s"].sum()
        assert projections_only > 0, config_id  # the projections were traced at all
        assert with_softmax > projections_only, (config_id, with_softmax, projections_only)
        if config_id.startswith("torch"):  # no fusion in eager torch: each region alone
            assert set(rows["fused_group"]) == {""}
            share = rows.set_index("region")["share"]
            assert share["softmax"] > share["projections"]


def test_breakdown_is_offline_from_the_files_alone(traced, table, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(traced[0]), str(copy)], check=True)
    # A fresh interpreter that cannot import torch or jax reads the copied files.
    code = ("import sys; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
            "from mhabench.measure.profiler.profiling import breakdown_table\n"
            f"print(breakdown_table({str(copy)!r}).to_json(orient='records'))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    again = pd.DataFrame(json.loads(out))
    pd.testing.assert_frame_equal(again[COLUMNS], table, check_dtype=False)


# "$" abbreviates the metadata prefix to keep the lines short.
HLO = """HloModule jit_forward, is_scheduled=true

%fused_softmax (param_0: f32[4,8,8]) -> f32[4,8] {
  %param_0 = f32[4,8,8]{2,1,0} parameter(0)
  %multiply.1 = f32[4,8,8]{2,1,0} multiply(%param_0, %param_0), $scores/div"}
  ROOT %reduce_max.0 = f32[4,8]{1,0} reduce(%multiply.1), to_apply=%max, $softmax/reduce_max"}
}

%max (a: f32[], b: f32[]) -> f32[] {
  ROOT %maximum = f32[] maximum(%a, %b), $softmax/reduce_max"}
}

%fused_dot (param_0.1: f32[32,8], param_1.1: f32[8,8]) -> f32[32,8] {
  ROOT %dot.1 = f32[32,8]{1,0} dot(%param_0.1, %param_1.1), $projections/dot_general"}
}

ENTRY %main.1 (x: f32[32,8], w: f32[8,8]) -> f32[4,8] {
  %x = f32[32,8]{1,0} parameter(0), metadata={op_name="x"}
  %ynn_fusion = f32[32,8]{1,0} fusion(%x, %w), calls=%fused_dot, $projections/dot_general"}
  %copy.1 = f32[4,8,8]{2,1,0} copy(%ynn_fusion), $transpose"}
  ROOT %reduce_fusion = f32[4,8]{1,0} fusion(%copy.1), calls=%fused_softmax, $softmax/reduce_max"}
}
""".replace("$", 'metadata={op_name="jit(forward)/')


def test_hlo_ops_map_to_every_scope_fused_into_them():
    ops = hlo_op_regions(HLO, ["projections", "scores", "softmax", "mixing", "output"])
    # The fusion's own metadata says softmax only; its fused multiply is the scores scaling.
    assert ops["reduce_fusion"] == {"scores", "softmax"}
    assert ops["ynn_fusion"] == {"projections"}
    assert ops["copy.1"] == frozenset()  # outside every region: counted as other
    assert ops["x"] == frozenset()


def test_existing_trace_folders_are_never_overwritten(traced):
    logdir = traced[0]
    before = snapshot(logdir)
    with pytest.raises(FileExistsError, match="never overwritten"):
        profile_configs(CONFIGS[:1], logdir, progress=None)
    with pytest.raises(FileExistsError):
        profile_config(CONFIGS[-1], logdir)
    assert main(["profile", "--preset", "softmax-heavy", "--logdir", str(logdir)]) == 2
    assert snapshot(logdir) == before


def test_cli_profiles_both_frameworks_by_default_and_summarises(tmp_path, capsys):
    logdir = tmp_path / "tiny"
    assert main(["profile", "--preset", "tiny", "--logdir", str(logdir), "--steps", "1"]) == 0
    out, err = capsys.readouterr()
    tiny = preset("tiny", "torch") + preset("tiny", "jax")
    assert out.split()[:4] == [str(run_dir(c, logdir)) for c in tiny]
    assert "[4/4]" in err and f"tensorboard --logdir {logdir}" in err

    assert main(["profile", "--summary", str(logdir)]) == 0
    text = capsys.readouterr().out
    header = text.splitlines()[0].split()
    assert header[:3] == ["config", "step", "ms"]
    assert "projections" in header and header[-1] == OTHER
    assert sorted(line.split()[0] for line in text.splitlines()[1:5]) == sorted(c.id for c in tiny)

    assert main(["profile", "--summary", str(logdir), "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["profile", "--summary", str(logdir), "--csv"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out), keep_default_na=False)
    assert list(csv.columns) == COLUMNS and len(csv) == len(records)
    assert {r["config_id"] for r in records} == {c.id for c in tiny}


@pytest.mark.parametrize("argv, names", [
    (["--preset", "nope", "--logdir", "{tmp}/x"], "'nope'"),
    (["--framework", "tf", "--logdir", "{tmp}/x"], "'tf'"),
    (["--logdir", "{tmp}/a-file/x"], "a-file/x"),  # under a regular file: not writable
    (["--summary", "{tmp}/empty"], "empty"),
    (["--summary", "{tmp}/missing"], "missing"),
    (["--steps", "0", "--logdir", "{tmp}/x"], "steps=0"),
    ([], "--logdir"),
])
def test_bad_input_is_one_line_naming_the_value(argv, names, tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "empty").mkdir()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["profile", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhabench profile: error:")
    assert names in err[0]
    assert not (tmp_path / "x").exists()  # nothing written on a refusal
