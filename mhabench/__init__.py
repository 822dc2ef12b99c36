"""mhabench: benchmark and profiling suite for multi-head attention in PyTorch and JAX.

The public API is :mod:`mhabench.api`; the two names here stay for older imports.
"""

from mhabench.core.config import AttentionConfig, UnavailableError

__all__ = ["AttentionConfig", "UnavailableError"]
__version__ = "0.1.0"
