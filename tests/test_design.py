"""The calibration design: seeded, space-filling inside its box, valid configs under the
FLOP cap, and asv classes whose parameters name the config they time. Nothing is timed."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_asv_suite import run_python

from mhabench.core.config import AttentionConfig
from mhabench.core.cost import TRAIN_FACTOR, block_mask_elements, cost
from mhabench.core.design import (
    AXES,
    DECODE_BOX,
    QUICK_BOX,
    SEED,
    TINY_BOX,
    TINY_DECODE_BOX,
    TINY_TRAIN_BOX,
    TRAIN_BOX,
    Box,
    _kv_heads,
    calibration_design,
    design_points,
    point_fields,
)
from mhabench.measure import interleaved


def test_design_is_deterministic_and_the_seed_matters() -> None:
    assert calibration_design(8) == calibration_design(8)
    assert calibration_design(8, seed=1) != calibration_design(8)


@pytest.mark.parametrize("box, size", [(QUICK_BOX, 8), (QUICK_BOX, 32), (TINY_BOX, 2)])
def test_every_point_is_a_valid_config_inside_the_box_and_under_the_cap(box: Box,
                                                                        size: int) -> None:
    points = calibration_design(size, box=box)
    assert 0 < len(points) <= size
    for fields in points:
        config = AttentionConfig(**fields)  # valid: h divides d, h_kv divides h
        factor = TRAIN_FACTOR if config.mode == "train" else 1
        assert cost(config).flops_model * factor <= box.max_gflop * 1e9
        assert box.p[0] <= config.head_dim <= box.p[1]
        assert box.heads[0] <= config.heads <= box.heads[1]
        assert config.n <= box.n[1] and config.m <= box.m[1] and config.batch <= box.batch[1]
        assert config.n == 1 if config.mode == "decode" else config.n >= 1


def test_the_quick_design_varies_what_the_sweeps_hold_fixed() -> None:
    points = [AttentionConfig(**f) for f in calibration_design(8)]
    assert len({c.mode for c in points}) == 3  # forward, train and decode
    assert any(c.cross for c in points) and any(c.masked for c in points)
    assert any(1 < c.kv_heads < c.heads for c in points) and any(
        c.kv_heads == 1 < c.heads for c in points)
    assert any(c.heads & (c.heads - 1) for c in points)  # h off the powers of two
    widths = [c.head_dim for c in points]
    assert min(widths) <= 16 and max(widths) >= 64  # narrow and wide heads


def test_each_axis_has_one_point_per_stratum_and_larger_designs_keep_the_first() -> None:
    # A Sobol prefix of 2^k points puts one coordinate in each 1/2^k of every axis.
    for size in (8, 32):
        strata = np.floor(design_points(size) * size).astype(int)
        assert all(sorted(strata[:, j]) == list(range(size)) for j in range(len(AXES)))
    assert calibration_design(32)[:8] == calibration_design(8)  # benchmark ids stay
    with pytest.raises(ValueError, match="power of two"):
        calibration_design(12)
    # a block of 8 starting at a multiple of 8 (a later design's) is balanced too, and new
    later = design_points(64)[32:40]
    strata = np.floor(later * 8).astype(int)
    assert all(sorted(strata[:, j]) == list(range(8)) for j in range(len(AXES)))
    assert calibration_design(8, start=32) == [point_fields(u) for u in later]
    assert not set(map(str, calibration_design(8, start=32))) & set(map(
        str, calibration_design(32)))
    with pytest.raises(ValueError, match="multiple of size"):
        calibration_design(8, start=4)
    # the point's n is the log-uniform level of its coordinate (when no cap shrank it)
    u = design_points(8)[0]
    fields = point_fields(u, Box(max_gflop=1e9))
    if fields["mode"] != "decode":
        lo, hi = QUICK_BOX.n
        assert fields["n"] == round(math.exp(math.log(lo) + u[0] * math.log(hi / lo)))


def test_the_stored_points_are_scipys_sobol_and_spare_the_import() -> None:
    """mhabench.core.design_sobol holds scipy's scrambled Sobol points of the fixed seed (the
    grids' designs read them): the same numbers, and a fresh process that builds the quick
    design imports no scipy.stats (asv imports bench_design in every process it starts)."""
    from scipy.stats import qmc

    sampler = qmc.Sobol(d=len(AXES), scramble=True, rng=np.random.default_rng(SEED))
    assert np.array_equal(design_points(64), sampler.random_base2(6))
    assert not np.array_equal(design_points(32, seed=SEED + 1), design_points(32))
    done = run_python("""
    import sys
    from mhabench.core.design import calibration_design
    calibration_design(32)
    print("scipy.stats" in sys.modules)
    """, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False"


def test_kv_heads_rule_mha_gqa_mqa() -> None:
    assert _kv_heads(0.1, 12) == 12
    assert _kv_heads(0.9, 12) == 1
    assert 1 < _kv_heads(0.6, 12) < 12 and 12 % _kv_heads(0.6, 12) == 0
    assert _kv_heads(0.6, 7) == 7  # a prime has no middle divisor: MHA


def test_design_classes_name_the_config_they_time() -> None:
    """One class per design, its points as one parameter (a dict of config fields), so a
    cell's parameters still name its config; the quick grid's budget in which backends
    each point times."""
    code = """
    import itertools, json
    from benchmarks import bench_design
    from mhabench.bench.cells import config_of
    from mhabench.bench.methods import AttentionBenchmark
    # asv times every class the module's namespace holds, under every name it is bound to
    timed = {n: v for n, v in vars(bench_design).items()
             if isinstance(v, type) and issubclass(v, AttentionBenchmark)
             and v is not AttentionBenchmark}
    assert len(set(timed.values())) == len(timed), timed  # no class under a second name
    out = []
    for name, cls in timed.items():
        skipped = set(cls.skip_params)
        cells = list(itertools.product(*cls.params))
        points = cls.params[cls.param_names.index("point")]
        per_point = [sorted({c[1] for c in cells if c[2] == p and c not in skipped})
                     for p in points]
        first = [next(c for c in cells if c[2] == p) for p in points]
        out.append([name, cls.param_names, [dict(p) for p in points],
                    [config_of(cls.param_names, c).to_dict() for c in first],
                    cls.params[1], [m for m in ("track_kernel", "track_step_bytes",
                                                "track_step_rss_bytes") if hasattr(cls, m)],
                    per_point])
    print(json.dumps(out))
    """
    # the decode design: balanced Sobol blocks of (size, start) per grid
    decode_blocks = {"tiny": [(2, 2)], "quick": [(16, 16), (16, 48)],
                     "full": [(16, 48), (16, 64)]}
    for grid, size, train in (("tiny", 2, 2), ("quick", 16, 8), ("full", 32, 16)):
        done = run_python(code, {"MHABENCH_GRID": grid})
        assert done.returncode == 0, done.stderr
        classes = {c[0]: c[1:] for c in json.loads(done.stdout.splitlines()[-1])}
        assert sorted(classes) == ["Design", "DesignDecode", "DesignTrain"]
        tiny = grid == "tiny"
        expected = {
            "Design": calibration_design(size, box=TINY_BOX if tiny else QUICK_BOX),
            "DesignDecode": [p for block, start in decode_blocks[grid]
                             for p in calibration_design(block, start=start, box=(
                                 TINY_DECODE_BOX if tiny else DECODE_BOX))],
            "DesignTrain": calibration_design(train, box=TINY_TRAIN_BOX if tiny else TRAIN_BOX,
                                              start=4 if tiny else 32)}
        assert {name: c[1] for name, c in classes.items()} == expected
        assert {p["mode"] for p in expected["DesignDecode"]} == {"decode"}
        # cached KV and cached source alike
        assert {p["cross"] for p in expected["DesignDecode"]} == {True, False}
        assert {p["mode"] for p in expected["DesignTrain"]} == {"train"}
        # no config is timed by two designs (a general point of decode or training mode at
        # another design's Sobol point would be that point)
        shapes = [tuple(sorted(p.items())) for points in expected.values() for p in points]
        assert len(set(shapes)) == len(shapes), grid
        # torch.compile and FlexAttention (compiling each cell) through the first 8 general
        # and 4 decode points of the quick grid, and the first masked decode point;
        # FlexAttention has no CPU backward
        compiling = {(name, i): {"compiled", "flex"} & set(timed)
                     for name, c in classes.items() for i, timed in enumerate(c[5])}
        if grid == "quick":
            masked = [i for i, p in enumerate(expected["DesignDecode"]) if p["masked"]]
            assert masked[0] >= 4  # else the first 4 would hold it already
            # ... and FlexAttention alone at one more masked point of the general and decode
            # designs, whose block mask (b x n x m padded to 128) holds at least 2^17 elements
            flex_only = {k for k, c in compiling.items() if c == {"flex"}}
            assert {k for k, c in compiling.items() if c} - flex_only == {
                *(("Design", i) for i in range(8)), *(("DesignDecode", i) for i in range(4)),
                ("DesignDecode", masked[0])}
            assert sorted(name for name, _ in flex_only) == ["Design", "DesignDecode"]
            for name, index in flex_only:
                point = expected[name][index]
                config = AttentionConfig(framework="torch", backend="flex", **point)
                assert point["masked"] and block_mask_elements(config) >= 2**17, name
                assert index >= (8 if name == "Design" else masked[0] + 1), name
        if grid == "full":
            # every point (FlexAttention's training steps on CUDA)
            assert all(c == {"compiled", "flex"} for c in compiling.values()), compiling
        for names, points, configs, backends, tracks, per_point in classes.values():
            assert names == ["framework", "backend", "point", "device", "dtype", "threads"]
            for point, config in zip(points, configs, strict=True):
                assert {k: config[k] for k in point} == point  # the parameter is the point
            assert tracks == [], (grid, tracks)  # time only: no kernel or memory process
            # only the backends some framework times somewhere: a skipped cell costs a fork
            assert sorted(backends) == sorted({b for timed in per_point for b in timed})
            assert set(backends) <= ({"batched", "fused"} if tiny else {
                "loop", "batched", "fused", "reference", "compiled", "flex", "blockwise"})


def test_interleaved_timing_visits_configs_round_robin(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    calls: list[str] = []
    configs = [AttentionConfig(heads=h) for h in (1, 2, 4)]

    def prepare(config: AttentionConfig, warmup: int) -> object:
        if config.heads == 4:
            raise ValueError("not here")
        return lambda: calls.append(f"h{config.heads}")

    monkeypatch.setattr(interleaved, "prepare", prepare)
    monkeypatch.setattr(interleaved, "configure_process", lambda threads: 1)
    skipped = []
    out = interleaved.measure_interleaved(configs, rounds=3, repeats=2, warmup=1,
                                          on_error=lambda c, e: skipped.append(c), warmup_s=0)
    assert skipped == [configs[2]] and set(out) == set(configs[:2])
    assert calls == ["h1"] * 3 + ["h2"] * 3 + ["h1"] * 3 + ["h2"] * 3 + ["h1"] * 3 + ["h2"] * 3
    assert all(m.repeats == 6 for m in out.values())  # 3 rounds x 2 timed calls
    with pytest.raises(ValueError, match="not here"):
        interleaved.measure_interleaved(configs, rounds=1)
    # By default a visit's warm calls go on until they took WARMUP_S (a sub-millisecond
    # step read up to 2x after one warm call); warmup=0 makes none.
    # The visit's clock is a fake one each call moves by 1 ms: a real sleep(0.001) took
    # 2 ms on a busy CI-clone run and the visit then made fewer calls than the bound.
    calls.clear()
    clock = [0.0]
    monkeypatch.setattr(interleaved, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def step(config: AttentionConfig) -> None:
        calls.append(config.heads)
        clock[0] += 0.001

    monkeypatch.setattr(interleaved, "prepare", lambda config, warmup: lambda: step(config))
    interleaved.measure_interleaved(configs[:1], rounds=2, repeats=1, warmup=1)
    visit = interleaved.WARMUP_S / 0.001
    assert 2 * (visit / 2 + 1) <= len(calls) <= 2 * (visit + 2)  # 2 visits, ~20 warm calls
    calls.clear()
    interleaved.measure_interleaved(configs[:1], rounds=2, repeats=1, warmup=0)
    assert len(calls) == 2  # the timed calls only
