"""Measuring a config on this machine. Here: the clock (:mod:`.timing`), several configs
timed round-robin (:mod:`.interleaved`), the allocator (:mod:`.allocator`), a step's own
memory (:mod:`.memory`), cold GPU caches (:mod:`.cache_flush`), compile time
(:mod:`.compile_time`), calibration kernels (:mod:`.calibration`) and the agreement check
between backends (:mod:`.agreement`). In subpackages: the conditions a cell is timed under
(the machine's facts, its load, its speed, the GPU's state: :mod:`.conditions`), and what a
profiler or the compiled code says a step did (traces and their breakdown, device time, the
kernel that ran: :mod:`.profiler`). Builds on :mod:`mhabench.layers` and
:mod:`mhabench.core`."""
