"""The commands around the asv suite and its results: ``init`` (a plug-in's repository made
an asv project), ``shard`` (the grid split into shards, run, fanned out), ``merge`` (other
results put beside these) and ``report`` (the HTML/Markdown/CSV report)."""
