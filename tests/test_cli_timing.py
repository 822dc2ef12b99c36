"""The command line (cost, time) and the timing path behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mhabench.cli import main
from mhabench.core.config import AttentionConfig, UnavailableError
from mhabench.measure.timing import Measurement, check_runnable, configure_process, measure

TINY = ["--batch", "2", "-n", "16", "-d", "32", "--heads", "4"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhabench.cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_cost_json_has_the_chapter_terms(capsys):
    assert main(["cost", "--heads", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    n, d, b = 512, 256, 8
    assert out["flops_model"] == b * (8 * n * d**2 + 4 * n**2 * d)
    assert out["params"] == 262144
    for key in ("flops_projections", "flops_attention", "flops_elementwise",
                "attention_map_bytes", "kv_cache_bytes_per_token"):
        assert isinstance(out[key], int)


def test_cost_table_and_kv_heads_default(capsys):
    assert main(["cost", "-d", "4096", "--heads", "32", "--kv-heads", "8",
                 "--dtype", "bfloat16"]) == 0
    text = capsys.readouterr().out
    assert "kv_cache_bytes_per_token" in text and "4,096" in text
    assert main(["cost", "--heads", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"].endswith("h4-kv4")


@pytest.mark.parametrize("args, message", [
    (["cost", "--heads", "3"], "heads=3 must divide d=256"),
    (["cost", "--framework", "mxnet"], "framework='mxnet' is not allowed"),
    (["cost", "-m", "100"], "m=100 differs from n=512"),
    (["cost", "--kv-heads", "3"], "kv_heads=3 must divide heads=8"),
    (["time", "--device", "cuda", *TINY], "device='cuda' is not available"),
    (["time", "--preset", "huge"], "unknown preset 'huge'"),
    (["time", "--repeats", "0", *TINY], "repeats=0 is not allowed"),
    (["time", "--threads", "0", *TINY], "threads=0 is not allowed"),
    (["cost", "--batch", "many"], "argument --batch: invalid int value: 'many'"),
    (["cost", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["profile"], "give --logdir DIR to write traces or --summary DIR"),
    (["profile", "--steps", "x"], "argument --steps: invalid int value: 'x'"),
    (["profile", "--summary", "/nonexistent-mhabench-dir"], "/nonexistent-mhabench-dir"),
    (["predict"], "the following arguments are required: --results"),
    ([], "the following arguments are required: command"),
])
def test_bad_flags_give_one_line_and_exit_2(args, message):
    if "cuda" in args:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mhabench {args[0]}: error:" if args
                                                    else "mhabench: error:"), lines


def test_module_and_console_script_give_the_same_one_line_error():
    """``python -m mhabench.cli`` loads the package once: a CLIError raised in a subcommand
    module is the one main() catches (a second copy of the module would let it escape
    as a traceback)."""
    script = Path(sys.executable).parent / "mhabench"
    as_module = run_cli("profile")
    as_script = subprocess.run([str(script), "profile"], capture_output=True, text=True,
                               timeout=300)
    assert as_module.returncode == as_script.returncode == 2
    assert as_module.stderr == as_script.stderr
    assert as_module.stderr.count("\n") == 1 and "Traceback" not in as_module.stderr


def test_time_json_through_the_console_script():
    script = Path(sys.executable).parent / "mhabench"  # the installed console script
    result = subprocess.run([str(script), "time", *TINY, "--framework", "jax",
                             "--backend", "fused", "--repeats", "3", "--json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["repeats"] == 3 and len(out["times_s"]) == 3
    assert out["q25_s"] <= out["median_s"] <= out["q75_s"]
    assert out["threads"] == 1
    assert out["id"] == "jax-fused-cpu-f32-fwd-b2-n16-m16-d32-h4-kv4"


def test_time_preset_sweeps_heads():
    result = run_cli("time", "--preset", "tiny", "--repeats", "1", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["config"]["heads"] for r in rows] == [1, 2]
    assert "[2/2]" in result.stderr  # progress


def test_measurement_statistics():
    m = Measurement(AttentionConfig(), (4.0, 1.0, 3.0, 2.0, 5.0), threads=1)
    assert (m.median_s, m.q25_s, m.q75_s, m.repeats) == (3.0, 2.0, 4.0, 5)
    assert Measurement(AttentionConfig(), (2.0,), 1).q75_s == 2.0


def test_measure_times_every_backend_once_prepared():
    config = AttentionConfig(batch=2, n=16, d=32, heads=4, backend="loop", mode="train")
    m = measure(config, repeats=3)
    assert m.repeats == 3 and all(t > 0 for t in m.times_s)


def test_memory_budget_refuses_big_configs(monkeypatch):
    monkeypatch.setenv("MHABENCH_MEMORY_BUDGET_GB", "0.5")
    big = AttentionConfig(batch=8, n=4096, d=256, heads=64)
    with pytest.raises(UnavailableError, match=r"needs about .* GiB by the cost model, over"):
        check_runnable(big)
    check_runnable(big.replace(backend="fused"))  # no map materialised: fits
    monkeypatch.setenv("MHABENCH_MEMORY_BUDGET_GB", "lots")
    with pytest.raises(ValueError, match="MHABENCH_MEMORY_BUDGET_GB='lots' is not allowed"):
        check_runnable(big)


def test_threads_env_is_validated(monkeypatch):
    monkeypatch.setenv("MHABENCH_THREADS", "x")
    with pytest.raises(ValueError, match="MHABENCH_THREADS='x' is not allowed"):
        configure_process()
