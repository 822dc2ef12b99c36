"""What a profiler or the compiled code says a step did: torch and JAX profiler traces
(:mod:`.profiling`) and their offline region breakdown (:mod:`.trace_breakdown`), the
device's busy time from the kernels' own intervals (:mod:`.device_time`), and which
attention kernel a call actually ran (:mod:`.kernel_detect`)."""
