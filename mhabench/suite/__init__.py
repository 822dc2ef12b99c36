"""What runs the asv suite for users and operators: the regression gate (:mod:`.gate`), the
offline asv site (:mod:`.asv_site`), a bounded run on a lent device (:mod:`.devicerun`,
:mod:`.bundle`) and merging another machine's results (:mod:`.merge`)."""
