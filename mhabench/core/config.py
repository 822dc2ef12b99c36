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
from dataclasses import dataclass
from typing import Any

from mhabench.core import backends
from mhabench.core.grids import CHAPTER_SHAPE, HEAD_SWEEP

FRAMEWORKS = ("torch", "jax")
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

    ``n`` queries attend over ``m`` keys/values of width ``d`` split into ``heads`` query
    heads of width ``p = d / heads`` and ``kv_heads`` key/value heads (``kv_heads ==
    heads``: MHA, ``1``: MQA, otherwise GQA). Self-attention (``cross=False``) feeds one
    tensor as queries, keys and values, so ``m`` must equal ``n``; ``m=None`` means ``n``.
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

    def __post_init__(self) -> None:
        # Normalise the defaults that depend on other fields (frozen: go through object).
        if self.m is None:
            object.__setattr__(self, "m", self.n)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        self._validate()

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
        if self.d % self.heads:
            divisors = [h for h in range(1, self.d + 1) if self.d % h == 0]
            shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            raise ValueError(f"heads={self.heads} must divide d={self.d}; allowed heads: {shown}")
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
    def head_dim(self) -> int:
        """p = d / h, the width of one head."""
        return self.d // self.heads

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
        """Stable short id, e.g. ``torch-batched-cpu-f32-fwd-b8-n512-m512-d256-h8-kv8``."""
        dt = {"float32": "f32", "bfloat16": "bf16"}[self.dtype]
        parts = [self.framework, self.backend, self.device, dt, MODE_IDS[self.mode],
                 f"b{self.batch}", f"n{self.n}", f"m{self.m}", f"d{self.d}",
                 f"h{self.heads}", f"kv{self.kv_heads}"]
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
        """A copy with some fields changed (validated again); m/kv_heads follow n/heads
        unless given, when they were defaulted."""
        fields = self.to_dict()
        stepwise = changes.get("mode", self.mode) in ("decode", "prefix")
        if "n" in changes and "m" not in changes and not self.cross and not stepwise:
            fields["m"] = None
        if "heads" in changes and "kv_heads" not in changes and self.kv_heads == self.heads:
            fields["kv_heads"] = None
        fields.update(changes)
        return AttentionConfig(**fields)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
