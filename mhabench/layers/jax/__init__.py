"""JAX / Flax NNX layers: :mod:`.attention` (loop, batched, fused), :mod:`.decode`,
:mod:`.blockwise` (online softmax over key blocks) and :mod:`.steps`."""
