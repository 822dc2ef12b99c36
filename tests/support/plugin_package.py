"""A user's attention as a small installable package (a ``mhabench.backends`` entry point),
in two releases: 1.0 computes softmax(q k^T / sqrt(p)) v with torch's softmax; 1.1 writes
the softmax out with a guard for fully masked rows (the kind of change a "readable and
safe" refactor makes), about 1.4x slower on the quick grid's GQA cell; written out in
float64 (the "accurate" variant of that refactor), it is 1.45-1.75x slower on the tiny
grid's cells, whose time the projections share. The versions tests install each release
into its own asv environment, as a user's two versions of a package; the own-repo test
commits them to one repository."""

from __future__ import annotations

from pathlib import Path

NAME = "mysdpa"
MODULE = "mysdpa_attention"

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mysdpa-attention"
version = "{version}"
requires-python = ">=3.10"

[project.entry-points."mhabench.backends"]
{name} = "{module}"

[tool.setuptools]
py-modules = ["{module}"]
"""

ONE_PASS = """
def torch_attend(q, k, v, valid_lens, causal=False):
    import torch

    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v
"""

# The softmax written out with a guard for rows that are all masked (maximum, exp, sum,
# divide, nan_to_num: five passes over the attention map where torch's softmax makes one).
WRITTEN_OUT = """
def torch_attend(q, k, v, valid_lens, causal=False):
    import torch

    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return torch.nan_to_num(weights / weights.sum(dim=-1, keepdim=True)) @ v
"""

# The same in float64 for accuracy, cast back before the product with v: the map's passes
# and both matmuls of q k^T in double precision.
WRITTEN_OUT_FLOAT64 = """
def torch_attend(q, k, v, valid_lens, causal=False):
    import torch

    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return torch.nan_to_num(weights / weights.sum(dim=-1, keepdim=True)).to(q.dtype) @ v
"""

# ... and the product with v in float64 as well, for accuracy end to end: the mixing matmul
# in double precision too, on top of the float64 scores.
ALL_FLOAT64 = """
def torch_attend(q, k, v, valid_lens, causal=False):
    import torch

    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    mixed = torch.nan_to_num(weights / weights.sum(dim=-1, keepdim=True)) @ v.double()
    return mixed.to(q.dtype)
"""

MODULE_TEXT = '''"""Scaled dot-product attention, an mhabench plug-in (release {version})."""

import math

from mhabench.api import register_attention
{body}

register_attention("{name}", "torch", torch_attend, gqa=False,
                   summary="scaled dot-product attention (test plug-in {version})")
'''


def write_release(folder: Path, version: str, written_out: bool) -> Path:
    """The package's project folder at ``folder`` (new) for ``version``."""
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(PYPROJECT.format(version=version, name=NAME,
                                                            module=MODULE))
    write_module(folder, version, written_out)
    return folder


def write_module(folder: Path, version: str, written_out: bool,
                 float64: bool = False, mixing_float64: bool = False) -> Path:
    """The package's module in ``folder`` (replaced) as of ``version``: the softmax
    written out (``written_out``), in float64 too (``float64``), the mixing with v as well
    (``mixing_float64``), or torch's."""
    body = ((ALL_FLOAT64 if mixing_float64 else WRITTEN_OUT_FLOAT64 if float64
             else WRITTEN_OUT) if written_out else ONE_PASS)
    path = folder / f"{MODULE}.py"
    path.write_text(MODULE_TEXT.format(version=version, name=NAME, body=body))
    return path
