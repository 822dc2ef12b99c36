"""One real TensorBoard over a logdir from ``mhabench profile`` lists and loads the PyTorch
runs (torch-tb-profiler) and the JAX runs (xprof), through the plugins' HTTP data routes."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mhabench.core.config import preset
from mhabench.measure.profiler.profiling import profile_configs, run_dir

pytestmark = pytest.mark.slow

STEPS = 2
TORCH, JAX = preset("tiny", "torch")[0], preset("tiny", "jax")[0]
TIMEOUT_S = 120.0  # plugins load runs in background threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Callable[..., Any]]:
    logdir = tmp_path_factory.mktemp("tb")
    profile_configs([TORCH, JAX], logdir, steps=STEPS)
    log = Path(logdir.parent / f"{logdir.name}-tensorboard.log").open("w")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/data/plugin"

    def get(plugin: str, route: str, **params: str) -> Any:
        """GET a plugin route; JSON decoded (gzip or not), or the HTTP error code."""
        url = f"{base}/{plugin}/{route}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            return err.code
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        return json.loads(body)

    def until(probe: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"tensorboard exited with {proc.returncode}; see {log.name}")
            try:
                result = probe()
            except (urllib.error.URLError, ConnectionError):
                result = None  # not listening yet
            if result:
                return result
            time.sleep(1.0)
        pytest.fail(f"timed out after {TIMEOUT_S:.0f} s waiting for {what}; see {log.name}")

    get.until = until
    get.logdir = logdir
    try:
        yield get
    finally:
        proc.terminate()  # our own server, by its PID
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_torch_run_is_listed_and_loads_in_torch_tb_profiler(server):
    plugin = "pytorch_profiler"
    server.until(lambda: TORCH.id in server(plugin, "runs")["runs"], f"torch run {TORCH.id}")
    assert JAX.id not in server(plugin, "runs")["runs"]  # the JAX trace is xprof's alone
    assert "Overview" in server(plugin, "views", run=TORCH.id)
    worker = server(plugin, "workers", run=TORCH.id, view="Overview")[0]
    span = server(plugin, "spans", run=TORCH.id, worker=worker)[0]
    overview = server(plugin, "overview", run=TORCH.id, worker=worker, span=span)
    assert len(overview["steps"]["rows"]) == STEPS  # the traced steps, not the warm-up
    trace = server(plugin, "trace", run=TORCH.id, worker=worker, span=span)
    labels = {e.get("name") for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {"projections", "scores", "softmax", "mixing", "output"} <= labels


def test_jax_run_is_listed_and_loads_in_xprof(server):
    plugin = "profile"
    server.until(lambda: JAX.id in server(plugin, "runs"), f"jax run {JAX.id}")
    assert TORCH.id not in server(plugin, "runs")
    tools = server(plugin, "run_tools", run=JAX.id)
    assert "overview_page" in tools and {"trace_viewer", "trace_viewer@"} & set(tools)
    host = server(plugin, "hosts", run=JAX.id, tag="overview_page")[0]["hostname"]
    overview = server(plugin, "data", run=JAX.id, tag="overview_page", host=host)
    assert isinstance(overview, list) and overview  # a non-empty overview page
    tag = "trace_viewer@" if "trace_viewer@" in tools else "trace_viewer"
    trace = server(plugin, "data", run=JAX.id, tag=tag, host=host)
    # The served trace shows the attention step's kernels, as named in the saved trace.
    saved = next(run_dir(JAX, server.logdir).glob("*.trace.json.gz"))
    kernels = {e["args"]["hlo_op"] for e in json.loads(gzip.decompress(saved.read_bytes()))
               ["traceEvents"] if e.get("args", {}).get("hlo_module") == "jit_forward"}
    assert kernels and kernels <= {e.get("name") for e in trace["traceEvents"]}
