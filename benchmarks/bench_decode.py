"""Decoding one token at a time (Exercises 7.2 and 8): KV cache, prefix, cross.

The classes are ``mhabench.bench.decode``'s, which a user's suite (``mhabench init``)
reuses; subclassed here, asv names them ``bench_decode.<Class>``."""

from mhabench.bench import decode


class KVCacheDecode(decode.KVCacheDecode):
    """A decode step over a KV cache, MHA to MQA (``mhabench.bench.decode``)."""


class PrefixDecode(decode.PrefixDecode):
    """The same token without a cache (``mhabench.bench.decode``)."""


class CrossDecodeSource(decode.CrossDecodeSource):
    """A query over a cached or recomputed source (``mhabench.bench.decode``)."""
