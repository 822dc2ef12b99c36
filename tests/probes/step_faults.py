"""Minor page faults of each of 9 timed calls of a GQA cell, printed as a JSON list.

argv: FRAMEWORK MODE, MODE "retain" (the process set up as the asv suite sets up its
processes, mhabench.bench at import) or "default" (glibc's defaults)."""

import json
import sys

from mhabench.core.config import AttentionConfig
from mhabench.measure import timing
from mhabench.measure.allocator import minor_faults

if sys.argv[2] == "retain":  # the module configures the process at import, as asv runs it
    from mhabench.bench.methods import WARMUP
else:  # glibc's defaults: the same process set-up without the allocator options
    import torch

    torch.set_num_threads(1)
    WARMUP = 1
config = AttentionConfig(framework=sys.argv[1], backend="batched", batch=2, n=512, d=256,
                         heads=16, kv_heads=4)
step = timing.prepare(config, WARMUP)
faults = []
for _ in range(9):
    before = minor_faults()
    step()
    faults.append(minor_faults() - before)
print(json.dumps(faults))
