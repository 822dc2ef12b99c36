"""A cell forked after the asv suite's pre-import runs torch and JAX on the GPU: the
forkserver's discovery imports the benchmarks, then a forked child uses CUDA. Exit status
0 and a line saying so when it ran, 1 with the error when it did not."""

import os
import sys

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
