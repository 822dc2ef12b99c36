"""Comparing two or more sides of one cell with fresh interleaved asv processes: two commits
(:mod:`.gate`, and the confirmation of a report's steps), one commit in two dependency sets
(:mod:`.versions`) or in an ordered list of them (:mod:`.releases`), the sets in
:mod:`.sides` and built and timed in :mod:`.dependency_sets`, commits in :mod:`.rounds`; the
culprit search over commits or releases (:mod:`.bisect`). The process is the unit of
evidence (:mod:`mhabench.analysis.comparisons.process_compare`)."""
