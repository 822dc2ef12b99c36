"""Attention backends are plug-ins: one registry describes mhabench's own and a user's.

A :class:`Backend` is a description: a name, its framework, what it supports (modes,
grouped key/value heads, dropout), whether its attention writes the (b, h, n, m) map, and
what builds its layer: ``impl``, one of mhabench's own implementations by name (a layout
of mhabench's layer, "reference", "compiled", ...), ``attend``, an attention function on
projected heads, or ``build``, a plug-in's whole layer. The registry never imports an
implementation: each framework's ``mhabench.layers.<framework>.steps`` builds a config's
layer from its description. Configs, the asv grid, the agreement tests and the report read
backends from here only, so a registered backend runs everywhere a built-in one does.

Two ways to add one:

- :func:`register_attention`: a function on projected heads,
  ``attend(q, k, v, valid_lens) -> out`` (q (b, h, n, p), k and v (b, h_kv, m, p));
  mhabench's batched layer runs around it, so it gets forward, train and decode steps.
  A ``causal`` keyword earns the ``prefix`` mode, a ``scale`` keyword the cells with a
  softmax scale other than 1/sqrt(p) (docs/backends.md).
- :func:`register` of a :class:`Backend` whose ``build(config, weights)`` returns a whole
  layer called as ``layer(queries, keys, values, valid_lens) -> (b, n, d)``, as the
  frameworks' own layers (``reference``) are.

Plug-ins outside mhabench are loaded the first time the registry is read: every entry
point of the group ``mhabench.backends`` (a module, or a callable that registers when
called) and every module named in ``MHABENCH_BACKENDS`` (comma-separated; for an asv run,
put the module's folder in ``ASV_PYTHONPATH``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mhabench.core.grids import CHAPTER_BACKENDS, NEWER_BACKENDS

ENTRY_POINT_GROUP = "mhabench.backends"
ENV_VAR = "MHABENCH_BACKENDS"
ALL_MODES = ("forward", "train", "decode", "prefix")
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class Backend:
    """One attention implementation for one framework."""

    name: str
    framework: str
    # A plug-in's whole layer: build(config, weights) -> layer. Exactly one of build,
    # attend and impl says what builds the layer.
    build: Callable[[Any, dict[str, Any]], Any] | None = field(default=None, compare=False)
    # An attention function on projected heads, run inside mhabench's batched layer;
    # attend_groups: it takes grouped key/value heads (else the layer repeats them).
    attend: Callable[..., Any] | None = field(default=None, compare=False)
    attend_groups: bool = True
    # mhabench's own implementation, by name: a layout of its layer (loop, batched, fused)
    # or one of the framework's extras; the framework's steps module knows how to build it.
    impl: str | None = None
    modes: tuple[str, ...] = ALL_MODES
    gqa: bool = True  # runs kv_heads < heads
    dropout: bool = True  # runs dropout > 0 in train mode
    causal: bool = True  # runs causal=True (its layer or attend takes ``causal``)
    # Runs a head width p with h p != d (``AttentionConfig.head_dim``), and a softmax scale
    # other than 1/sqrt(p) (``AttentionConfig.scale``). None: mhabench's own layers and an
    # attention function on projected heads run any width (it sees p in q's shape) and a
    # function takes the scale if it has a ``scale`` keyword; a plug-in's whole layer
    # (``build``) neither, unless it says so (it reads them from the config).
    head_width: bool | None = None
    scale: bool | None = None
    library: bool = False  # attention is one library call: the kernel that ran is detected
    materialises: bool = True  # writes the (b, h, n, m) map (the cost model's memory budget)
    # The kernel its fused call is forced to (torch SDPA's sdpa_kernel, JAX's implementation=);
    # None: the library's choice.
    sdpa_kernel: str | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")
    summary: str = ""
    origin: str = "mhabench"
    # Modes on a device where they differ from ``modes`` (a library's kernel may lack a
    # backward on one device): ((device, modes), ...).
    device_modes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # A backend that builds a block mask from the lengths on every masked call evaluates
    # the mask on each (b, query, key) element, queries and keys padded to this block
    # (FlexAttention's create_block_mask); None: it builds no such mask.
    mask_block: int | None = None
    # The key mask (valid_lens) is built and applied inside one compiled graph: XLA fuses
    # the compare and select of every JAX step (all run under jit, plug-ins too) into its
    # softmax, inductor those of torch.compile: no ops of its own run per masked call,
    # where eager torch backends dispatch them each call. None: the framework's way (JAX
    # yes, torch no).
    fuses_mask: bool | None = None

    def modes_on(self, device: str) -> tuple[str, ...]:
        """The modes this backend runs on ``device``."""
        return dict(self.device_modes).get(device, self.modes)

    def __post_init__(self) -> None:
        if self.fuses_mask is None:
            object.__setattr__(self, "fuses_mask", self.framework == "jax")
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"backend name {self.name!r} is not allowed; use 1-32 lower-case "
                             "letters, digits and underscores, starting with a letter")
        for modes in (self.modes, *(m for _, m in self.device_modes)):
            unknown = sorted(set(modes) - set(ALL_MODES))
            if not modes or unknown:
                raise ValueError(f"modes={modes!r} is not allowed; choose from "
                                 f"{', '.join(ALL_MODES)}")
        given = [k for k in ("build", "attend", "impl") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"backend {self.name!r}: give exactly one of build, attend and "
                             f"impl (got {', '.join(given) or 'none'})")
        for key in ("build", "attend"):
            if getattr(self, key) is not None and not callable(getattr(self, key)):
                raise ValueError(f"backend {self.name!r}: {key}={getattr(self, key)!r} is "
                                 "not callable")
        if self.head_width is None:
            object.__setattr__(self, "head_width", self.build is None)
        if self.scale is None:
            object.__setattr__(self, "scale", self.impl is not None or (
                self.attend is not None and takes_keyword(self.attend, "scale")))


def takes_keyword(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` accepts the keyword ``name`` (or any keyword)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume not
        return False
    return any((p.name == name and p.kind != p.POSITIONAL_ONLY) or p.kind == p.VAR_KEYWORD
               for p in parameters)


_REGISTRY: dict[tuple[str, str], Backend] = {}
_PLUGINS_LOADED = False


def register(backend: Backend, replace: bool = False) -> Backend:
    """Add ``backend``; a second backend of the same name and framework is an error unless
    ``replace`` (registering the very same one again is a no-op)."""
    key = (backend.framework, backend.name)
    old = _REGISTRY.get(key)
    if old is not None and not replace and (old != backend or old.build is not backend.build
                                            or old.attend is not backend.attend):
        raise ValueError(f"backend {backend.name!r} for {backend.framework} is already "
                         f"registered (by {old.origin}); pass replace=True to replace it")
    _REGISTRY[key] = backend
    return backend


def register_attention(name: str, framework: str, attend: Callable[..., Any], *,
                       gqa: bool = True, materialises: bool = True,
                       modes: tuple[str, ...] | None = None, summary: str = "") -> Backend:
    """Register ``attend(q, k, v, valid_lens[, causal][, scale]) -> out`` (see the module
    docstring) inside mhabench's batched layer. ``gqa=False``: the layer repeats each
    key/value head for its query heads before the call. ``modes`` defaults to forward,
    train and decode, plus prefix when ``attend`` takes ``causal`` (and causal cells only
    then). Cells with a softmax scale other than 1/sqrt(p) run only when it takes
    ``scale``."""
    if not callable(attend):
        raise ValueError(f"attend={attend!r} is not callable")
    takes_causal = "causal" in inspect.signature(attend).parameters
    if modes is None:
        modes = ALL_MODES if takes_causal else ("forward", "train", "decode")

    origin = getattr(attend, "__module__", None) or "user"
    return register(Backend(name, framework, attend=attend, attend_groups=gqa,
                            modes=tuple(modes), gqa=True, dropout=False, causal=takes_causal,
                            materialises=materialises, summary=summary, origin=origin))


def call_attention(attend: Callable[..., Any], q: Any, k: Any, v: Any, valid_lens: Any,
                   causal: bool = False, scale: float | None = None) -> Any:
    """Call a registered attention function on projected heads (``causal`` and ``scale``
    passed only when set: a function without the keyword runs every other cell; None is
    the default scale 1/sqrt(p)) and check that it returned q's shape, (b, h, n, p)."""
    extra: dict[str, Any] = {}
    if causal:
        extra["causal"] = True
    if scale is not None:
        extra["scale"] = scale
    out = attend(q, k, v, valid_lens, **extra)
    if tuple(out.shape) != tuple(q.shape):
        raise ValueError(f"the attention function returned shape {tuple(out.shape)}; "
                         f"expected (b, h, n, p) = {tuple(q.shape)}")
    return out


