"""Regressions across a commit history (:mod:`.regressions`): how each whole run moved and
each cell's commit-to-commit noise (:mod:`.runs`), the level shifts of one cell
(:mod:`.change_points`) and of a backend's cells together (:mod:`.group_change_points`),
and the verdicts of re-measuring them with ``mhabench confirm`` (:mod:`.confirmations`)."""
