"""mhabench's public API: what users and plug-ins import, from this one module.

- Configs: :class:`AttentionConfig` (one benchmark cell, validated), :func:`preset`,
  :func:`head_sweep`; :class:`UnavailableError` when this machine cannot run a config.
- Backends: :func:`register_attention` (an attention function on projected heads),
  :func:`register` of a :class:`Backend` (a whole layer), :func:`backend_names`; plug-ins
  load through the entry-point group :data:`ENTRY_POINT_GROUP` or ``MHABENCH_BACKENDS``.
- The cost model: :func:`cost` -> :class:`Cost`.
- Published models' shapes: :data:`MODELS`, :func:`model_shape`, :func:`read_hf_config`
  (a Hugging Face ``config.json``) -> :class:`ModelShape`, whose ``fields()`` set a
  config's width, heads, head width and scale.
- Timing, the path the asv benchmarks take: :func:`configure_process` (threads),
  :func:`prepare` (the built, compiled, warmed-up step), :func:`measure` ->
  :class:`Measurement`.
- Results: :func:`load_results` (asv results -> a pandas frame, in :class:`Results`).

Everything else is internal and may move. Nothing here imports torch, JAX or pandas until
it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mhabench.core.backends import ENTRY_POINT_GROUP, Backend, register, register_attention
from mhabench.core.backends import names as backend_names
from mhabench.core.config import AttentionConfig, UnavailableError, head_sweep, preset
from mhabench.core.cost import Cost, cost
from mhabench.core.models import MODELS, ModelShape, model_shape, read_hf_config
from mhabench.measure.timing import Measurement, configure_process, measure, prepare

if TYPE_CHECKING:
    from mhabench.analysis.results import Results


def load_results(root: str | Path, machine: str | None = None) -> Results:
    """asv results under ``root`` (``.asv/results``) as one frame, with the machines' facts
    and any warnings (:func:`mhabench.analysis.results.load_results`; needs pandas)."""
    from mhabench.analysis.results import load_results as load

    return load(root, machine)


__all__ = ["ENTRY_POINT_GROUP", "MODELS", "AttentionConfig", "Backend", "Cost", "Measurement",
           "ModelShape", "UnavailableError", "backend_names", "configure_process", "cost",
           "head_sweep", "load_results", "measure", "model_shape", "prepare", "preset",
           "read_hf_config", "register", "register_attention"]
