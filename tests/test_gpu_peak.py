"""GPU peak rates: TFLOP/s and TB/s against the H200 run's real calibration and the spec
sheet, the warm-L2 pairing, and the throttle verdict of a watch.

The peak cells' rows are made here (a GPU run of bench_gpu has not been imported yet); the
rates are checked against the shape's FLOP and byte counts worked out by hand, not against
mhabench's cost model that computes them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from mhabench.analysis.gpu_peak import peak_rows, state_text
from mhabench.analysis.prediction.timemodel import timing_cells
from mhabench.analysis.results import calibration_table, load_results
from mhabench.measure.conditions import gpu_state
from mhabench.measure.conditions.machine_load import CellLoad
from mhabench.report.context import Context
from mhabench.report.sections.gpu import gpu_section

GPU_RESULTS = Path(__file__).parent / "fixtures" / "gpu_results"


def _cell(template: pd.Series, method: str, values: dict, seconds: float,
          cls: str = "") -> pd.Series:
    row = template.copy()
    cls = cls or ("PeakDecode" if values["mode"] == "decode" else
                  "PeakCausal" if values.get("causal") else "PeakPrefill")
    row["benchmark"] = f"bench_gpu.{cls}.{method}"
    args = ", ".join(repr(v) for v in values.values())
    row["asv_cell"] = f"bench_gpu.{cls}.{method}({args})"
    row["cell"] = ", ".join(f"{k}={v}" for k, v in values.items())
    for key, value in values.items():
        row[key] = value
    row.update({"value": seconds, "m": values.get("m", values["n"]), "cross": False,
                "causal": values.get("causal", False),
                "masked": False, "dropout": 0.0,
                "config_id": f"{values['mode']}-{values['n']}-{values.get('causal')}"})
    return row


PREFILL = {"framework": "torch", "backend": "fused_flash", "mode": "forward", "batch": 8,
           "n": 2048, "d": 2048, "heads": 16, "kv_heads": 16, "device": "cuda",
           "dtype": "bfloat16"}
DECODE = {"framework": "torch", "backend": "fused", "mode": "decode", "batch": 1, "n": 1,
          "m": 2048, "d": 4096, "heads": 32, "kv_heads": 8, "device": "cuda",
          "dtype": "bfloat16"}


def _state(**changes) -> dict:
    state = {"available": True, "sm_mhz": [1980, 1980], "max_sm_mhz": 1980,
             "temperature_c": [40, 41], "power_w": [120.0, 300.0], "throttled": False,
             "throttle": [], "locked": False, "lock_note": gpu_state.LOCK_NOTE}
    return {**state, **changes}


@pytest.fixture(scope="module")
def frame_and_results():
    results = load_results(GPU_RESULTS)
    frame = results.frame
    template = frame[frame["benchmark"].str.contains("MhaGqaMqa.time_step")].iloc[0]
    rows = [_cell(template, "time_step", PREFILL, 0.010),
            _cell(template, "time_step", {**PREFILL, "causal": True}, 0.008),
            _cell(template, "time_step", DECODE, 100e-6),
            _cell(template, "time_step", DECODE, 110e-6, "L2Reference"),
            _cell(template, "time_step_warm", DECODE, 80e-6, "L2Reference")]
    results.frame = pd.concat([frame, pd.DataFrame(rows)], ignore_index=True)
    return results, rows


def test_rates_and_percents_match_the_shapes_counts(frame_and_results):
    results, rows = frame_and_results
    cal = calibration_table(results.frame)
    loads = {(str(rows[0]["commit"]), str(rows[0]["env_name"]), rows[0]["asv_cell"]):
             CellLoad(0.0, 0.0, None, 1, gpu=(_state(), _state(sm_mhz=[1755, 1980],
                                                           throttled=True,
                                                           throttle=["sw_power_cap"])))}
    found = peak_rows(results.frame, cal, results.machines, loads)
    reference = found[found["reference"]]
    assert reference["time_ms"].tolist() == [pytest.approx(0.110)]
    assert reference["warm_ms"].tolist() == [pytest.approx(0.080)]  # paired by its cell
    causal = found[found["causal"]]
    table = found[~found["reference"] & ~found["causal"]].set_index("mode")
    # forward: per sequence 4 projections of n x d x d (2 FLOPs each) + QK^T and AV
    b, n, d = 8, 2048, 2048
    flops = b * (4 * 2 * n * d * d + 2 * 2 * n * n * d)
    prefill = table.loc["forward"]
    assert prefill["tflop_s"] == pytest.approx(flops / 0.010 / 1e12)
    # causal: half of QK^T and AV counted, as FlashAttention's figures count it
    half = b * (4 * 2 * n * d * d + 2 * n * n * d)
    assert causal["tflop_s"].tolist() == [pytest.approx(half / 0.008 / 1e12)]
    torch_bf16 = cal[(cal["framework"] == "torch") & (cal["dtype"] == "bfloat16")]
    peak = torch_bf16["peak_gflops"].item() * 1e9  # the H200 run's own 8192 matmul
    assert prefill["pct_calibrated"] == pytest.approx(100 * flops / 0.010 / peak)
    assert prefill["pct_spec"] == pytest.approx(100 * flops / 0.010 / 989e12)
    # its two processes: one ran at full clock, one under the power cap
    assert prefill["state"]["sm_mhz"] == [1755, 1980]
    assert "THROTTLED (sw_power_cap)" in state_text(prefill["state"])
    # decode: K/V of 8 heads x 128 wide over m + 1 = 2049 positions, 2 bytes, plus the
    # weights W_q, W_o (d x d) and W_k, W_v (d x 1024)
    kv = 2 * 2049 * 8 * 128 * 2
    weights = (2 * 4096 * 4096 + 2 * 4096 * 1024) * 2
    decode = table.loc["decode"]
    assert decode["tb_s"] == pytest.approx((kv + weights) / 100e-6 / 1e12)
    assert decode["pct_spec"] == pytest.approx(100 * (kv + weights) / 100e-6 / 4.8e12)
    assert pd.isna(decode["warm_ms"])  # timed cold only
    assert decode["state"] is None and state_text(None) == "not recorded"


def test_warm_timings_stay_out_of_the_time_models_cells(frame_and_results):
    results, _ = frame_and_results
    cells = timing_cells(results.frame)
    decode = cells[(cells["mode"] == "decode") & (cells["d"] == 4096)]
    # the cold times (two classes time it), not a median with the warm 80 us
    assert decode["value"].tolist() == [pytest.approx(105e-6)]
    # the causal cell is not fitted (no feature for its skipped half); its twin is
    forward = cells[(cells["mode"] == "forward") & (cells["d"] == 2048) & (cells["n"] == 2048)]
    assert forward["causal"].tolist() == [False]


def test_section_marks_throttling_and_names_the_spec_sheet(frame_and_results):
    results, rows = frame_and_results
    load = CellLoad(0.0, 0.0, None, 1, gpu=(_state(throttled=True,
                                                    throttle=["hw_thermal"]),))
    ctx = Context(results, pd.DataFrame(), calibration_table(results.frame), {}, None, 1.1,
                  loads={(str(rows[0]["commit"]), str(rows[0]["env_name"]),
                          rows[0]["asv_cell"]): load})
    section = gpu_section(ctx)
    assert section.absent is None
    text = " ".join(section.text)
    assert "spec sheet H200 SXM" in text and "1 of 1 cells ran throttled" in text
    assert "0.110 ms cold, 0.080 ms warm (1.38x)" in text
    prefill = next(t for t in section.tables if t.name == "gpu-prefill").frame
    # the throttled cell is marked; the causal one has no record: not recorded, not "ok"
    assert prefill.set_index("causal")["GPU state"].to_dict() == {
        False: "SM 1980-1980 of 1980 MHz; THROTTLED (hw_thermal)", True: "not recorded"}
    empty = Context(SimpleNamespace(frame=results.frame.iloc[:0], machines={}),
                    pd.DataFrame(), calibration_table(results.frame), {}, None, 1.1)
    assert "scripts/gpu-grid" in gpu_section(empty).absent


class _FakeNvml:
    """The few NVML calls a watch makes, answering from a script of readings (the real
    library runs in test_gpu_state's CUDA tests)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 2, 0
    NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL = 0, 1

    class NVMLError(Exception):
        pass

    def __init__(self, clocks, reasons, thermal_ns):
        self.clocks, self.reasons, self.thermal_ns = list(clocks), list(reasons), thermal_ns

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self.clocks.pop(0) if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetPowerUsage(self, h):
        return 350_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetTemperature(self, h, kind):
        return 45

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return 1000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.reasons.pop(0)

    def nvmlDeviceGetViolationStatus(self, h, policy):
        ns = self.thermal_ns.pop(0) if policy == self.NVML_PERF_POLICY_THERMAL else 0
        return SimpleNamespace(violationTime=ns)


@pytest.mark.parametrize(("reasons", "thermal_ns", "throttle"), [
    ([0x1, 0x1, 0x1, 0x1], [5, 5], []),  # idle between samples only: not a slowdown
    ([0x1, 0x4, 0x1, 0x1], [5, 5], ["sw_power_cap"]),  # the power cap before a sample
    ([0x0, 0x0, 0x0, 0x0], [5, 900], ["thermal_violation"]),  # thermal time grew
])
def test_watch_calls_a_cell_throttled_from_reasons_or_violation_time(
        monkeypatch, reasons, thermal_ns, throttle):
    fake = _FakeNvml([1980, 1980, 1755, 1980], reasons, thermal_ns)
    monkeypatch.setattr(gpu_state, "_nvml", fake)
    watch = gpu_state.Watch("handle", gpu_state.snapshot("handle"))
    watch.sample()
    watch.sample()
    state = watch.summary()
    assert state["throttle"] == throttle and state["throttled"] == bool(throttle)
    assert state["sm_mhz"] == [1755, 1980] and state["samples"] == 2
    assert state["locked"] is False and "never sets them" in state["lock_note"]


def test_the_finding_quotes_the_best_kernel_at_the_longest_sequence(frame_and_results):
    from mhabench.report.findings import gpu_peak

    results, rows = frame_and_results
    ctx = Context(results, pd.DataFrame(), calibration_table(results.frame), {}, None, 1.1)
    section = gpu_section(ctx)
    section.id = "gpu-peak"
    text = gpu_peak(ctx, {"gpu-peak": section}, "h200")
    # forward MHA non-causal: the one prefill cell (n = 2048, 10 ms); decode: its one cell
    flops = 8 * (4 * 2 * 2048 * 2048 * 2048 + 2 * 2 * 2048 * 2048 * 2048)
    assert f"torch/fused_flash {flops / 0.010 / 1e12:.0f} TFLOP/s" in text
    assert f"{100 * flops / 0.010 / 989e12:.0f} % of spec" in text
    assert "decode: best torch/fused" in text and "batch 1, KV 2048" in text
    assert gpu_peak(ctx, {}, "h200") is None  # no section: not measured
