"""The conditions a cell is timed under, recorded beside its time: the machine's facts and
the preflight that refuses a broken one (:mod:`.machine`), the CPU time other processes
took meanwhile (:mod:`.machine_load`), the machine's speed at one moment (:mod:`.speed`)
and the GPU's clocks, power and throttling (:mod:`.gpu_state`)."""
