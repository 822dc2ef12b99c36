"""The analytic cost model: pure arithmetic on an :class:`AttentionConfig`.

Forward pass, one multiply-add = 2 FLOPs, per sequence with n queries, m keys/values,
width d, h query heads and h_kv key/value heads of width p:

=====================================  ===============================
query and output projections           2nd(hp) + 2n(hp)d
key and value projections              2 * 2 m d (h_kv p)
scores Q K^T and mixing A V            2nm(hp) + 2nm(hp)
elementwise on the map (scale, mask,   c * h n m   (c = 5; 6 masked)
softmax): the part that grows with h
=====================================  ===============================

In the chapter's split (p = d/h, so hp = d) self-attention MHA (m = n, h_kv = h) gives
8nd^2 + 4n^2 d: :attr:`Cost.form` is "chapter" there and "general" for the shapes of
published models (hp != d, or h_kv < h). ``flops_model`` is that count (projections +
scores + mixing); the elementwise term is reported beside it because it is what the
chapter's count leaves out.

Each mode counts the step it runs through three lengths (:func:`step_lengths`).

A decode step reads ``kv_cache_bytes_read`` of cached keys/values (whole batch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mhabench.core import backends
from mhabench.core.config import DTYPE_BYTES, AttentionConfig
from mhabench.core.kernel_codes import expected_kernel, materialises

# Elementwise passes over each attention-map element in a forward pass: scale,
# max-subtract, exp, sum, normalise; masking adds one select. XLA's cost_analysis counts
# the same (within 1 %).
ELEMENTWISE_OPS = 5
MASK_OPS = 1
# A training step differentiates w.r.t. the parameters and the layer's input(s), as a layer
# inside a network does: each matmul Y = X W then adds dX = dY W^T and dW = X^T dY, two
# matmuls of its own size, so 3x is exact for flops_model (tests check it against
# FlopCounterMode and XLA). Without the input gradient the Q/K/V projections would cost 2x.
TRAIN_FACTOR = 3
# Elementwise FLOPs per map element in a training step (forward, then the backward of
# softmax and scale) and for its mask (a select each way and the comparison), as XLA's
# cost analysis counts them for the batched layout (within 2 %).
TRAIN_ELEMENTWISE_OPS = 13
TRAIN_MASK_OPS = 3


@dataclass(frozen=True)
class Cost:
    """The model's terms for one config, whole batch, one step of its mode."""

    flops_projections: int  # q, k, v, o projections
    flops_attention: int  # scores Q K^T and mixing A V
    flops_elementwise: int  # scale, mask, softmax on the attention map
    flops_model: int  # the chapter's count: projections + attention
    params: int
    attention_map_elements: int  # batch * h * n * m
    attention_map_bytes: int  # what the kernel writes (0 for flash/efficient/cuDNN)
    kv_cache_bytes_per_token: int  # per layer, this config's dtype
    kv_cache_bytes_read: int  # decode: cached K/V one step reads, whole batch (else 0)
    peak_bytes_estimate: int  # rough working-set bound, for memory budgets
    # "chapter": p = d/h and h_kv = h, where the terms are the chapter's 8nd^2 + 4n^2 d;
    # "general": any other head structure (a published model's). Not a count: as_dict
    # leaves it out.
    form: str = "chapter"

    @property
    def flops_total(self) -> int:
        return self.flops_model + self.flops_elementwise

    def as_dict(self) -> dict[str, int]:
        """The counts (every field but ``form``) and ``flops_total``."""
        out = asdict(self)
        del out["form"]
        out["flops_total"] = self.flops_total
        return out


def _width(d: int, heads: int, head_dim: int | None) -> int:
    """p: ``head_dim``, or d / h in the chapter's split."""
    return d // heads if head_dim is None else head_dim


def params(d: int, heads: int, kv_heads: int, head_dim: int | None = None) -> int:
    """2 d (h p) (W_q, W_o) + 2 d (h_kv p) (W_k, W_v); 4d^2 for MHA with p = d/h."""
    p = _width(d, heads, head_dim)
    return 2 * d * (heads * p) + 2 * d * (kv_heads * p)


def kv_cache_bytes_per_token(d: int, heads: int, kv_heads: int, dtype_bytes: int,
                             head_dim: int | None = None) -> int:
    """One key and one value vector of h_kv heads of width p (Exercise 8.2)."""
    return 2 * kv_heads * _width(d, heads, head_dim) * dtype_bytes


def decoder_step_flops(d: int, m: int, heads: int = 1, kv_heads: int | None = None,
                       cached: bool = True, head_dim: int | None = None) -> int:
    """FLOPs to generate one token that cross-attends to a fixed source of m tokens
    (Exercise 7.2): with the projected source keys/values cached, or recomputed."""
    kv_heads = heads if kv_heads is None else kv_heads
    p = _width(d, heads, head_dim)
    q_width, kv_width = heads * p, kv_heads * p
    # q and o projections of the new token; scores + mixing
    flops = 2 * d * q_width + 2 * q_width * d + 4 * m * q_width
    if not cached:
        flops += 2 * 2 * m * d * kv_width
    return flops


