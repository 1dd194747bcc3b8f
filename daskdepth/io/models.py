"""Loading saved models: :func:`load_model` (public as :func:`daskdepth.load`).

The store is decoded by :mod:`daskdepth.storage.modelformat`; this module
decides which class may be built from it (only those of
:data:`daskdepth.estimators.ESTIMATORS`, never a class a file names) and
cross-checks the fitted attributes before the model is handed out.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import ModelFormatError
from ..estimators import ESTIMATORS
from ..storage.modelformat import corrupted, malformed, read_model


def load_model(path: str | os.PathLike[str],
               storage_options: dict[str, Any] | None = None) -> Any:
    """Load a model saved with ``model.save(path)``.

    Parameters
    ----------
    path : str or path-like
        Local path or fsspec URL of the saved model.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    AIIRW, IRW, Halfspace or HalfspaceMass
        A fitted model that scores identically to the saved one.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ModelFormatError
        ``path`` is not a daskdepth model, is corrupted (missing or modified
        arrays or attributes), or was written by a newer daskdepth.

    Examples
    --------
    >>> import os, tempfile, numpy as np, daskdepth
    >>> X = np.random.default_rng(1).normal(size=(200, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "irw.zarr")
    >>> _ = daskdepth.IRW(n_directions=50, random_state=0).fit(X).save(path)
    >>> model = load_model(path)
    >>> type(model).__name__, model.n_directions_
    ('IRW', 50)
    """
    stored = read_model(path, storage_options)
    cls = ESTIMATORS.get(stored.estimator)
    if cls is None:
        raise ModelFormatError(f"the model {stored.where!r} is a {stored.estimator!r}, which "
                               f"this daskdepth does not have ({', '.join(sorted(ESTIMATORS))})")
    try:
        model = cls(**stored.params)
    except TypeError as exc:
        raise ModelFormatError(f"the model {stored.where!r} has parameters this daskdepth's "
                               f"{stored.estimator} does not take ({exc}); load it with the "
                               "version that saved it") from None
    try:
        for key, value in stored.state.items():
            setattr(model, key, value)
    except (TypeError, AttributeError) as exc:  # e.g. a read-only attribute of the class
        raise malformed(stored.where, exc) from None
    _check_consistency(model, stored.where)
    return model


def _check_consistency(model: Any, where: str) -> None:
    """Cheap cross-checks between the fitted attributes."""
    summary = getattr(model, "summary_", None)
    if summary is None:
        raise corrupted(where, "it has no summary_")
    d = getattr(model, "n_features_in_", None)
    directions = np.asarray(getattr(model, "directions_", np.empty((0, 0))))
    if directions.ndim != 2 or directions.shape[1] != d:
        raise corrupted(where, f"directions_ has shape {directions.shape} for {d} features")
    if getattr(model, "n_directions_", directions.shape[0]) != directions.shape[0]:
        raise corrupted(where, "n_directions_ does not match directions_")
    if getattr(summary, "n", None) != getattr(model, "n_samples_fit_", None):
        raise corrupted(where, "the summary's row count does not match n_samples_fit_")
