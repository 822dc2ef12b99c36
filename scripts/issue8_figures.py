"""Figures of issue 8, printed as text (nothing written): one process, 1 thread, every
variant interleaved with the others for several rounds, medians of all timed calls (through
mhabench.measure.timing.measure).

    python scripts/issue8_figures.py labels     # torch region labels: before/after, per head
    python scripts/issue8_figures.py decode     # decode step vs KV-cache bytes read per step
    python scripts/issue8_figures.py baselines  # KV cache vs no cache; cached vs recomputed source
    python scripts/issue8_figures.py memory     # step-only memory against the cost model
"""

from __future__ import annotations

import statistics
import sys

from torch.autograd import profiler

from mhabench.core.config import AttentionConfig
from mhabench.core.cost import cost
from mhabench.layers.torch import attention as torch_attention
from mhabench.measure import memory, timing

ROUNDS = 5


def interleaved(cells: dict[str, tuple[AttentionConfig, bool]], repeats: int) -> dict[str, float]:
    """Median seconds per cell; the flag restores the old always-on record_function labels."""
    new_region, times = torch_attention.region, {name: [] for name in cells}
    for _ in range(ROUNDS):
        for name, (config, old_labels) in cells.items():
            torch_attention.region = profiler.record_function if old_labels else new_region
            times[name] += timing.measure(config, repeats, warmup=1).times_s
    torch_attention.region = new_region
    return {name: statistics.median(t) for name, t in times.items()}


def labels() -> None:
    cells = {f"{b} h{h} {w}": (AttentionConfig(backend=b, batch=1, n=32, d=256, heads=h),
                               w == "before")
             for b in ("loop", "batched") for h in (1, 64) for w in ("before", "after")}
    med = interleaved(cells, 15)
    for b in ("loop", "batched"):
        for w in ("before", "after"):
            t1, t64 = med[f"{b} h1 {w}"], med[f"{b} h64 {w}"]
            print(f"{b:8s} {w:6s} h=1 {t1 * 1e6:8.1f} us  h=64 {t64 * 1e6:9.1f} us  "
                  f"per head (t64 - t1) / 63 = {(t64 - t1) / 63 * 1e6:6.2f} us")
        saved = med[f"{b} h64 before"] - med[f"{b} h64 after"]
        print(f"{b:8s} labels at h=64: {saved * 1e6:.1f} us per step = "
              f"{saved / 64 * 1e6:.2f} us per head")


def decode() -> None:
    cells = {}
    for fw in ("torch", "jax"):
        for backend in ("batched", "fused"):
            for m in (128, 1024, 4096):
                for kv in (16, 4, 1):
                    c = AttentionConfig(framework=fw, backend=backend, batch=4, n=1, m=m,
                                        d=256, heads=16, kv_heads=kv, mode="decode")
                    cells[c.id] = (c, False)
    med = interleaved(cells, 10)
    for name, (c, _) in cells.items():
        read = cost(c).kv_cache_bytes_read
        print(f"{c.framework:5s} {c.backend:7s} m={c.m:5d} {c.variant} kv={c.kv_heads:<2d} "
              f"KV read {read / 2**20:7.3f} MiB  step {med[name] * 1e3:8.3f} ms  "
              f"{read / med[name] / 1e9:5.2f} GB/s")


def baselines() -> None:
    cells = {}
    for fw in ("torch", "jax"):
        for backend in ("batched", "fused"):
            for m in (128, 1024):
                dec = AttentionConfig(framework=fw, backend=backend, batch=4, n=1, m=m, d=256,
                                      heads=16, mode="decode")
                cells.update({c.id: (c, False) for c in (dec, dec.replace(mode="prefix"))})
            for m in (1024, 4096):
                src = AttentionConfig(framework=fw, backend=backend, batch=4, n=1, m=m, d=256,
                                      heads=16, mode="decode", cross=True)
                cells.update({c.id: (c, False) for c in (src, src.replace(mode="forward"))})
    med = interleaved(cells, 3)
    for name, (c, _) in cells.items():
        print(f"{name:58s} {med[name] * 1e3:9.2f} ms  model {cost(c).flops_model / 1e6:8.1f} "
              "MFLOP")


def memory_figures() -> None:
    for fw in ("torch", "jax"):
        for backend in ("batched", "fused"):
            for h in (1, 8, 64):
                c = AttentionConfig(framework=fw, backend=backend, batch=2, n=512, d=256,
                                    heads=h)
                measured = memory.step_bytes(c, timing.prepare(c))
                model = cost(c).peak_bytes_estimate
                print(f"{fw:5s} {backend:7s} h={h:<3d} step {measured / 2**20:8.1f} MiB  "
                      f"model {model / 2**20:8.1f} MiB  ratio {measured / model:5.2f}")


if __name__ == "__main__":
    timing.configure_process(1)
    {"labels": labels, "decode": decode, "baselines": baselines,
     "memory": memory_figures}[sys.argv[1]]()
