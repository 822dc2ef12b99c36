"""The floor everything stands on: the config (:mod:`.config`), the backend registry
(:mod:`.backends`: descriptions and plug-ins' attention functions), the shared weights and
inputs (:mod:`.inputs`), the cost model (:mod:`.cost`) and the kernel each config is
expected to run (:mod:`.kernel_codes`). Imports neither torch nor JAX, so the cost model and
the report work on any machine."""
