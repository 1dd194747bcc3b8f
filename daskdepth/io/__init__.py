"""Layer 9: batch-job I/O over Zarr and xarray, and loading saved models.

:mod:`~daskdepth.io.inputs` (a 2-D array of a Zarr store as a lazy DataArray),
:mod:`~daskdepth.io.outputs` (a Dataset written as a Zarr store),
:mod:`~daskdepth.io.models` (:func:`~daskdepth.io.models.load_model`, public as
:func:`daskdepth.load`) and :mod:`~daskdepth.io.xarray`
(:func:`~daskdepth.io.xarray.score_dataset`).  These modules use the
estimators; :mod:`daskdepth.storage`, below the estimators, does not.
"""
