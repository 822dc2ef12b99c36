"""Predicting a config's time: the calibrated time model (:mod:`.timemodel`) fitted on its
features (:mod:`.features`, with what a decode step reads in :mod:`.decode_reads`) by
:mod:`.solvers`; what it explains (the per-head :mod:`.decomposition` of a head sweep, the
:mod:`.residuals` against each config field); and how well it predicts cells it never
saw (:mod:`.validation`, the random configs ``mhabench validate`` times in
:mod:`.sampling`, several saved validations pooled in :mod:`.validation_samples`)."""
