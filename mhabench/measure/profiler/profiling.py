"""Profiler traces of a config's step, laid out so one ``tensorboard --logdir DIR`` shows both
frameworks, plus the offline region breakdown (:func:`breakdown_table`).

Layout of a logdir (one run folder per config, named by its id; never overwritten)::

    DIR/<torch config id>/<worker>.<ts>.pt.trace.json    torch-tb-profiler: any folder
    DIR/<torch config id>/mhabench-profile.json          holding *.pt.trace.json is a run
    DIR/plugins/profile/<jax config id>/<host>.xplane.pb xprof: plugins/profile/<run>/
    DIR/plugins/profile/<jax config id>/<host>.trace.json.gz
    DIR/plugins/profile/<jax config id>/<module>.hlo.txt the compiled HLO (op_name metadata)
    DIR/plugins/profile/<jax config id>/mhabench-profile.json

``mhabench-profile.json`` holds the config (``config.to_dict()``), the region labels and the
number of traced steps, so the breakdown needs neither a live profiler nor the config id.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from mhabench.core.config import AttentionConfig
from mhabench.measure.profiler.trace_breakdown import META_FILE, breakdown_table
from mhabench.measure.timing import configure_process, prepare

__all__ = ["DEFAULT_STEPS", "breakdown_table", "check_logdir", "profile_config",
           "profile_configs", "run_dir"]

DEFAULT_STEPS = 3


def run_dir(config: AttentionConfig, logdir: str | Path) -> Path:
    """Where the trace of ``config`` goes under ``logdir`` (see the module docstring)."""
    logdir = Path(logdir)
    if config.framework == "torch":
        return logdir / config.id
    # jax.profiler.trace(logdir) writes plugins/profile/<session_id>/: the id names the run.
    return logdir / "plugins" / "profile" / config.id


def check_logdir(logdir: str | Path, configs: Sequence[AttentionConfig]) -> Path:
    """Create ``logdir`` if needed and refuse, before any work, if it is not a writable
    folder or if a run folder of one of ``configs`` already exists there."""
    logdir = Path(logdir)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        probe = logdir / f".mhabench-write-test-{datetime.now().timestamp():.0f}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise OSError(f"--logdir {str(logdir)!r} is not a writable folder "
                      f"({exc.strerror or exc})") from None
    existing = [run_dir(c, logdir) for c in configs if run_dir(c, logdir).exists()]
    if existing:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise FileExistsError(
            f"trace folder {str(existing[0])!r}{more} already exists and traces are never "
            "overwritten; choose a new --logdir or move the old traces away")
    return logdir


def profile_config(config: AttentionConfig, logdir: str | Path,
                   steps: int = DEFAULT_STEPS) -> Path:
    """Trace ``steps`` warmed-up steps of ``config`` into its own new run folder under
    ``logdir``; returns that folder. Raises ``FileExistsError`` if it already exists."""
    _check_steps(steps)
    step = prepare(config)  # built, compiled and warmed up outside the trace
    target = run_dir(config, logdir)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.mkdir()  # exclusive: a folder that exists (even from a racing run) is never reused
    try:
        if config.framework == "torch":
            regions = _trace_torch(config, step, target, steps)
            extra: dict[str, Any] = {}
        else:
            regions, extra = _trace_jax(config, step, Path(logdir), target, steps)
        meta = {"config": config.to_dict(), "config_id": config.id, "regions": list(regions),
                "steps": steps, "created": datetime.now(UTC).isoformat(), **extra}
        (target / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)  # only the folder this call created
        raise
    return target


def profile_configs(configs: Sequence[AttentionConfig], logdir: str | Path,
                    steps: int = DEFAULT_STEPS, threads: int | None = None,
                    progress: TextIO | None = None) -> list[Path]:
    """Profile each config into ``logdir`` (checked up front: nothing is overwritten), with
    one progress line per config on ``progress`` (e.g. ``sys.stderr``; None: silent);
    returns the run folders."""
    _check_steps(steps)
    logdir = check_logdir(logdir, configs)
    configure_process(threads)  # before JAX touches a device
    written = []
    for i, config in enumerate(configs, 1):
        if progress is not None:
            print(f"[{i}/{len(configs)}] profiling {config.id} ({steps} step(s))",
                  file=progress, flush=True)
        written.append(profile_config(config, logdir, steps))
    return written


def _check_steps(steps: int) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} is not allowed; it must be a positive integer")


def _trace_torch(config: AttentionConfig, step: Callable[[], Any], target: Path,
                 steps: int) -> tuple[str, ...]:
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from mhabench.layers.torch.attention import REGIONS

    activities = [ProfilerActivity.CPU]
    if config.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    # One profiler warm-up step first: the first recorded step carries the profiler's own
    # start-up cost.
    with warnings.catch_warnings():
        # One cycle only, so "Profiler clears events at the end of each cycle" is moot.
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps),
                     on_trace_ready=tensorboard_trace_handler(str(target))) as prof:
            for _ in range(1 + steps):
                step()
                prof.step()
    if not list(target.glob("*.pt.trace.json*")):
        raise RuntimeError(f"torch.profiler wrote no *.pt.trace.json into {target}")
    return REGIONS


def _trace_jax(config: AttentionConfig, step: Callable[[], Any], logdir: Path, target: Path,
               steps: int) -> tuple[tuple[str, ...], dict[str, Any]]:
    import jax

    from mhabench.layers.jax.attention import REGIONS

    options = jax.profiler.ProfileOptions()
    options.session_id = config.id  # own run folder: traces in the same second never collide
    with jax.profiler.trace(str(logdir), profiler_options=options):
        for _ in range(steps):
            step()
    if not list(target.glob("*.trace.json.gz")):
        raise RuntimeError(f"jax.profiler wrote no *.trace.json.gz into {target}")
    # The breakdown maps the trace's hlo_op names to named scopes through this text.
    from mhabench.measure.profiler.device_time import hlo_module_name

    hlo = step.compiled.as_text()
    module = hlo_module_name(step)
    (target / f"{module}.hlo.txt").write_text(hlo)
    return REGIONS, {"hlo_module": module, "hlo_file": f"{module}.hlo.txt"}
