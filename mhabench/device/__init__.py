"""The asv suite on a lent GPU machine in one bounded command (:mod:`.run`, what
``scripts/gpu-grid`` starts): which classes fit the time left (:mod:`.plan`) and the git
history such a machine lacks, carried in a bundle (:mod:`.bundle`)."""
