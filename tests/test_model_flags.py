"""Published models' shapes by name, the Hugging Face config.json reader, and the
``--model``/``--hf-config`` flags of the command line (bad input: one line, exit 2)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from mhabench.cli import main
from mhabench.core.config import AttentionConfig
from mhabench.core.models import MODELS, model_shape, read_hf_config
from mhabench.measure import agreement


# ----- named shapes and the config reader ------------------------------------------------
def test_every_named_model_is_a_valid_config_with_a_named_source():
    for name, shape in MODELS.items():
        config = AttentionConfig(n=4, **shape.fields())
        assert config.heads * config.head_dim == shape.num_attention_heads * shape.head_dim
        assert shape.source.endswith("config.json on the Hugging Face hub"), name
        assert "/" in shape.source.split(":")[0], name  # an owner/name repository
    assert not AttentionConfig(**MODELS["qwen3-32b"].fields()).chapter_width
    # Gemma-2-9B's scalar is its head width (the default scale); Gemma-3-27B's is not.
    assert AttentionConfig(**MODELS["gemma-2-9b"].fields()).scale is None
    assert AttentionConfig(**MODELS["gemma-3-27b"].fields()).scale == pytest.approx(
        1 / math.sqrt(168))
    assert model_shape("Llama-3.1-8B") is MODELS["llama-3.1-8b"]


def write(tmp_path: Path, data: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_the_reader_takes_a_hugging_face_config(tmp_path):
    llama = write(tmp_path, {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                             "num_attention_heads": 32, "num_key_value_heads": 8,
                             "rope_theta": 500000.0})
    shape = read_hf_config(llama)
    assert shape.fields() == {"d": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
                              "scale": None}
    assert dataclasses.replace(shape, name="llama-3.1-8b", source="") == dataclasses.replace(
        MODELS["llama-3.1-8b"], source="")
    # No num_key_value_heads: MHA. head_dim null (some configs write it): hidden / heads.
    mha = read_hf_config(write(tmp_path, {"hidden_size": 96, "num_attention_heads": 6,
                                          "head_dim": None}, "mha.json"))
    assert (mha.num_key_value_heads, mha.head_dim) == (6, 16)
    # Gemma 3: the attention lives in text_config, with its own scale.
    gemma = read_hf_config(write(tmp_path, {"model_type": "gemma3", "text_config": {
        "hidden_size": 5376, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "query_pre_attn_scalar": 168}}, "gemma.json"))
    assert gemma.fields() == MODELS["gemma-3-27b"].fields()


@pytest.mark.parametrize("data, message", [
    ({"num_attention_heads": 8}, "key 'hidden_size' is missing"),
    ({"hidden_size": 64}, "key 'num_attention_heads' is missing"),
    ({"hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 3},
     "num_key_value_heads=3 must divide num_attention_heads=8"),
    ({"hidden_size": 100, "num_attention_heads": 8},
     "key 'head_dim' is missing and num_attention_heads=8 does not divide hidden_size=100"),
    ({"hidden_size": "64", "num_attention_heads": 8}, "hidden_size='64' is not allowed"),
    ({"hidden_size": 64, "num_attention_heads": 8, "query_pre_attn_scalar": -1},
     "query_pre_attn_scalar=-1 is not allowed"),
    ([1, 2], "not a config.json (a JSON object is expected)"),
])
def test_a_bad_config_names_the_file_and_the_key(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(ValueError) as info:
        read_hf_config(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


# ----- the command line ------------------------------------------------------------------
def test_cost_reads_a_config_json_in_the_general_form(tmp_path, capsys):
    path = write(tmp_path, {"hidden_size": 96, "num_attention_heads": 6,
                            "num_key_value_heads": 2, "head_dim": 20,
                            "query_pre_attn_scalar": 25})
    assert main(["cost", "--hf-config", str(path), "-n", "2048", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    b, n = 8, 2048  # the default batch
    assert out["form"] == "general"
    assert out["id"] == f"torch-batched-cpu-f32-fwd-b8-n{n}-m{n}-d96-h6-kv2-p20-s0.2"
    # per sequence: 2 n d (h p) + 2 n (h p) d + 2 * 2 n d (h_kv p); 2 * 2 n n (h p),
    # h p = 120 and h_kv p = 40
    assert out["flops_projections"] == b * (2 * n * 96 * 120 * 2 + 4 * n * 96 * 40)
    assert out["flops_attention"] == b * 4 * n * n * 120
    assert out["flops_projections"] != b * 8 * n * 96**2  # not the chapter's


def test_model_flags_set_the_shape_and_other_flags_still_apply(monkeypatch, capsys):
    from mhabench.measure import timing

    timed = []

    def fake_measure(config, repeats, warmup, threads):  # no clock runs in this test
        timed.append(config)
        return timing.Measurement(config, (1.0,), 1)

    monkeypatch.setattr(timing, "measure", fake_measure)
    monkeypatch.setattr(timing, "configure_process", lambda threads=None: None)
    assert main(["time", "--model", "llama-3.1-8b", "-n", "1024", "--batch", "1"]) == 0
    config = timed[0]
    assert (config.d, config.heads, config.kv_heads, config.head_dim, config.n,
            config.batch) == (4096, 32, 8, 128, 1024, 1)
    timing.check_runnable(config)  # the default memory budget holds it
    assert "d4096-h32-kv8" in capsys.readouterr().out


def test_time_runs_a_named_models_width(capsys):
    """A real step at Llama-3.1-8B's width and heads (few tokens, so the test stays
    small)."""
    assert main(["time", "--model", "llama-3.1-8b", "-n", "4", "--batch", "1",
                 "--repeats", "1", "--warmup", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["id"] == "torch-batched-cpu-f32-fwd-b1-n4-m4-d4096-h32-kv8"
    assert out["config"]["kv_heads"] == 8 and out["median_s"] > 0


@pytest.mark.parametrize("args, message", [
    (["cost", "--model", "gpt-5"], "model 'gpt-5' is not known; choose one of llama-3.1-8b, "),
    (["cost", "--model", "qwen3-32b", "--heads", "8"], "--heads cannot go with --model"),
    (["cost", "--hf-config", "/nonexistent-dir/config.json"],
     "/nonexistent-dir/config.json: cannot read the config"),
    (["time", "--model", "mistral-7b", "--preset", "tiny"], "--preset tiny sweeps the "
                                                           "chapter's heads"),
    (["check", "--backend", "batched", "--model", "nope"], "model 'nope' is not known"),
    (["predict", "--results", ".", "--model", "x", "--hf-config", "y"],
     "argument --hf-config: not allowed with argument --model"),
])
def test_bad_model_flags_give_one_line_and_exit_2(args, message, capsys):
    try:
        code = main(args)
    except SystemExit as done:  # argparse's own errors
        code = done.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("flag", ["kv", "missing"])
def test_bad_config_files_exit_2(tmp_path, capsys, flag):
    data = {"hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 3} \
        if flag == "kv" else {"hidden_size": 64}
    path = write(tmp_path, data)
    assert main(["cost", "--hf-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mhabench cost: error: {path}: ") and err.count("\n") == 1


def test_check_runs_every_variant_at_a_config_files_shape(tmp_path, capsys):
    path = write(tmp_path, {"hidden_size": 48, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "head_dim": 16,
                            "query_pre_attn_scalar": 20})
    assert main(["check", "--framework", "jax", "--backend", "fused", "--hf-config",
                 str(path), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["variant"] for r in rows] == [v for v in agreement.VARIANTS
                                            if not v.startswith("general")]
    ran = [r for r in rows if r["max_error"] is not None]
    assert len(ran) >= 8 and all(r["ok"] for r in rows)
    assert all("-d48-h4-" in r["id"] and "-p16-s0.2236068" in r["id"] for r in ran)
