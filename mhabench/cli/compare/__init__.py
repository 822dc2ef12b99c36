"""The commands that compare sides of the same cells in fresh interleaved processes (built
on :mod:`mhabench.compare`): ``gate`` (two commits), ``bisect`` (the commit between two
that changed a cell), ``versions`` (one commit in two dependency sets), ``releases`` (one
commit across a list of releases) and ``confirm`` (the report's shifts re-measured)."""
