"""Helpers the tests share that are not tests themselves: a scratch clone of the
repository for asv runs, a single-node Slurm cluster, asv against ``measure``."""
