"""Residuals against each field: a planted trend is found in its field and nowhere else;
the load window validate warns from counts other processes only."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mhabench.analysis.prediction.residuals import RESIDUAL_FIELDS, field_residuals, field_trends


def _cells_and_errors(residual_of_p: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    rows, errors = [], []
    for backend in ("batched", "fused", "loop"):
        for i in range(30):
            heads = int(rng.choice([1, 2, 3, 4, 6, 8]))
            p = int(rng.choice([4, 8, 16, 32, 64, 128]))
            cell = {"machine": "m", "framework": "torch", "backend": backend, "device": "cpu",
                    "dtype": "float32", "config_id": f"{backend}-{i}",
                    "n": int(rng.integers(8, 999)), "m": int(rng.integers(8, 999)),
                    "d": heads * p, "heads": heads,
                    "batch": int(rng.integers(1, 9)), "kv_heads": heads, "mode": "forward"}
            rows.append(cell)
            # under-predicts narrow heads: predicted / measured - 1 = -1/p
            residual = -1.0 / p if residual_of_p else 0.02 * rng.normal()
            errors.append({**{k: cell[k] for k in ("machine", "framework", "backend",
                                                   "device", "dtype", "config_id")},
                           "heads": heads, "measured_s": 1.0, "predicted_s": 1.0 + residual})
    return pd.DataFrame(rows), pd.DataFrame(errors)


def test_a_planted_trend_in_p_is_named_and_no_other_field_is() -> None:
    cells, errors = _cells_and_errors(residual_of_p=True)
    res = field_residuals(errors, cells)
    assert len(res) == 90 and np.allclose(res["residual"], -1 / res["p"])
    trends = field_trends(res).set_index("field")
    p = trends.loc[RESIDUAL_FIELDS["p"]]
    assert p["groups with a strong trend"] == 3 and p["pooled rank correlation"] > 0.9
    assert p["verdict"].startswith("residual rises with head width p = d/h in 3/3 groups")
    for name in ("n", "m", "batch"):
        assert trends.loc[RESIDUAL_FIELDS[name], "verdict"] == "no trend in most groups"


def test_noise_alone_names_no_field() -> None:
    cells, errors = _cells_and_errors(residual_of_p=False)
    trends = field_trends(field_residuals(errors, cells))
    assert (trends["groups with a strong trend"] == 0).all()
    verdicts = trends.set_index("field")["verdict"]
    assert verdicts.pop(RESIDUAL_FIELDS["kv_ratio"]) == "too few values to judge"  # MHA only
    assert (verdicts == "no trend in most groups").all()


def test_load_window_counts_other_processes_and_steal_not_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mhabench.measure.conditions import machine_load

    clock = {"wall": 100.0, "own": 5.0, "stat": (1000.0, 10.0)}
    monkeypatch.setattr(machine_load.time, "time", lambda: clock["wall"])
    # The process family's CPU time (its own, and its compile workers', which
    # test_machine_load covers): this pytest worker's real children would leave rounding.
    monkeypatch.setattr(machine_load, "_family_cpu", lambda: clock["own"])
    monkeypatch.setattr(machine_load, "_proc_stat", lambda: clock["stat"])
    window = machine_load.Window.open()
    assert window is not None
    # 10 s later: the machine was busy 14 CPU-s, 9 of them this process's; 1 s stolen
    clock.update(wall=110.0, own=14.0, stat=(1014.0, 11.0))
    assert window.other_cores() == pytest.approx((14 - 9 + 1) / 10)
    clock.update(stat=(1009.0, 10.0))  # only this process: nobody else
    assert window.other_cores() == 0.0
    monkeypatch.setattr(machine_load, "_proc_stat", lambda: None)
    assert machine_load.Window.open() is None  # off Linux: no window, no warning
