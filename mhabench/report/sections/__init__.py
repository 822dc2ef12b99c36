"""The report's section builders about one set of results, one module per family, each
builder taking the shared :class:`~mhabench.report.context.Context` and returning a
:class:`~mhabench.report.types.Section`: :mod:`.overview` (machine, Exercise 6.4, measured
vs the FLOP model), :mod:`.gpu` (GPU kernels against the peak), :mod:`.memory` (kernels
and step memory), :mod:`.model` (per-head decomposition, time model), :mod:`.validation`
(random off-grid validation), :mod:`.compare` (scaling, cross, GQA, decoding, training,
frameworks, machines), :mod:`.models` (published models) and :mod:`.profile` (profiler
traces). Sections about changes across commits, dependency sets and releases are in
:mod:`.changes`."""
