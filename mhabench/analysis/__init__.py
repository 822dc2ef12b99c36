"""Analysis of asv results: pure functions of the results frame (and, for validation,
fresh timings); the report and the CLI build on them.

Here: the results frame itself (:mod:`.results`), timings read at the machine's fast
speed (:mod:`.fast_speed`), what the ``track_`` benchmarks recorded (:mod:`.tracks`),
published models' cells (:mod:`.model_cells`) and the GPU peak classes as rates
(:mod:`.gpu_peak`). In subpackages: the calibrated time model, its per-head decomposition
and its validation (:mod:`.prediction`); regressions across a commit history
(:mod:`.history`); and two sides of a cell compared with the process as the unit of
evidence, with the versions and releases summaries read into tables (:mod:`.comparisons`).
"""
