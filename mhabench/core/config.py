"""One validated config type that names a benchmark cell, plus the presets (the grids are
:mod:`mhabench.core.grids`).

Every part of mhabench (implementations, timing, profiling, asv benchmarks, the report
and the CLI) takes an :class:`AttentionConfig`. Construction validates every field with a
``ValueError`` that names the bad value and what is allowed; whether *this machine* can
run a config (GPU present, framework installed) is a separate question answered by
:func:`mhabench.measure.timing.check_available`, so the cost model still works for configs
of other machines. This module imports neither torch nor JAX.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass
from typing import Any

from mhabench.core import backends
from mhabench.core.grids import CHAPTER_SHAPE, HEAD_SWEEP

FRAMEWORKS = ("torch", "jax")
# The packages that install each framework (an asv environment's requirements).
FRAMEWORK_PACKAGES = {"torch": ("torch",), "jax": ("jax", "jaxlib", "flax")}
BACKENDS = backends.BUILTIN  # plus the registered plug-ins: backends.names(framework)
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16")
# forward: one forward pass (deterministic: dropout acts in train only).
# train: forward + backward of the layer, w.r.t. its parameters and its input(s), as for a
#   layer inside a network; dropout draws a fresh mask every step.
# decode: one generation step of n = 1 new token per sequence.
#   self-attention (cross=False): project the token's q, k, v; write k, v into a KV cache
#   preallocated for m + 1 positions and filled to m; attend over the m + 1 positions. Every
#   call starts from the same fill level m (slot m is overwritten), so repeated calls time
#   identical work and the cache never grows.
#   cross-attention (cross=True, Exercise 7.2): the token's q attends to a source of m
#   tokens whose K/V projections were cached once (mode=forward, cross=True, n=1 is the
#   same step recomputing them).
# prefix: the no-cache baseline of self-attention decoding (Exercise 8): recompute causal
#   attention over the whole prefix of m + 1 tokens and keep the last position's output.
MODES = ("forward", "train", "decode", "prefix")
MODE_IDS = {"forward": "fwd", "train": "train", "decode": "dec", "prefix": "prefix"}

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


class UnavailableError(ValueError):
    """A valid config that this machine cannot run (no GPU, framework missing, ...)."""


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {', '.join(allowed)}")


def _able(framework: str, can: Any) -> str:
    """The names of ``framework``'s backends for which ``can(backend)`` holds."""
    return " or ".join(n for n in backends.names(framework) if can(backends.get(framework, n)))


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")


