"""Measuring a config on this machine: the clock (:mod:`.timing`), the allocator
(:mod:`.allocator`), a step's own memory (:mod:`.memory`), device and compile time,
calibration kernels, machine facts, profiler traces and their breakdown, and the agreement
check between backends. Builds on :mod:`mhabench.layers` and :mod:`mhabench.core`."""
