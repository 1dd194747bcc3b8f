"""Layer 3: the small Dask runtime: client, spans, keys, reductions, shards, memory budgets."""
