"""The one-call entry point :func:`score`."""

from __future__ import annotations

from typing import Any

from .registry import make_estimator


def score(X: Any, reference: Any = None, *, depth: str = "ai-irw",
          n_directions: int | str | None = None, covariance: object = "sample",
          tol: float = 1e-4, random_state: Any = None, nan_policy: str = "raise",
          support_fraction: float | None = None, frame: str = "correlation") -> Any:
    """Depth of each row of ``X`` with respect to ``reference`` (default: ``X`` itself).

    Parameters
    ----------
    X : array-like, dask array or xarray.DataArray of shape (n_samples, n_features)
        Points to score.
    reference : same kinds as ``X``, optional
        Reference sample defining the depth; ``None`` scores ``X`` against itself.
    depth : {'ai-irw', 'irw'}, default='ai-irw'
    n_directions, covariance, tol, random_state, nan_policy, support_fraction, frame
        As for :class:`daskdepth.AIIRW`; ``covariance``, ``support_fraction`` and
        ``frame`` apply to AI-IRW only (IRW refuses values other than the defaults).

    Returns
    -------
    depth : same container kind as ``X``
        NumPy in gives NumPy out; dask in gives a lazy dask array with the same
        row chunks; a DataArray gives a DataArray over its first dimension.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(1000, 2))
    >>> d = daskdepth.score(X, random_state=0)
    >>> d.shape, bool(d.argmax() != d.argmin())
    ((1000,), True)
    """
    model = make_estimator(depth, n_directions=n_directions, covariance=covariance, tol=tol,
                           random_state=random_state, nan_policy=nan_policy,
                           support_fraction=support_fraction, frame=frame)
    model.fit(X if reference is None else reference)
    return model.score_samples(X)
