"""The commands about one config, or a sample of them: ``cost`` (the cost model's terms),
``time`` (timed on this machine), ``predict`` (the time model's prediction), ``validate``
(random configs off the grid timed against the model), ``profile`` (traces and their
region breakdown) and ``check`` (a backend's outputs against the reference)."""
