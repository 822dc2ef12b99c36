"""Shared test helpers: run one config's forward pass in either framework on given weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhabench.agreement import forward_output

run_forward = forward_output  # the library's: tests and `mhabench check` share it


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not has_cuda(), reason="no CUDA GPU on this machine")


@pytest.fixture
def asv_home(tmp_path: Path) -> dict[str, str]:
    """A private HOME with an asv machine "pytest-machine", so ~/.asv-machine.json is
    left alone; returns the environment variables to run asv with."""
    env = {"HOME": str(tmp_path / "home"), "MHABENCH_THREADS": "1"}
    (tmp_path / "home").mkdir()
    done = subprocess.run([sys.executable, "-m", "asv", "machine", "--machine",
                           "pytest-machine", "--yes"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return env
