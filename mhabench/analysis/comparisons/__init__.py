"""Two sides of one cell compared with the timing process as the unit of evidence, as the
gate, ``mhabench confirm``, ``versions``, ``releases`` and ``bisect`` judge them
(:mod:`.process_compare`, with the modes of a cell's processes lined up in :mod:`.modes`);
and the summaries ``mhabench versions`` and ``mhabench releases`` write, read into tables
(:mod:`.versions`, :mod:`.releases`)."""