def step_lengths(config: AttentionConfig) -> tuple[int, int, int]:
    """(query rows, key positions attended, key/value rows projected) per sequence in one
    step of ``config`` (``mhabench.core.config.MODES``):

    =======================  ==========  ==========  ============
    mode                     queries     keys        K/V projected
    =======================  ==========  ==========  ============
    forward, train           n           m           m
    decode (self, KV cache)  1           m + 1       1 (written into the cache)
    decode, cross=True       n           m           0 (source K/V cached)
    prefix (no cache)        m + 1       m + 1       m + 1 (full map, causal mask)
    =======================  ==========  ==========  ============
    """
    n, m = config.n, config.m
    if config.mode == "decode":
        return (n, m, 0) if config.cross else (1, m + 1, 1)
    if config.mode == "prefix":
        return m + 1, m + 1, m + 1
    return n, m, m


def masks_keys(config: AttentionConfig) -> bool:
    """Whether a step masks keys: a key mask (``valid_lens``), or a causal or prefix step
    (its causal mask)."""
    return config.masked or config.causal or config.mode == "prefix"


def padded(size: int, block: int) -> int:
    """``size`` rounded up to whole blocks of ``block``."""
    return -(-size // block) * block


def block_mask_elements(config: AttentionConfig) -> int:
    """Elements of the dense (b, rows, keys) mask a masked step evaluates where its backend
    builds a block mask on every call (:attr:`~mhabench.core.backends.Backend.mask_block`:
    FlexAttention's ``create_block_mask``, one head for all), rows and keys padded to whole
    blocks; 0 for an unmasked step or a backend that builds none. Once a step: a training
    step's backward reuses the forward's mask."""
    block = backends.get(config.framework, config.backend).mask_block
    if block is None or not masks_keys(config):
        return 0
    rows, keys, _ = step_lengths(config)
    return config.batch * padded(rows, block) * padded(keys, block)


def cost(config: AttentionConfig, kernel: str | None = None) -> Cost:
    """The model's terms for one step of ``config`` (forward, train = 3x forward, decode,
    prefix).

    ``kernel`` is the attention kernel that ran (``mhabench.core.kernel_codes``; recorded by
    the asv suite); by default the one :func:`~mhabench.core.kernel_codes.expected_kernel`
    predicts. It decides whether the attention map counts as written to memory.
    """
    b, m, d, h = config.batch, config.m, config.d, config.heads
    n, keys, projected = step_lengths(config)
    q_width, kv_width = config.query_width, config.kv_width  # h p and h_kv p
    proj_qo = 2 * n * d * q_width + 2 * n * q_width * d
    proj_kv = 2 * 2 * projected * d * kv_width
    attention = 2 * n * keys * q_width + 2 * n * keys * q_width
    # prefix and causal cells mask too; the model counts their whole map, as the eager
    # backends compute it (a causal flash kernel skips about half: the GPU report says so)
    masked = masks_keys(config)
    train = config.mode == "train"
    ops = (TRAIN_ELEMENTWISE_OPS if train else ELEMENTWISE_OPS) + \
        ((TRAIN_MASK_OPS if train else MASK_OPS) if masked else 0)
    elementwise = ops * h * n * keys
    factor = TRAIN_FACTOR if config.mode == "train" else 1
    map_elements = b * h * n * keys
    nbytes = DTYPE_BYTES[config.dtype]
    kernel = expected_kernel(config) if kernel is None else kernel
    materialised = map_elements * nbytes if materialises(kernel) else 0
    # queries and the heads' output (h p wide), keys and values, the layer's output and a
    # cross-attention source (d wide)
    activations = b * (2 * n * q_width + 2 * keys * kv_width + n * d
                       + (m * d if config.cross else 0))
    weights = params(d, h, config.kv_heads, config.head_dim)
    # Scores, masked scores and probabilities can be alive together in eager backends.
    # The loop backend holds one head's map at a time (it writes all h over the step).
    live_map = materialised // h if config.backend == "loop" else materialised
    peak = (3 * live_map + activations * nbytes + weights * nbytes)
    if config.mode == "train":
        peak *= 2  # saved activations plus gradients
    return Cost(
        flops_projections=factor * b * (proj_qo + proj_kv),
        flops_attention=factor * b * attention,
        flops_elementwise=b * elementwise,
        flops_model=factor * b * (proj_qo + proj_kv + attention),
        params=weights,
        attention_map_elements=map_elements,
        attention_map_bytes=materialised,
        kv_cache_bytes_per_token=kv_cache_bytes_per_token(d, h, config.kv_heads, nbytes,
                                                          config.head_dim),
        kv_cache_bytes_read=b * keys * 2 * kv_width * nbytes if config.mode == "decode" else 0,
        peak_bytes_estimate=peak,
        form="chapter" if config.chapter_width and config.kv_heads == h else "general",
    )
