"""asv benchmarks for mhabench: one module per question, thin classes over
mhabench.measure.timing."""
