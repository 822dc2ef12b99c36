"""The GPU peak classes (``benchmarks/bench_gpu.py``) as rates: TFLOP/s and TB/s, against
the peak this machine's calibration measured and the one its spec sheet states.

- Prefill and training cells: the FLOP model's count for the layer (projections and
  attention, ``8nd^2 + 4n^2 d`` per sequence for MHA self-attention; training 3x) over the
  step's time; a causal cell counts half the attention term, as FlashAttention does.
  Published attention sweeps (FlashAttention, cuDNN) count the attention core alone; at
  these shapes it is most of the layer's FLOPs from n = 2k on (4n^2 d against 8nd^2: n/2d
  of the projections).
- Decode cells: the bytes one step must read, the cached K/V plus the layer's weights, over
  the step's time (``mhabench.core.cost``), against the calibrated copy bandwidth and the
  spec sheet's HBM bandwidth.
- Each cell's GPU state (``mhabench.measure.conditions.gpu_state``): SM clock range, throttled or
  not; and, for the reference cell, the warm-L2 time beside the cold one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from mhabench.analysis.prediction.timemodel import WARM_SUFFIX
from mhabench.analysis.results import config_from_row, latest
from mhabench.core.config import DTYPE_BYTES
from mhabench.core.cost import cost
from mhabench.measure.conditions import gpu_state

PEAK_MODULE = "bench_gpu."
REFERENCE = "bench_gpu.L2Reference."  # the cold/warm pair, not a cell of the tables


@dataclass(frozen=True)
class SpecSheet:
    """A GPU's published dense peaks (no sparsity): FLOP/s per dtype, HBM bytes/s."""

    label: str
    flops: dict[str, float]
    hbm_bytes_s: float


# Dense figures from NVIDIA's datasheets; float32 is the non-tensor-core rate (mhabench runs
# true float32 matmuls, no TF32). Keyed by the name torch reports for the device.
SPEC_SHEETS = {
    "NVIDIA H200": SpecSheet("H200 SXM", {"bfloat16": 989e12, "float32": 67e12}, 4.8e12),
    "NVIDIA H100 80GB HBM3": SpecSheet("H100 SXM", {"bfloat16": 989e12, "float32": 67e12},
                                       3.35e12),
    "NVIDIA A100-SXM4-80GB": SpecSheet("A100 SXM 80GB", {"bfloat16": 312e12,
                                                        "float32": 19.5e12}, 2.039e12),
}


def spec_sheet(gpu: str | None) -> SpecSheet | None:
    return SPEC_SHEETS.get(gpu or "")


def _gpu_names(machines: dict[str, Any]) -> dict[str, str]:
    return {name: str(info.get("facts", {}).get("gpu") or "")
            for name, info in machines.items()}


def peak_rows(frame: pd.DataFrame, calibration: pd.DataFrame, machines: dict[str, Any],
              loads: dict[tuple[str, str, str], Any] | None) -> pd.DataFrame:
    """One row per newest cold-L2 cell of the GPU peak classes, with its rate and percents
    (NaN where no calibration or spec sheet applies) and its GPU state."""
    peak = frame["benchmark"].str.startswith(PEAK_MODULE) & (frame["kind"] == "time")
    rows = frame[peak & ~frame["benchmark"].str.endswith(WARM_SUFFIX)
                 & (frame["device"] == "cuda")]
    rows = rows[~rows["benchmark"].str.startswith(REFERENCE)
                | rows["asv_cell"].isin(_cold_twins(frame[peak]))]
    rows = latest(rows[rows["value"].notna()])
    if rows.empty:
        return pd.DataFrame()
    gpus, loads = _gpu_names(machines), loads or {}
    out = []
    for _, row in rows.iterrows():
        config = config_from_row(row)
        terms = cost(config)
        seconds = float(row["value"])
        sheet = spec_sheet(gpus.get(row["machine"]))
        cal = calibration[(calibration["machine"] == row["machine"])
                          & (calibration["framework"] == config.framework)
                          & (calibration["device"] == "cuda")
                          & (calibration["dtype"] == config.dtype)]
        matmul = cal["peak_gflops"].max() * 1e9 if len(cal) else float("nan")
        copy = cal["bandwidth_gbs"].max() * 1e9 if len(cal) else float("nan")
        load = loads.get((str(row["commit"]), str(row["env_name"]), str(row["asv_cell"])))
        state = gpu_state.combine(getattr(load, "gpu", ()))
        item = {"machine": row["machine"], "gpu": gpus.get(row["machine"], ""),
                "benchmark": row["benchmark"], "framework": config.framework,
                "backend": config.backend, "mode": config.mode, "causal": config.causal,
                "dtype": config.dtype,
                "batch": config.batch, "n": config.n, "m": config.m, "d": config.d,
                "heads": config.heads, "kv_heads": config.kv_heads,
                "head_dim": config.head_dim, "asv_cell": row["asv_cell"],
                "time_ms": seconds * 1e3, "state": state,
                "reference": row["benchmark"].startswith(REFERENCE), "warm_ms": float("nan")}
        if config.mode == "decode":
            moved = terms.kv_cache_bytes_read + terms.params * DTYPE_BYTES[config.dtype]
            rate = moved / seconds
            item.update(bytes=moved, tb_s=rate / 1e12, pct_calibrated=100 * rate / copy,
                        pct_spec=100 * rate / sheet.hbm_bytes_s if sheet else float("nan"))
        else:
            # causal: the masked half of the map is not counted (FlashAttention's convention)
            flops = terms.flops_model - (terms.flops_attention // 2 if config.causal else 0)
            rate = flops / seconds
            spec = sheet.flops.get(config.dtype) if sheet else None
            item.update(flops=flops, tflop_s=rate / 1e12,
                        pct_calibrated=100 * rate / matmul,
                        pct_spec=100 * rate / spec if spec else float("nan"))
        out.append(item)
    table = pd.DataFrame(out)
    warm = frame[peak & frame["benchmark"].str.endswith(WARM_SUFFIX)]
    warm = latest(warm[warm["value"].notna()])
    for _, row in warm.iterrows():
        match = (table["machine"] == row["machine"]) & (table["asv_cell"] == _cold(row))
        table.loc[match, "warm_ms"] = float(row["value"]) * 1e3
    return table


def _cold(row: Any) -> str:
    """The cold ``time_step`` cell of a warm-L2 timing."""
    return str(row["asv_cell"]).replace(WARM_SUFFIX + "(", ".time_step(", 1)


def _cold_twins(rows: pd.DataFrame) -> set[str]:
    return {_cold(r) for _, r in rows[rows["benchmark"].str.endswith(WARM_SUFFIX)].iterrows()}


def state_text(state: dict[str, Any] | None) -> str:
    """A cell's GPU state in a table cell: the SM clock range and any throttling."""
    if state is None:
        return "not recorded"
    if not state.get("available"):
        return f"n/a: {state.get('reason', 'not read')}"
    clocks = state.get("sm_mhz")
    text = (f"SM {clocks[0]}-{clocks[1]} of {state['max_sm_mhz']} MHz" if clocks
            else "SM clock not sampled")
    return text + (f"; THROTTLED ({', '.join(state['throttle'])})" if state["throttled"]
                   else "")
