"""Layer 7: stores on disk, below the estimators (which save themselves through it).

:mod:`~daskdepth.storage.paths` (local paths and URLs, opening a Zarr store),
:mod:`~daskdepth.storage.targets` (which targets may be written, which stores
daskdepth wrote), :mod:`~daskdepth.storage.leases` (which job owns a temporary),
:mod:`~daskdepth.storage.atomic` (safe writes through a temporary sibling),
:mod:`~daskdepth.storage.codec` (values as JSON nodes and Zarr arrays),
:mod:`~daskdepth.storage.blockstore` (a summary's blocks as byte ranges, read
block by block) and :mod:`~daskdepth.storage.modelformat` (the saved-model
document).  Nothing here
imports the estimators, :mod:`daskdepth.io` or :mod:`daskdepth.cli`.
"""
