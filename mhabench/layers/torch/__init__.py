"""PyTorch layers: :mod:`.attention` (loop, batched, fused), :mod:`.decode`,
:mod:`.compiled` (torch.compile), :mod:`.flex` (FlexAttention) and :mod:`.steps`."""