@functools.cache
def checked(attend: Callable[..., Any]) -> Callable[..., Any]:
    """``attend`` called through :func:`call_attention`, as a layer's ``core`` calls it:
    ``(q, k, v, valid_lens, causal, scale)``. One wrapper per function, so a JAX layer, which
    keeps it as a static attribute, reads the same one on every build."""
    return functools.partial(call_attention, attend)


Builder = Callable[[Any, dict[str, Any], "Backend"], Any]


def layer_builders(build_layer: Callable[..., Any]) -> dict[str, Builder]:
    """The builders both frameworks share, around their
    ``build_layer(config, weights, layout, core=, kernel=)``: the three layouts (a forced
    kernel for the fused one) and an attention function inside the batched layout."""
    def own(config: Any, weights: dict[str, Any], backend: Backend) -> Any:
        return build_layer(config, weights, backend.impl, kernel=backend.sdpa_kernel)

    def attend(config: Any, weights: dict[str, Any], backend: Backend) -> Any:
        core = (checked(backend.attend), backend.attend_groups)
        return build_layer(config, weights, "batched", core=core)

    return {"loop": own, "batched": own, "fused": own, "attend": attend}


def build(config: Any, weights: dict[str, Any], builders: Mapping[str, Builder]) -> Any:
    """``config``'s layer with ``weights``, from its backend's description: a plug-in's own
    ``build``; else ``builders["attend"]`` for an attention function, ``builders[impl]``
    for one of mhabench's own. Each framework's steps module passes its builders, so the
    registry imports no implementation."""
    backend = get(config.framework, config.backend)
    if backend.build is not None:
        return backend.build(config, weights)
    return builders["attend" if backend.attend is not None else backend.impl](
        config, weights, backend)


