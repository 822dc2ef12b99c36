"""The attention layers, one package per framework (:mod:`.torch`, :mod:`.jax`), each with
the same rooms: ``attention`` (the layer in its layouts), ``decode`` (the KV cache and a
decode step), ``steps`` (a config's layer from its registered backend, and its timed
step), plus the framework's own extra implementations. Imports only :mod:`mhabench.core`."""
