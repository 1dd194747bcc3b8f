"""Layer 2: the leaf summaries a fit builds and scoring reads (NumPy only)."""
