"""What the ``track_`` benchmarks recorded beside each timed cell: the attention kernel that
ran (``track_kernel``), the step's own memory (``track_step_bytes``), compile and device
seconds, and where a cell's kernel changed between two commits (a fused cell that moves
from flash to math explains its time step)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mhabench.analysis.results import config_from_row, latest


def _track_rows(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    return frame[(frame["kind"] == "track") & frame["config_id"].notna()
                 & frame["benchmark"].str.endswith("." + method)]


def _newest_track(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    return latest(_track_rows(frame, method))


def track_values(frame: pd.DataFrame, method: str) -> pd.Series:
    """The newest value of a ``track_`` method (e.g. track_compile_seconds,
    track_device_seconds) per (machine, config_id)."""
    rows = _newest_track(frame, method)
    return rows.set_index(["machine", "config_id"])["value"].astype(float)


def kernel_name(code: float) -> str:
    """The kernel a ``track_kernel`` value names (``code 9`` for one this version lacks)."""
    from mhabench.core.kernel_codes import KERNEL_NAMES

    return KERNEL_NAMES.get(int(code), f"code {code:g}")


def kernel_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The attention kernel that ran in each fused/reference cell (newest track_kernel per
    machine and config), beside the one the config predicts and whether it writes the map.
    A fused cell that ran math is a fallback: it writes the map the call exists to avoid."""
    from mhabench.core.kernel_codes import KERNEL_NAMES, expected_kernel, materialises

    columns = ["machine", "config_id", "framework", "backend", "device", "dtype", "heads",
               "kv_heads", "head_dim", "kernel", "expected", "writes map", "note"]
    rows = _newest_track(frame, "track_kernel")
    out = []
    for row in rows.drop_duplicates(["machine", "config_id"], keep="last").to_dict("records"):
        kernel = kernel_name(row["value"])
        config = config_from_row(row)
        expected = expected_kernel(config)
        note = ""
        if kernel == "math" and config.backend == "fused":
            note = "fallback: math writes the map"
        elif kernel != expected:
            note = f"predicted {expected}"
        out.append({**{k: row[k] for k in columns[:8]}, "head_dim": config.head_dim,
                    "kernel": kernel, "expected": expected,
                    "writes map": materialises(kernel) if kernel in KERNEL_NAMES.values()
                    else None, "note": note})
    return pd.DataFrame(out, columns=columns)


def kernels_by_commit(frame: pd.DataFrame) -> dict[tuple[str, str, str, str], str]:
    """The kernel each cell recorded at each commit: (machine, env_name, config_id,
    commit) -> kernel name."""
    rows = _track_rows(frame, "track_kernel")
    return {(r["machine"], r["env_name"], r["config_id"], r["commit"]): kernel_name(r["value"])
            for r in rows.to_dict("records")}


def kernel_changes(frame: pd.DataFrame, commits: Sequence[str]) -> pd.DataFrame:
    """Every cell whose recorded kernel differs between two consecutive commits (in
    ``commits``' order) it was measured at, per machine and environment, with its time
    (the newest ``time_`` value of the same config) at both: ``kernels`` reads
    "flash → math"."""
    columns = ["machine", "env_name", "config_id", "before", "after", "kernels",
               "time before (s)", "time after (s)"]
    position = {c: i for i, c in enumerate(commits)}
    cells: dict[tuple[str, str, str], list[tuple[int, str, str]]] = {}
    for (machine, env, config_id, commit), kernel in kernels_by_commit(frame).items():
        if commit in position:
            cells.setdefault((machine, env, config_id), []).append(
                (position[commit], commit, kernel))
    timed = frame[(frame["kind"] == "time") & frame["config_id"].notna()]
    times = timed.set_index(["machine", "env_name", "config_id", "commit"])["value"]
    times = times[~times.index.duplicated(keep="last")]
    out = []
    for (machine, env, config_id), seen in sorted(cells.items()):
        seen.sort()
        for (_, before, k0), (_, after, k1) in zip(seen, seen[1:], strict=False):
            if k0 != k1:
                out.append({"machine": machine, "env_name": env, "config_id": config_id,
                            "before": before, "after": after, "kernels": f"{k0} → {k1}",
                            "time before (s)": times.get((machine, env, config_id, before)),
                            "time after (s)": times.get((machine, env, config_id, after))})
    return pd.DataFrame(out, columns=columns)


def step_memory_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Each cell's measured step memory (newest track_step_bytes) beside the cost model's
    working set and attention map for the kernel that ran (recorded, else predicted)."""
    from mhabench.core.cost import cost
    from mhabench.core.kernel_codes import expected_kernel

    columns = ["machine", "config_id", "framework", "backend", "device", "dtype", "mode",
               "batch", "n", "m", "d", "heads", "kv_heads", "kernel", "map elements",
               "model map (MiB)", "model working set (MiB)", "measured (MiB)",
               "measured/model"]
    rows = _newest_track(frame, "track_step_bytes")
    ran = kernel_table(frame).set_index(["machine", "config_id"])["kernel"].to_dict()
    out = []
    for row in rows.drop_duplicates(["machine", "config_id"], keep="last").to_dict("records"):
        config = config_from_row(row)
        kernel = ran.get((row["machine"], row["config_id"]))
        terms = cost(config, kernel)
        model = terms.peak_bytes_estimate / 2**20
        measured = float(row["value"]) / 2**20
        out.append({**{k: row[k] for k in columns[:13]},
                    "kernel": kernel or f"{expected_kernel(config)} (predicted)",
                    "map elements": terms.attention_map_elements,
                    "model map (MiB)": terms.attention_map_bytes / 2**20,
                    "model working set (MiB)": model, "measured (MiB)": measured,
                    "measured/model": measured / model if model else float("nan")})
    return pd.DataFrame(out, columns=columns)
