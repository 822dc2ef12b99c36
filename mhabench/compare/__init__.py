"""Comparing two or more sides of one cell with fresh interleaved asv processes: two commits
(:mod:`.gate`, and the confirmation of a report's steps), one commit in two dependency sets
(:mod:`.versions`, its sides in :mod:`.sides`), timed the same way in :mod:`.rounds`. The
process is the unit of evidence (:mod:`mhabench.analysis.process_compare`)."""