@dataclass(frozen=True)
class AttentionConfig:
    """One multi-head attention cell: framework, backend, shapes and variant.

    ``n`` queries attend over ``m`` keys/values of width ``d`` through ``heads`` query
    heads and ``kv_heads`` key/value heads (``kv_heads == heads``: MHA, ``1``: MQA,
    otherwise GQA) of width ``head_dim`` (``p``). ``head_dim=None`` means ``d / heads``, the
    chapter's split; published models often set it apart (Qwen3-32B: d 5120, 64 heads of
    128), so the query projection is d -> h p, keys and values d -> h_kv p, the output
    h p -> d. ``scale`` multiplies the scores before the softmax; None means
    ``1 / sqrt(head_dim)`` (Gemma's configs set another). Self-attention
    (``cross=False``) feeds one tensor as queries, keys and values, so ``m`` must equal
    ``n``; ``m=None`` means ``n``.
    """

    framework: str = "torch"
    backend: str = "batched"
    batch: int = 8
    n: int = 512
    m: int | None = None
    d: int = 256
    heads: int = 8
    kv_heads: int | None = None
    cross: bool = False
    masked: bool = False
    causal: bool = False
    dropout: float = 0.0
    dtype: str = "float32"
    device: str = "cpu"
    mode: str = "forward"
    # Appended after ``mode``: positional construction, and every id and asv cell of the
    # chapter's split, stay as they were. None: d / heads and 1/sqrt(head_dim).
    head_dim: int | None = None
    scale: float | None = None

    def __post_init__(self) -> None:
        # Normalise the defaults that depend on other fields (frozen: go through object).
        if self.m is None:
            object.__setattr__(self, "m", self.n)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        self._validate_widths()
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.d // self.heads)
        if self.scale is not None:
            # The default scale given explicitly is the default: one cell, one config.
            scale = float(self.scale)
            default = 1.0 / math.sqrt(self.head_dim)
            object.__setattr__(self, "scale", None if math.isclose(
                scale, default, rel_tol=1e-12) else scale)
        self._validate()

    def _validate_widths(self) -> None:
        """The head width: given (any positive integer), or d / heads (heads must divide d)."""
        for name in ("d", "heads"):
            _positive_int(name, getattr(self, name))
        if self.head_dim is not None:
            _positive_int("head_dim", self.head_dim)
        elif self.d % self.heads:
            divisors = [h for h in range(1, self.d + 1) if self.d % h == 0]
            shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            raise ValueError(f"heads={self.heads} must divide d={self.d}; allowed heads: "
                             f"{shown}; or set head_dim (the head width apart from d)")
        scale = self.scale
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                                  or not math.isfinite(scale) or scale <= 0):
            raise ValueError(f"scale={scale!r} is not allowed; it must be a positive number "
                             "(None: 1/sqrt(head_dim))")

    def _validate(self) -> None:
        _choice("framework", self.framework, FRAMEWORKS)
        backend = backends.get(self.framework, self.backend)
        _choice("device", self.device, DEVICES)
        _choice("dtype", self.dtype, DTYPES)
        _choice("mode", self.mode, MODES)
        for name in ("batch", "n", "m", "d", "heads", "kv_heads"):
            _positive_int(name, getattr(self, name))
        for name in ("cross", "masked", "causal"):
            if not isinstance(getattr(self, name), bool):
                value = getattr(self, name)
                raise ValueError(f"{name}={value!r} is not allowed; use True or False")
        if self.heads % self.kv_heads:
            divisors = [g for g in range(1, self.heads + 1) if self.heads % g == 0]
            raise ValueError(
                f"kv_heads={self.kv_heads} must divide heads={self.heads}; "
                f"allowed kv_heads: {', '.join(map(str, divisors))}"
            )
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout!r} is not allowed; it must be in [0, 1)")
        self._validate_mode()
        self._validate_backend(backend)

    def _validate_backend(self, backend: backends.Backend) -> None:
        """What the registered backend supports (``mhabench.core.backends``)."""
        name, fw = backend.name, self.framework
        what = f"backend={name!r} ({backend.summary})" if backend.summary else \
            f"backend={name!r}"
        if self.device not in backend.devices:
            raise ValueError(f"{what} runs on {' or '.join(backend.devices)} only, not "
                             f"device={self.device!r}")
        if self.kv_heads != self.heads and not backend.gqa:
            raise ValueError(f"{what} supports MHA only, but kv_heads={self.kv_heads} != "
                             f"heads={self.heads}; use {_able(fw, lambda b: b.gqa)}")
        if not self.chapter_width and not backend.head_width:
            raise ValueError(f"{what} needs heads x head_dim = d, but heads={self.heads} x "
                             f"head_dim={self.head_dim} != d={self.d}; use "
                             f"{_able(fw, lambda b: b.head_width)}")
        if self.scale is not None and not backend.scale:
            why = " (its attention function takes no scale keyword)" if backend.attend else ""
            raise ValueError(f"{what} runs the default scale 1/sqrt(head_dim) only{why}, not "
                             f"scale={self.scale:g}; use {_able(fw, lambda b: b.scale)}")
        modes = backend.modes_on(self.device)
        if self.mode not in modes:
            raise ValueError(f"{what} does not run mode={self.mode!r} on "
                             f"device={self.device!r}; it runs {', '.join(modes)} there. "
                             f"mode={self.mode!r} needs "
                             f"{_able(fw, lambda b: self.mode in b.modes_on(self.device))}")
        if self.causal and not backend.causal:
            raise ValueError(f"causal=True is not allowed with framework={fw!r}, {what}: "
                             f"it takes no causal mask; use {_able(fw, lambda b: b.causal)}")
        if self.dropout and not backend.dropout:
            raise ValueError(f"dropout={self.dropout:g} is not allowed with framework={fw!r}, "
                             f"{what}: it has no dropout; use "
                             f"{_able(fw, lambda b: b.dropout)}")

    def _validate_mode(self) -> None:
        """Combinations of mode with the other fields that name no distinct, real step."""
        mode = self.mode
        stepwise = mode in ("decode", "prefix")
        if stepwise and self.n != 1:
            raise ValueError(f"n={self.n} is not allowed with mode={mode!r}; a decode step "
                             "takes one new token per sequence (n=1; m sets the prefix)")
        if mode == "prefix" and self.cross:
            raise ValueError("cross=True is not allowed with mode='prefix' (no-cache "
                             "self-attention decoding); a decoder step that recomputes its "
                             "source keys/values is mode='forward', cross=True, n=1")
        if self.masked and stepwise and not self.cross:
            raise ValueError(f"masked=True is not allowed with mode={mode!r} self-attention: "
                             "the step attends causally over the m earlier tokens and the new "
                             "one; valid_lens apply to cross-attention sources")
        if self.causal and (stepwise or self.cross or self.masked):
            what = (f"mode={mode!r} (its step attends causally already)" if stepwise
                    else "cross=True (a source has no order to mask)" if self.cross
                    else "masked=True (valid_lens and the causal mask together are not "
                    "a variant the grid times)")
            raise ValueError(f"causal=True is not allowed with {what}; causal masks a "
                             "sequence's own later tokens in self-attention, mode='forward' "
                             "or 'train'")
        if self.dropout and mode != "train":
            raise ValueError(f"dropout={self.dropout:g} is not allowed with mode={mode!r}: "
                             "dropout acts in mode='train' only (other steps are "
                             "deterministic), so it would name the same work twice")
        if not self.cross and self.m != self.n and not stepwise:
            raise ValueError(
                f"m={self.m} differs from n={self.n} in self-attention; "
                "set cross=True (--cross) for n queries over m keys/values, or leave m unset"
            )

    # ----- derived quantities -------------------------------------------------------
    @property
    def chapter_width(self) -> bool:
        """Whether the heads split the model width (h p = d), as in the chapter."""
        return self.heads * self.head_dim == self.d

    @property
    def query_width(self) -> int:
        """h p: the width of the projected queries (and of the output projection's input)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """h_kv p: the width of the projected keys and of the values."""
        return self.kv_heads * self.head_dim

    @property
    def softmax_scale(self) -> float:
        """The factor on the scores before the softmax: ``scale``, or 1 / sqrt(p)."""
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale

    @property
    def group_size(self) -> int:
        """Query heads that share one key/value head (h / h_kv)."""
        return self.heads // self.kv_heads

    @property
    def variant(self) -> str:
        if self.kv_heads == self.heads:
            return "mha"
        return "mqa" if self.kv_heads == 1 else "gqa"

    @property
    def id(self) -> str:
        """Stable short id, e.g. ``torch-batched-cpu-f32-fwd-b8-n512-m512-d256-h8-kv8``; a
        head width apart from d adds ``-p<head_dim>``, a scale other than 1/sqrt(p)
        ``-s<scale>``."""
        dt = {"float32": "f32", "bfloat16": "bf16"}[self.dtype]
        parts = [self.framework, self.backend, self.device, dt, MODE_IDS[self.mode],
                 f"b{self.batch}", f"n{self.n}", f"m{self.m}", f"d{self.d}",
                 f"h{self.heads}", f"kv{self.kv_heads}"]
        if not self.chapter_width:
            parts.append(f"p{self.head_dim}")
        if self.scale is not None:
            parts.append(f"s{self.scale:.8g}")
        if self.cross:
            parts.append("cross")
        if self.masked:
            parts.append("masked")
        if self.causal:
            parts.append("causal")
        if self.dropout:
            parts.append(f"drop{self.dropout:g}")
        return "-".join(parts)

    @property
    def call_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a layer call beyond (queries, keys, values, valid_lens):
        ``causal=True`` for a causal cell, none otherwise (so a plug-in layer that takes no
        ``causal`` still runs every other cell)."""
        return {"causal": True} if self.causal else {}

    def replace(self, **changes: Any) -> AttentionConfig:
        """A copy with some fields changed (validated again); m/kv_heads/head_dim follow
        n/heads/d unless given, when they were defaulted."""
        fields = self.to_dict()
        stepwise = changes.get("mode", self.mode) in ("decode", "prefix")
        if "n" in changes and "m" not in changes and not self.cross and not stepwise:
            fields["m"] = None
        if "heads" in changes and "kv_heads" not in changes and self.kv_heads == self.heads:
            fields["kv_heads"] = None
        fields.update(changes)
        return AttentionConfig(**fields)

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``head_dim`` None where it is d / heads (as ``scale`` is where it is
        the default): a chapter cell's dict carries nothing new, and a copy with d or heads
        changed stays consistent. ``from_dict`` reads it back, and reads dicts written
        before the two fields existed."""
        fields = dataclasses.asdict(self)
        if self.chapter_width:
            fields["head_dim"] = None
        return fields

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; allowed: {sorted(known)}")
        return cls(**data)


def framework_installed(framework: str) -> bool:
    module = {"torch": "torch", "jax": "flax"}[framework]
    return importlib.util.find_spec(module) is not None and (
        framework != "jax" or importlib.util.find_spec("jax") is not None)


# ----- presets ----------------------------------------------------------------------
def head_sweep(framework: str = "torch", backend: str = "batched",
               heads: tuple[int, ...] = HEAD_SWEEP, **overrides: Any) -> list[AttentionConfig]:
    """Exercise 6.4: d=256, n=512, batch 8, one config per head count."""
    base = {**CHAPTER_SHAPE.fields(), **overrides}
    return [AttentionConfig(framework=framework, backend=backend, heads=h, **base) for h in heads]


PRESETS: dict[str, dict[str, Any]] = {
    # name: keyword arguments of head_sweep / AttentionConfig
    "chapter": {"heads": (1, 8, 64)},
    "heads": {"heads": HEAD_SWEEP},
    "tiny": {"heads": (1, 2), "batch": 2, "n": 32, "d": 32},
    "softmax-heavy": {"heads": (1, 4), "batch": 2, "n": 1024, "d": 16},
}


def preset(name: str, framework: str = "torch", backend: str = "batched",
           **overrides: Any) -> list[AttentionConfig]:
    """The configs of a named preset for one framework and backend."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    kwargs = {**PRESETS[name], **overrides}
    return head_sweep(framework, backend, **kwargs)
