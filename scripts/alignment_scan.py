"""What shapes off a multiple of 16 floats cost, printed as text (nothing written): random
aligned forward steps (n, m, d and p multiples of 16) and their twins with n and m 3
shorter and p 1 narrower (less work), timed interleaved on this machine, each against the
time model fitted to asv results with the alignment terms' coefficients then zeroed, so
the ratio of the twins' measured / predicted is what those terms have to explain.

    python scripts/alignment_scan.py --results .asv/results --machine vm
    python scripts/alignment_scan.py --pairs 5 --seed 3

Time it on a quiet machine (no other timing job): the pairs are interleaved, so a slow
stretch hits both twins, but the medians need the rounds.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from dataclasses import replace

import numpy as np

from mhabench.analysis.prediction.timemodel import fit_models, select_model
from mhabench.analysis.results import load_results
from mhabench.core.config import AttentionConfig
from mhabench.measure.interleaved import measure_interleaved
from mhabench.measure.timing import configure_process

BACKENDS = (("jax", "fused"), ("jax", "batched"), ("jax", "blockwise"),
            ("torch", "batched"), ("torch", "fused"), ("torch", "reference"))


def twins(rng: np.random.Generator, framework: str, backend: str
          ) -> tuple[AttentionConfig, AttentionConfig]:
    heads = int(rng.choice([2, 4, 6, 8]))
    p = int(rng.choice([16, 32, 48, 64]))
    n = int(rng.choice([128, 192, 256, 320, 384]))
    cross = bool(rng.random() < 0.3)
    m = int(rng.choice([128, 256, 384])) if cross else n
    aligned = AttentionConfig(framework=framework, backend=backend,
                              batch=int(rng.choice([1, 2])), n=n, m=m, d=heads * p,
                              heads=heads, kv_heads=heads, cross=cross)
    return aligned, aligned.replace(n=n - 3, m=m - 3, d=heads * (p - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=".asv/results")
    parser.add_argument("--machine", default=None, help="asv machine of the results")
    parser.add_argument("--pairs", type=int, default=3, help="pairs per backend (default 3)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configure_process(1)
    frame = load_results(args.results).frame
    models = fit_models(frame)
    rng = np.random.default_rng(args.seed)
    pairs = [twins(rng, fw, be) for fw, be in BACKENDS for _ in range(args.pairs)]
    measured = measure_interleaved([c for pair in pairs for c in pair], rounds=args.rounds,
                                   repeats=2, warmup=1, threads=1)
    ratios = defaultdict(list)
    for aligned, ragged in pairs:
        model = select_model(models, aligned, args.machine)
        plain = replace(model, coef={**model.coef, "unaligned_flops": 0.0,
                                     "unaligned_map": 0.0, "unaligned_rows": 0.0})
        ratio = [measured[c].median_s / plain.predict(c) for c in (aligned, ragged)]
        ratios[(aligned.framework, aligned.backend)].append(ratio[1] / ratio[0])
        print(f"{aligned.id}: measured / predicted {ratio[0]:.3f}, twin {ragged.id} "
              f"{ratio[1]:.3f}: x{ratio[1] / ratio[0]:.3f}")
    for (framework, backend), values in ratios.items():
        median = statistics.median(values)
        print(f"{framework} {backend}: unaligned / aligned, median x{median:.3f}")
    print(f"all: median x{statistics.median(v for vs in ratios.values() for v in vs):.3f} "
          f"over {len(pairs)} pairs")


if __name__ == "__main__":
    main()
