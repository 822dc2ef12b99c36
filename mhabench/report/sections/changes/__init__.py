"""The report's sections about changes: :mod:`.history` (regressions and track_ values
across commits), :mod:`.versions` (one commit in two dependency sets) and
:mod:`.releases` (one commit across a list of releases)."""
