"""Layer 3: the small Dask runtime: client, spans, broadcasts, reductions, memory budgets."""
