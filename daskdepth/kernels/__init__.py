"""Layer 1: NumPy/Numba computations on in-memory arrays. Nothing here knows about Dask."""
