"""Cells forked from asv's forkserver can use the GPU (``-m cuda`` on a lent machine).

asv 0.6 imports every benchmark module once in its forkserver and forks each cell from it.
If anything that import runs starts the CUDA driver, no forked cell can use the GPU (torch:
"Cannot re-initialize CUDA in forked subprocess"; JAX: cuInit fails): every cuda cell of
a grid fails that way. The check imports the suite as the forkserver
does, with the GPU grid's settings, then forks a cell that runs torch and JAX on the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, requires_cuda


def _forkserver(preimport: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MHABENCH_DEVICES": "cuda", "MHABENCH_DTYPES": "bfloat16",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MHABENCH_PREIMPORT", None)
    if preimport is not None:
        env["MHABENCH_PREIMPORT"] = preimport
    probe = ROOT / "tests" / "probes" / "forked_gpu_cell.py"
    return subprocess.run([sys.executable, str(probe)], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=240)


@requires_cuda
@pytest.mark.cuda
def test_a_cell_forked_after_the_suites_preimport_uses_the_gpu():
    pytest.importorskip("asv_runner")
    done = _forkserver(None)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "torch and jax ran on the GPU" in done.stdout
    # What the compiler machinery's import does to a forked cell on this machine (the
    # reason the default leaves it out where CUDA may start); reported, not asserted.
    compiler = _forkserver("torch,jax,compiler")
    print(f"with the compiler preimported: exit {compiler.returncode}: "
          f"{compiler.stdout.strip()[-300:]}")
