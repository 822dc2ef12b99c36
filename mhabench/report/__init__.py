"""The report: asv results -> sections of tables, plots and findings -> HTML, Markdown, CSV.

Where things are:

- :mod:`.types`: the data a report is made of (:class:`~.types.Section`, ``Table``,
  ``Plot``, ``Report``); no computation.
- :mod:`.context`: what every section builder reads (results frame, fitted models, the
  commit order, ...) and the helpers several builders share (head sweeps, shapes).
- :mod:`.sections`: the builders, one module per family, about one set of results
  (machine and calibration, the time model, the comparisons, models, profiles);
  :mod:`.sections.changes`: those about changes across commits, dependency sets and
  releases.
- :mod:`.findings`: the findings, built last from the other sections' tables.
- :mod:`.build`: the section list in page order, :func:`~.build.build_report` and
  :func:`~.build.write_report` (never overwrites).
- :mod:`.render`: HTML, Markdown, plots, number formatting, the palette, and which rows of
  a per-cell table the pages show (its CSV holds them all).

This package's ``__init__`` imports nothing, so importing one of its modules loads only
what that module needs.
"""
