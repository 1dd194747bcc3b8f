"""``drift(model, X_new)``: has a new batch the reference's distribution? (Liu-Singh Q test)

The statistic and its variance are in :mod:`daskdepth.summary.drift`, the pass
over the new rows in :mod:`daskdepth.passes.drift`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dask.delayed import Delayed, delayed

from ..passes.drift import rank_sums
from ..runtime.client import keep_placement
from ..summary.drift import DriftResult, quality_index, reference_depths
from .base import DepthDetector
from .depths import LeafDepth

__all__ = ["DriftResult", "drift"]


def _finish(sums: np.ndarray, n_compared: int, n_reference: int) -> DriftResult:
    return quality_index(int(sums[0]), int(sums[1]), n_compared, n_reference)


def drift(model: Any, X_new: Any, *, sample_dim: Any = None,
          compute: bool = True) -> DriftResult | Delayed:
    """Test whether the rows ``X_new`` are distributed like ``model``'s reference rows.

    The Liu-Singh quality index (Liu & Singh 1993, JASA 88)

        Q = mean over new rows y of the share of reference rows x with D(x) <= D(y),

    ``D`` the model's depth: 1/2 when the new rows come from the reference
    distribution, smaller when they are shifted or more spread out (they are
    then less deep than the reference rows).  Under no change ``Q`` is
    asymptotically normal with mean 1/2 and variance ``(1/m + 1/n) / 12`` for
    ``m`` reference and ``n`` new rows (Zuo & He 2006, Annals of Statistics 34);
    the p-value is one-sided (small ``Q`` is evidence of a change).

    The reference depths are those the fit kept to set ``offset_``: every
    training row's depth for up to 65,536 rows, else those of a keyed sample of
    ``s = 65,536`` of them.  ``Q`` is then the Mann-Whitney statistic of the
    ``s`` sampled reference depths against the ``n`` new depths, whose variance
    under no change is ``(s + n + 1) / (12 s n)``: ``m`` is replaced by ``s``,
    which accounts for the sample's extra variance ``(1/s - 1/m) / 12`` (see
    :mod:`daskdepth.summary.drift`).  Ties in depth count 1/2 (mid-ranks); with
    many ties (the halfspace depth on small data) the test is conservative.
    Rows scored NaN (``nan_policy='omit'``) are left out of ``n``.

    A reference row's depth counts the row itself (in-sample).  For the rank
    depths (AIIRW, IRW, Halfspace) this adds exactly ``1/m``, taken off the
    reference depths before comparing; for Projection and HalfspaceMass the
    in-sample excess is not corrected, which makes the test slightly liberal on
    small reference sets (rejection rate 0.07 at level 0.05 with 1,000
    reference rows, see docs/monitoring.md), less so as ``m`` grows.

    Parameters
    ----------
    model : fitted AIIRW, IRW, Halfspace, Projection or HalfspaceMass
        Fitted on the reference rows (or loaded with :func:`daskdepth.load`).
    X_new : array-like, dask array, DataFrame or xarray.DataArray of shape (n, n_features)
        The new batch, with the model's features.
    sample_dim : str, optional
        DataArray only: the dimension that holds the samples.
    compute : bool, default=True
        Compute now (one pass over the new rows: their depths and counts in the
        same tasks).  ``False`` gives a :class:`dask.delayed.Delayed` whose
        ``.compute()`` gives the result; nothing is read until then, so that
        the test can be computed together with other results of the batch.

    Returns
    -------
    DriftResult
        ``q``, ``std_error``, ``p_value``, ``n_reference``, ``n_new``,
        ``n_compared`` (plain Python numbers), ``z`` and ``drifted(alpha)``.

    Raises
    ------
    TypeError
        For a model that keeps no reference depths (not a daskdepth depth).
    ValueError
        For ``X_new`` with another number of features than the model's.

    Examples
    --------
    >>> import numpy as np, daskdepth
    >>> rng = np.random.default_rng(0)
    >>> model = daskdepth.IRW(random_state=0).fit(rng.normal(size=(2000, 3)))
    >>> same = daskdepth.drift(model, rng.normal(size=(1000, 3)))
    >>> bool(same.p_value > 0.01), round(same.q, 1)
    (True, 0.5)
    >>> shifted = daskdepth.drift(model, rng.normal(size=(1000, 3)) + 1.0)
    >>> bool(shifted.q < 0.4 and shifted.p_value < 1e-6)
    True
    """
    if not isinstance(model, DepthDetector):
        raise TypeError(
            f"drift needs a fitted daskdepth depth model (AIIRW, IRW, Halfspace, Projection "
            f"or HalfspaceMass), got {type(model).__name__}: it keeps no reference depths; "
            "fit one of those on the reference rows")
    data = model._check_input(X_new, sample_dim)  # fitted? same features? (boundary)
    sample = getattr(model, "_sample_depth", None)
    if sample is None:
        raise TypeError(
            f"{type(model).__name__} keeps no reference depths (_sample_depth), so drift "
            "cannot compare with its reference rows; refit it with this version of daskdepth")
    # The rank depths' in-sample depth counts the row itself: 1/m more than a new row's there.
    n_reference = int(model.n_samples_fit_)
    reference = reference_depths(sample, 1.0 / n_reference if isinstance(model, LeafDepth) else 0.0)
    sums = rank_sums(model._score(data), reference)
    result = delayed(_finish, pure=True)(sums, reference.shape[0], n_reference)
    if not compute:
        return result
    with keep_placement():
        return result.compute()
