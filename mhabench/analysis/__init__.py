"""Analysis of asv results: the calibrated time model (:mod:`.timemodel`), its validation
(:mod:`.validation`), the per-head decomposition of a head sweep (:mod:`.decomposition`)
and regressions across commits (:mod:`.regressions`). Pure functions of the results frame
(and, for validation, fresh timings); the report and the CLI build on them."""
