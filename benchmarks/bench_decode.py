"""Decoding one token at a time (Exercises 7.2 and 8): KV cache, prefix, cross.

The classes live in ``mhabench.bench.decode``, which a user's suite (``mhabench init``)
reuses; exported here, asv names them ``bench_decode.<Class>``."""

from mhabench.bench import decode
from mhabench.bench.reuse import export

KVCacheDecode = export(decode.KVCacheDecode, __name__)
PrefixDecode = export(decode.PrefixDecode, __name__)
CrossDecodeSource = export(decode.CrossDecodeSource, __name__)
