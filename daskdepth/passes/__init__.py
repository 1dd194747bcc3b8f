"""Layer 4: the Dask passes over the rows (moments, leaf counts, scoring)."""
