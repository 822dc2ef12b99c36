"""Facts about the machine a run happens on, and the preflight that refuses a broken one.

asv's ``machine.json`` has no GPU field, so mhabench writes these facts beside it as
``<results>/<machine>/mhabench-machine.json`` (the results loader reads it into
``Results.machines[name]["facts"]``): GPU name and memory, driver, CUDA, cuDNN, the
framework versions and the float32 matmul precision in force.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from mhabench.measure.timing import FLOAT32_MATMUL

FACTS_FILE = "mhabench-machine.json"


class PreflightError(RuntimeError):
    """This machine cannot run what was asked (no GPU, a framework or asv missing, ...)."""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, on most CUDA images

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - any NVML failure: try nvidia-smi instead
        pass
    if shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    return None


def _torch_facts(want_cuda: bool) -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:
        raise PreflightError(f"torch does not import ({exc})") from None
    facts: dict[str, Any] = {"torch": torch.__version__}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(gpu=props.name, gpu_memory_bytes=int(props.total_memory),
                     gpu_count=torch.cuda.device_count(), cuda=torch.version.cuda,
                     cudnn=torch.backends.cudnn.version(), driver=_driver_version())
    elif want_cuda:
        raise PreflightError(f"torch {torch.__version__} sees no CUDA device "
                             f"(built for CUDA {torch.version.cuda})")
    return facts


def _jax_facts(want_cuda: bool) -> dict[str, Any]:
    try:
        import jax
    except ImportError as exc:
        raise PreflightError(f"jax does not import ({exc})") from None
    try:
        import flax  # noqa: F401 - the JAX backends need flax.nnx
        from flax import nnx  # noqa: F401
    except ImportError as exc:
        raise PreflightError(f"flax does not import ({exc})") from None
    facts: dict[str, Any] = {"jax": jax.__version__, "jaxlib": _version("jaxlib"),
                             "flax": _version("flax")}
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    facts["jax_devices"] = [str(d) for d in gpus] or [str(d) for d in jax.devices("cpu")]
    if want_cuda and not gpus:
        raise PreflightError(f"jax {jax.__version__} lists no GPU (is the CUDA plugin "
                             "jax-cuda*-plugin installed?)")
    return facts


def gather(devices: list[str], repo: str | Path = ".") -> dict[str, Any]:
    """Facts about this machine for ``devices``; :class:`PreflightError` naming the first
    thing missing: torch/JAX CUDA when cuda is asked for, flax, asv, the commit."""
    want_cuda = "cuda" in devices
    facts: dict[str, Any] = {"python": platform.python_version(),
                             "numpy": _version("numpy"), "float32_matmul": FLOAT32_MATMUL,
                             "devices": list(devices)}
    facts.update(_torch_facts(want_cuda))
    facts.update(_jax_facts(want_cuda))
    try:
        import asv.main  # noqa: F401 - importing is the check (metadata alone is not)
    except Exception as exc:  # noqa: BLE001 - a missing dependency fails in many ways
        raise PreflightError(f"asv does not import ({exc}); on a device, install the "
                             "bundle's wheels (scripts/device-bundle) and put them on "
                             "PYTHONPATH") from None
    facts["asv"] = _version("asv")
    facts["commit"], facts["commit_date"] = resolve_commit(repo)
    return facts


def resolve_commit(repo: str | Path = ".") -> tuple[str, str]:
    """HEAD's id and committer date in ``repo`` (PreflightError if git cannot say)."""
    if not shutil.which("git"):
        raise PreflightError("git is not installed: asv needs it to resolve the commit")
    done = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%H %cI"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or not done.stdout.strip():
        raise PreflightError(f"git cannot resolve HEAD in {str(repo)!r} "
                             f"({done.stderr.strip() or 'no commit'})")
    commit, date = done.stdout.split()
    return commit, date


def describe(facts: dict[str, Any]) -> list[str]:
    """One line per fact, for logs."""
    lines = []
    if "gpu" in facts:
        lines.append(f"gpu: {facts['gpu']} ({facts['gpu_memory_bytes'] / 2**30:.0f} GiB), "
                     f"driver {facts.get('driver')}, CUDA {facts.get('cuda')}, "
                     f"cuDNN {facts.get('cudnn')}")
    lines.append(f"torch {facts.get('torch')}; jax {facts.get('jax')} (jaxlib "
                 f"{facts.get('jaxlib')}, devices {', '.join(facts.get('jax_devices', []))}); "
                 f"flax {facts.get('flax')}; numpy {facts.get('numpy')}")
    lines.append(f"python {facts.get('python')}; asv {facts.get('asv')}; float32 matmul "
                 f"{facts.get('float32_matmul')}")
    lines.append(f"commit {facts.get('commit')} ({facts.get('commit_date')})")
    return lines


def write_facts(facts: dict[str, Any], results_dir: str | Path, machine: str) -> Path:
    """Write ``facts`` beside asv's machine.json (a new file per machine; an existing one
    with other facts is kept and the new facts go to a numbered sibling)."""
    folder = Path(results_dir) / machine
    folder.mkdir(parents=True, exist_ok=True)
    # The machine's facts, not the run's: the commit is in each results file already.
    kept = {k: v for k, v in facts.items() if k not in ("commit", "commit_date")}
    text = json.dumps(kept, indent=2, sort_keys=True) + "\n"
    path = folder / FACTS_FILE
    index = 1
    while path.exists() and path.read_text() != text:
        path = folder / f"mhabench-machine-{index}.json"
        index += 1
    path.write_text(text)
    return path
