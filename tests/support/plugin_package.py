"""A user's attention as a small installable package (a ``mhabench.backends`` entry point),
in two releases: 1.0 computes softmax(q k^T / sqrt(p)) v with torch's softmax; 1.1 writes
the softmax out with a guard for fully masked rows (the kind of change a "readable and
safe" refactor makes), about 1.4x slower on the quick grid's GQA cell. The
versions tests install each release into its own asv environment, as a user's two
versions of a package."""

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


def write_module(folder: Path, version: str, written_out: bool) -> Path:
    """The package's module in ``folder`` (replaced) as of ``version``."""
    path = folder / f"{MODULE}.py"
    path.write_text(MODULE_TEXT.format(version=version, name=NAME,
                                       body=WRITTEN_OUT if written_out else ONE_PASS))
    return path
