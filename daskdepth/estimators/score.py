"""The one-call entry point :func:`score`."""

from __future__ import annotations

from typing import Any

from .registry import make_estimator


def score(X: Any, reference: Any = None, *, depth: str = "ai-irw",
          n_directions: int | str | None = None, covariance: object = "sample",
          tol: float = 1e-4, random_state: Any = None, nan_policy: str = "raise",
          support_fraction: float | None = None, **options: Any) -> Any:
    """Depth of each row of ``X`` with respect to ``reference`` (default: ``X`` itself).

    Parameters
    ----------
    X : array-like, dask array or xarray.DataArray of shape (n_samples, n_features)
        Points to score.
    reference : same kinds as ``X``, optional
        Reference sample defining the depth; ``None`` scores ``X`` against itself.
    depth : {'ai-irw', 'irw', 'halfspace', 'halfspace-mass'}, default='ai-irw'
        :class:`daskdepth.AIIRW`, :class:`daskdepth.IRW`,
        :class:`daskdepth.Halfspace` or :class:`daskdepth.HalfspaceMass`.
    n_directions, covariance, tol, random_state, nan_policy, support_fraction
        As for :class:`daskdepth.AIIRW`; a depth that does not take one of them
        refuses values other than the defaults (``covariance`` and
        ``support_fraction`` apply to AI-IRW and the affine-invariant halfspace
        depth, ``tol`` to all but the half-space mass).
    **options
        Parameters of the chosen depth only, e.g. ``frame='invariant'`` for
        'ai-irw', ``affine_invariant=True`` for 'halfspace', ``subsample_size``
        and ``scope`` for 'halfspace-mass'.

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
    >>> t = daskdepth.score(X, depth="halfspace", affine_invariant=True, random_state=0)
    >>> float(t.min()), bool(t.max() <= 0.5)  # the least deep rows: only themselves
    (0.001, True)
    """
    model = make_estimator(depth, n_directions=n_directions, covariance=covariance, tol=tol,
                           random_state=random_state, nan_policy=nan_policy,
                           support_fraction=support_fraction, **options)
    model.fit(X if reference is None else reference)
    return model.score_samples(X)
