"""A grid too large for one machine: its cells split into shards of near-equal predicted
time (:mod:`.shard`), each run by asv on a host of its own (:mod:`.shard_run`), started by
a scheduler (:mod:`.fanout`: Slurm, a CI matrix, Kubernetes) and merged back into one asv
history (:mod:`.merge`, which also imports another machine's results)."""
