"""The attention shapes of published models, and a reader of a Hugging Face ``config.json``.

The chapter splits a width d into h heads of d/h; the models people run set the head
width apart (Qwen3-32B: d 5120, 64 query heads of 128), share key/value heads among
groups of query heads (GQA) and, in Gemma's configs, set the softmax scale through
``query_pre_attn_scalar`` (scale = query_pre_attn_scalar ** -1/2). A :class:`ModelShape`
holds one model's numbers as its ``config.json`` names them; :meth:`ModelShape.fields`
gives the :class:`~mhabench.core.config.AttentionConfig` fields they set (d, heads,
kv_heads, head_dim, scale), and the rest of a config (n, batch, backend, ...) is the
caller's. Reading a config touches only the file given: nothing is downloaded.

Pure data and json: no import side effects, no torch or JAX.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """One model's attention shape, in its ``config.json``'s terms."""

    name: str
    hidden_size: int  # d
    num_attention_heads: int  # h
    num_key_value_heads: int  # h_kv
    head_dim: int  # p
    query_pre_attn_scalar: float | None = None  # Gemma: scale = this ** -1/2
    source: str = ""  # where the numbers come from

    @property
    def scale(self) -> float | None:
        """The factor on the scores; None: the default 1/sqrt(head_dim)."""
        scalar = self.query_pre_attn_scalar
        return None if scalar is None else 1.0 / math.sqrt(scalar)

    def fields(self) -> dict[str, Any]:
        """The ``AttentionConfig`` fields this shape sets."""
        return {"d": self.hidden_size, "heads": self.num_attention_heads,
                "kv_heads": self.num_key_value_heads, "head_dim": self.head_dim,
                "scale": self.scale}


def _hub(repo: str) -> str:
    return f"{repo}: config.json on the Hugging Face hub"


# Each from the model's config.json on the Hugging Face hub (the repository named in
# source); Gemma 3's numbers sit in its text_config. Gemma-2-9B's scalar is 256, its head
# width (the hub's config said 224, hidden / heads, until Google corrected it in July 2024).
MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("llama-3.1-8b", 4096, 32, 8, 128, source=_hub("meta-llama/Llama-3.1-8B")),
    ModelShape("llama-3.1-70b", 8192, 64, 8, 128, source=_hub("meta-llama/Llama-3.1-70B")),
    ModelShape("mistral-7b", 4096, 32, 8, 128, source=_hub("mistralai/Mistral-7B-v0.1")),
    ModelShape("qwen2.5-7b", 3584, 28, 4, 128, source=_hub("Qwen/Qwen2.5-7B")),
    ModelShape("qwen3-32b", 5120, 64, 8, 128, source=_hub("Qwen/Qwen3-32B")),
    ModelShape("gemma-2-9b", 3584, 16, 8, 256, query_pre_attn_scalar=256,
               source=_hub("google/gemma-2-9b")),
    ModelShape("gemma-3-27b", 5376, 32, 16, 128, query_pre_attn_scalar=168,
               source=_hub("google/gemma-3-27b-pt")),
)}


def model_shape(name: str) -> ModelShape:
    """The named model's shape (any case); a ValueError lists the known names."""
    shape = MODELS.get(name.lower())
    if shape is None:
        raise ValueError(f"model {name!r} is not known; choose one of {', '.join(MODELS)} "
                         "(or read a config.json with --hf-config)")
    return shape


def _positive(path: Path, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: {key}={value!r} is not allowed; it must be a positive "
                         "integer")
    return value


def read_hf_config(path: str | Path) -> ModelShape:
    """The attention shape a Hugging Face ``config.json`` on disk describes:
    ``hidden_size`` and ``num_attention_heads`` (required), ``num_key_value_heads``
    (default: the attention heads), ``head_dim`` (default: hidden_size /
    num_attention_heads) and ``query_pre_attn_scalar`` where present. A multimodal
    config's ``text_config`` is read where the top level names no attention heads.
    Every problem is a one-line ValueError naming the file and the key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{path}: cannot read the config ({err.strerror or err})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON config.json ({err})".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a config.json (a JSON object is expected)")
    text = data.get("text_config")
    if "num_attention_heads" not in data and isinstance(text, dict):
        data = text
    for key in ("hidden_size", "num_attention_heads"):
        if data.get(key) is None:
            raise ValueError(f"{path}: key {key!r} is missing; a Hugging Face config.json "
                             "names hidden_size and num_attention_heads")
    hidden = _positive(path, "hidden_size", data["hidden_size"])
    heads = _positive(path, "num_attention_heads", data["num_attention_heads"])
    kv_heads = data.get("num_key_value_heads")
    kv_heads = _positive(path, "num_key_value_heads", heads if kv_heads is None else kv_heads)
    if heads % kv_heads:
        raise ValueError(f"{path}: num_key_value_heads={kv_heads} must divide "
                         f"num_attention_heads={heads}")
    head_dim = data.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ValueError(f"{path}: key 'head_dim' is missing and num_attention_heads="
                             f"{heads} does not divide hidden_size={hidden}")
        head_dim = hidden // heads
    head_dim = _positive(path, "head_dim", head_dim)
    scalar = data.get("query_pre_attn_scalar")
    if scalar is not None and (isinstance(scalar, bool) or not isinstance(scalar, (int, float))
                               or not scalar > 0):
        raise ValueError(f"{path}: query_pre_attn_scalar={scalar!r} is not allowed; it must "
                         "be a positive number")
    name = str(data.get("_name_or_path") or path.parent.name or path.stem)
    return ModelShape(name, hidden, heads, kv_heads, head_dim, scalar, source=str(path))
