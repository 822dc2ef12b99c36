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

_FORKSERVER = """
import os, sys
from asv_runner.discovery import disc_benchmarks
for _ in disc_benchmarks("benchmarks", ignore_import_errors=False):
    pass  # the forkserver's preimport
pid = os.fork()
if pid == 0:
    try:
        import torch
        assert float(torch.ones(4, device="cuda").sum()) == 4.0
        import jax
        import jax.numpy as jnp
        gpu = jax.devices("gpu")[0]
        assert float(jax.device_put(jnp.ones(4), gpu).sum()) == 4.0
        print("forked cell: torch and jax ran on the GPU", flush=True)
        os._exit(0)
    except BaseException as err:  # noqa: BLE001 (report whatever stopped the cell)
        print(f"forked cell failed: {err!r}", flush=True)
        os._exit(1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _forkserver(preimport: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MHABENCH_DEVICES": "cuda", "MHABENCH_DTYPES": "bfloat16",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MHABENCH_PREIMPORT", None)
    if preimport is not None:
        env["MHABENCH_PREIMPORT"] = preimport
    return subprocess.run([sys.executable, "-c", _FORKSERVER], cwd=ROOT, env=env,
                          text=True, capture_output=True, timeout=240)


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