for _fw in ("torch", "jax"):
    register(Backend("loop", _fw, impl="loop", summary="one head at a time"))
    register(Backend("batched", _fw, impl="batched",
                     summary="heads folded into the batch axis (the chapter's layout)"))
    register(Backend("fused", _fw, impl="fused", library=True, dropout=_fw == "torch",
                     summary="torch's scaled_dot_product_attention" if _fw == "torch"
                     else "jax.nn.dot_product_attention"))
    # torch.nn.MultiheadAttention splits embed_dim into its heads (h p = d); neither
    # layer takes a softmax scale.
    register(Backend("reference", _fw, impl="reference", modes=("forward", "train"),
                     gqa=False, head_width=_fw == "jax", scale=False, library=True,
                     summary="the framework's own layer"))
# The fused call with one kernel forced and no fallback: torch's SDPA through
# torch.nn.attention.sdpa_kernel, JAX's dot_product_attention through implementation=.
# A kernel that cannot take a cell (dtype, GQA, head width, dropout) fails the build with
# the library's reason, so the cell is n/a; the devices each kernel exists on.
FORCED_KERNELS = {"torch": {"flash": ("cpu", "cuda"), "efficient": ("cuda",),
                            "cudnn": ("cuda",), "math": ("cpu", "cuda")},
                  "jax": {"xla": ("cpu", "cuda"), "cudnn": ("cuda",)}}
for _fw, _kernels in FORCED_KERNELS.items():
    for _kernel, _devices in _kernels.items():
        register(Backend(f"fused_{_kernel}", _fw, impl="fused", library=True,
                         dropout=_fw == "torch", sdpa_kernel=_kernel, devices=_devices,
                         summary=f"the fused call forced to its {_kernel} kernel"))
register(Backend("compiled", "torch", impl="compiled", fuses_mask=True,
                 summary="torch.compile of the batched layout (recompiles are errors)"))
# FlexAttention has no backward on CPU (torch 2.13 raises for inputs that require grad):
# train mode on CUDA only. Its block mask is built in blocks of MASK_BLOCK queries and keys
# (torch's _DEFAULT_SPARSE_BLOCK_SIZE; a test checks it).
MASK_BLOCK = 128
register(Backend("flex", "torch", impl="flex", modes=("forward", "decode", "prefix"),
                 dropout=False, materialises=False, device_modes=(("cuda", ALL_MODES),),
                 mask_block=MASK_BLOCK,
                 summary="FlexAttention under torch.compile: block mask from valid_lens, "
                 "enable_gqa (recompiles are errors)"))
# Online softmax over key blocks (mhabench.layers.jax.blockwise), run inside the batched
# layer the way a plug-in's attention function is. Its tiles hold KEY_BLOCK keys (fewer
# when m is shorter), and it pads the keys to whole tiles, so it scores the padding too.
KEY_BLOCK = 64
register(Backend("blockwise", "jax", impl="blockwise", gqa=True, dropout=False,
                 materialises=False,
                 summary="online softmax over key blocks (lax.scan), never the whole map"))
FORCED = tuple(dict.fromkeys(f"fused_{k}" for ks in FORCED_KERNELS.values() for k in ks))
# Every built-in, in the order names() lists them.
BUILTIN = CHAPTER_BACKENDS + NEWER_BACKENDS + FORCED


def load_plugins() -> None:
    """Import the out-of-tree backends (entry points, then ``MHABENCH_BACKENDS``) once."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        loaded = entry.load()
        if callable(loaded) and not inspect.ismodule(loaded):
            loaded()
    for module in filter(None, (m.strip() for m in os.environ.get(ENV_VAR, "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(f"{ENV_VAR}: module {module!r} cannot be imported ({err})") from err


def names(framework: str | None = None) -> tuple[str, ...]:
    """Backend names (of one framework, or of any): the built-in ones first."""
    load_plugins()
    found = {name for fw, name in _REGISTRY if framework in (None, fw)}
    return tuple([n for n in BUILTIN if n in found] + sorted(found - set(BUILTIN)))


def plugin_names() -> tuple[str, ...]:
    """Names registered from outside mhabench (entry points, MHABENCH_BACKENDS, a user's
    own code), of any framework."""
    load_plugins()
    return tuple(sorted({b.name for b in _REGISTRY.values()
                         if b.origin.split(".")[0] != "mhabench"}))


def get(framework: str, name: str) -> Backend:
    """The backend ``name`` of ``framework``; a ValueError lists the ones there are."""
    load_plugins()
    backend = _REGISTRY.get((framework, name))
    if backend is None:
        raise ValueError(f"backend={name!r} is not allowed for framework={framework!r}; "
                         f"choose one of {', '.join(names(framework))} (a plug-in's "
                         f"backends load through {ENV_VAR} or its package's entry point)")
    return backend
