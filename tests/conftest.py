"""Shared test helpers: run one config's forward pass in either framework on given weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mhabench.config import AttentionConfig


def run_forward(config: AttentionConfig, weights: dict[str, np.ndarray],
                queries: np.ndarray, keys: np.ndarray, values: np.ndarray,
                valid_lens: np.ndarray | None = None) -> np.ndarray:
    """Output (b, n, d) as float64 numpy; keys is values -> one tensor (self-attention).
    float32 matmuls are true float32, as in every timed step (JAX would use TF32 on GPU)."""
    from mhabench.timing import float32_matmul_precision

    with float32_matmul_precision(config.framework):
        return _run_forward(config, weights, queries, keys, values, valid_lens)


def _run_forward(config: AttentionConfig, weights: dict[str, np.ndarray],
                 queries: np.ndarray, keys: np.ndarray, values: np.ndarray,
                 valid_lens: np.ndarray | None) -> np.ndarray:
    if config.framework == "torch":
        import torch

        from mhabench.torch_attention import build_model, to_tensors

        model = build_model(config, weights).eval()
        x = to_tensors(config, {"q": queries, "k": keys, "v": values, "l": valid_lens})
        with torch.no_grad():
            out = model(x["q"], x["k"], x["v"], x["l"])
        return out.double().cpu().numpy()
    from mhabench.jax_attention import build_model, to_arrays

    model = build_model(config, weights)
    x = to_arrays(config, {"q": queries, "k": keys, "v": values, "l": valid_lens})
    return np.asarray(model(x["q"], x["k"], x["v"], x["l"]), dtype=np.float64)


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
