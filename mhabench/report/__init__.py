"""The report: asv results -> sections of tables, plots and findings -> HTML, Markdown, CSV.

Where things are:

- :mod:`.types`: the data a report is made of (:class:`~.types.Section`, ``Table``,
  ``Plot``, ``Report``); no computation.
- :mod:`.context`: what every section builder reads (results frame, fitted models, the
  commit order, ...) and the helpers several builders share (head sweeps, shapes).
- ``sections_*``: the builders, one module per family: :mod:`.sections_overview`
  (machine, Exercise 6.4, measured vs the FLOP model), :mod:`.sections_model` (per-head
  decomposition, time model, random validation), :mod:`.sections_compare` (scaling,
  cross, GQA, decoding, training, frameworks, machines), :mod:`.sections_history`
  (regressions across commits) and :mod:`.sections_profile` (profiler traces).
- :mod:`.build`: the section list in page order, :func:`~.build.build_report` and
  :func:`~.build.write_report` (never overwrites).
- :mod:`.html`, :mod:`.markdown`, :mod:`.plots`, :mod:`.formatting`: rendering;
  :mod:`.excerpt`: which rows of a per-cell table the pages show (its CSV holds them all).

This package's ``__init__`` imports nothing, so importing one of its modules loads only
what that module needs.
"""
