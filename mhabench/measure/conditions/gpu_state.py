"""The GPU's state while a cell was timed: clocks, power, temperature and throttling (NVML).

A GPU that throttles (power cap, thermal slowdown) runs the same kernels slower, and a
percent-of-peak figure means little without the clock it ran at. So a CUDA timing process
of the asv suite opens a :class:`Watch` before its first sample, reads the SM clock and the
clock-event (throttle) reasons before every sample (two NVML queries, microseconds, outside
the timed call), and closes it after the last: :meth:`Watch.summary` goes into the cell's
record beside its load (:mod:`mhabench.measure.conditions.machine_load`).

Clocks are verified and recorded, never changed: locking them needs root and changes a
machine shared with others, so ``locked`` is always False and ``lock_note`` says why. A
cell counts as throttled when a power or thermal reason was set before any sample or
NVML's power/thermal violation counters grew during the samples.

Without nvidia-ml-py, an NVIDIA driver or a GPU, :func:`open_watch` returns None and
:func:`unavailable_reason` says why; the report then shows the fields as n/a with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# NVML's clock-event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*). GPU idle,
# the application-clock setting, sync boost and the display clock are not slowdowns.
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
                    0x40: "hw_thermal", 0x80: "hw_power_brake"}
OTHER_REASONS = {0x1: "gpu_idle", 0x2: "app_clocks_setting", 0x10: "sync_boost",
                 0x100: "display_clock"}
LOCK_NOTE = ("not locked: mhabench verifies and records clocks but never sets them "
             "(a shared or lent machine's settings stay as they are)")

_nvml: Any = None  # the pynvml module once nvmlInit succeeded in this process
_reason: str | None = None  # why NVML is unavailable, once tried


def _init() -> Any:
    """pynvml, initialised once per process; None (with :data:`_reason`) if unavailable."""
    global _nvml, _reason
    if _nvml is not None or _reason is not None:
        return _nvml
    try:
        import pynvml
    except ImportError:
        _reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            _reason = "NVML found no GPU"
            return None
    except pynvml.NVMLError as err:
        _reason = f"NVML did not start: {err} (no NVIDIA driver or GPU here)"
        return None
    _nvml = pynvml
    return _nvml


def unavailable_reason() -> str | None:
    """Why GPU state cannot be read here, or None when it can."""
    _init()
    return _reason


def device_index() -> int:
    """NVML's index of the GPU this process uses: the first of CUDA_VISIBLE_DEVICES when it
    names one by number, else 0 (NVML ignores CUDA_VISIBLE_DEVICES)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _reasons(mask: int) -> list[str]:
    return [name for bit, name in {**THROTTLE_REASONS, **OTHER_REASONS}.items() if mask & bit]


def _optional(read: Any, *args: Any) -> Any:
    """A reading some GPUs do not support (application clocks, energy): None there."""
    try:
        return read(*args)
    except _nvml.NVMLError:
        return None


def _event_reasons(handle: Any) -> int:
    nv = _nvml
    read = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


def _violation_ns(handle: Any) -> dict[str, int | None]:
    nv = _nvml
    out: dict[str, int | None] = {}
    for name, policy in (("power", nv.NVML_PERF_POLICY_POWER),
                         ("thermal", nv.NVML_PERF_POLICY_THERMAL)):
        status = _optional(nv.nvmlDeviceGetViolationStatus, handle, policy)
        out[name] = None if status is None else int(status.violationTime)
    return out


def snapshot(handle: Any) -> dict[str, Any]:
    """Everything NVML says about the GPU's state now (one-off: tens of queries)."""
    nv = _nvml
    name = nv.nvmlDeviceGetName(handle)
    power = _optional(nv.nvmlDeviceGetPowerUsage, handle)
    energy = _optional(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
    return {
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "sm_mhz": int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
        "mem_mhz": int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)),
        "max_sm_mhz": int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
        "max_mem_mhz": int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM)),
        "app_sm_mhz": _optional(nv.nvmlDeviceGetApplicationsClock, handle, nv.NVML_CLOCK_SM),
        "power_w": None if power is None else power / 1000,
        "power_limit_w": _limit_w(handle),
        "temperature_c": int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
        "energy_mj": None if energy is None else int(energy),
        "reasons": _event_reasons(handle),
        "violation_ns": _violation_ns(handle),
    }


