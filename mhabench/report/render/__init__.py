"""Rendering a built report: :mod:`.html` (the offline page), :mod:`.markdown`,
:mod:`.plots` (PNG with matplotlib), :mod:`.formatting` (how a value prints),
:mod:`.palette` (one colour per backend, one marker per framework) and :mod:`.excerpt`
(which rows of a per-cell table the pages show, and its CSV file)."""