def _limit_w(handle: Any) -> float | None:
    limit = _optional(_nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return None if limit is None else limit / 1000


@dataclass
class Watch:
    """One timing process's view of the GPU: a snapshot before the first sample, the SM
    clock and event reasons before each sample, a snapshot after the last."""

    handle: Any
    start: dict[str, Any]
    sm_mhz: list[int] = field(default_factory=list)
    reasons: int = 0  # OR of the event reasons seen before the samples

    def sample(self) -> None:
        """Before one sample: two queries, kept in memory (nothing written)."""
        try:
            self.sm_mhz.append(int(_nvml.nvmlDeviceGetClockInfo(self.handle,
                                                                _nvml.NVML_CLOCK_SM)))
            self.reasons |= _event_reasons(self.handle)
        except _nvml.NVMLError:
            pass

    def summary(self) -> dict[str, Any]:
        """The cell's GPU state, JSON-ready (see the module docstring for ``throttled``)."""
        end = snapshot(self.handle)
        grew = {}
        for kind in ("power", "thermal"):
            before, after = self.start["violation_ns"][kind], end["violation_ns"][kind]
            grew[kind] = None if before is None or after is None else after - before
        seen = self.reasons | self.start["reasons"] | end["reasons"]
        throttle = [name for bit, name in THROTTLE_REASONS.items() if self.reasons & bit]
        throttle += [f"{kind}_violation" for kind, ns in grew.items() if ns]
        energy = (None if self.start["energy_mj"] is None or end["energy_mj"] is None
                  else end["energy_mj"] - self.start["energy_mj"])
        return {"available": True, "name": end["name"], "index": device_index(),
                "samples": len(self.sm_mhz),
                "sm_mhz": [min(self.sm_mhz), max(self.sm_mhz)] if self.sm_mhz else None,
                "sm_mhz_start_end": [self.start["sm_mhz"], end["sm_mhz"]],
                "mem_mhz": [self.start["mem_mhz"], end["mem_mhz"]],
                "max_sm_mhz": end["max_sm_mhz"], "max_mem_mhz": end["max_mem_mhz"],
                "app_sm_mhz": end["app_sm_mhz"],
                "power_w": [self.start["power_w"], end["power_w"]],
                "power_limit_w": end["power_limit_w"],
                "temperature_c": [self.start["temperature_c"], end["temperature_c"]],
                "energy_mj": energy, "reasons_seen": _reasons(seen),
                "violation_ns": grew, "throttled": bool(throttle), "throttle": throttle,
                "locked": False, "lock_note": LOCK_NOTE}


def open_watch() -> Watch | None:
    """A watch on this process's GPU from now, or None where NVML cannot read one."""
    nv = _init()
    if nv is None:
        return None
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(device_index())
        return Watch(handle, snapshot(handle))
    except Exception as err:  # noqa: BLE001 - an NVML error or an older pynvml's gap
        global _reason
        _reason = f"NVML could not read GPU {device_index()}: {type(err).__name__}: {err}"
        return None


def not_available() -> dict[str, Any]:
    """The record of a CUDA cell whose GPU state could not be read: n/a, with the reason."""
    return {"available": False, "reason": unavailable_reason() or "not read"}


def combine(states: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> dict[str, Any] | None:
    """One cell's GPU state over its timing processes (each a :meth:`Watch.summary` or
    :func:`not_available`): the SM clock's range, the hottest and most power, whether any
    process throttled; n/a with the reason if one could not read it; None if none
    recorded (a CPU cell, or results from before the GPU state was recorded)."""
    if not states:
        return None
    missing = [s for s in states if not s.get("available")]
    if missing:
        return {"available": False, "reason": str(missing[0].get("reason", "not read"))}
    clocks = [v for s in states for v in (s.get("sm_mhz") or ())]
    temps = [v for s in states for v in (s.get("temperature_c") or ()) if v is not None]
    power = [v for s in states for v in (s.get("power_w") or ()) if v is not None]
    throttle = sorted({t for s in states for t in s.get("throttle", ())})
    return {"available": True, "sm_mhz": [min(clocks), max(clocks)] if clocks else None,
            "max_sm_mhz": max(int(s["max_sm_mhz"]) for s in states),
            "temperature_c": max(temps) if temps else None,
            "power_w": max(power) if power else None,
            "throttled": any(s.get("throttled") for s in states), "throttle": throttle,
            "locked": any(s.get("locked") for s in states),
            "lock_note": str(states[0].get("lock_note", ""))}
