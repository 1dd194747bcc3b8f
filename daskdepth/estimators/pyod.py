"""PyOD's conventions for a depth detector: :class:`PyODAdapter`.

The depth estimators follow scikit-learn's outlier detectors: ``score_samples``
and ``decision_function`` are high for central rows, ``predict`` gives -1 for
outliers.  PyOD's detectors (``pyod.models.base.BaseDetector``) score the other
way round: ``decision_function`` and ``decision_scores_`` are *higher for more
abnormal* rows, ``labels_`` and ``predict`` give 1 for outliers and 0 for
inliers, ``threshold_`` is the ``1 - contamination`` percentile of the training
scores, and ``predict_proba`` turns scores into outlier probabilities.  Code
written for PyOD that is handed a daskdepth estimator as it is gets ``1 - AUROC``
without an error; the adapter gives it PyOD's conventions.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import dask
import dask.array as da
import numpy as np
from scipy.special import erf
from sklearn.base import BaseEstimator, OutlierMixin, clone
from sklearn.utils.validation import check_is_fitted

from ..errors import ParameterError
from ..fitting.offset import SAMPLE_SIZE, offset_sample
from ..runtime.client import keep_placement
from .base import DepthDetector
from .depths import AIIRW

#: ``predict_proba``'s methods, as PyOD names them.
PROBA_METHODS = ("linear", "unify")


class PyODAdapter(OutlierMixin, BaseEstimator):
    """A daskdepth estimator with PyOD's conventions: higher scores are more abnormal.

    Wraps a depth estimator (by default :class:`daskdepth.AIIRW` with its
    defaults) and gives it the attributes and methods of PyOD's
    ``BaseDetector``.  The outlier score of a row is minus its depth, so it
    ranks rows exactly as the depth does, the other way round.

    Parameters
    ----------
    estimator : DepthDetector, optional
        The depth estimator to fit (cloned, so the one given stays unfitted),
        e.g. ``daskdepth.AIIRW(covariance="mcd", random_state=0)``; default
        ``daskdepth.AIIRW()``.
    contamination : float in (0, 0.5], default=0.1
        The share of outliers in the training rows, as in PyOD (whose default
        it is): ``threshold_`` is the ``1 - contamination`` percentile of
        ``decision_scores_``.  The wrapped estimator's own ``contamination``
        sets only its ``offset_``.

    Attributes
    ----------
    estimator_ : DepthDetector
        The fitted depth estimator.
    decision_scores_ : ndarray or dask array of shape (n_samples,)
        The outlier scores of the training rows (minus their depths): higher
        is more abnormal.  NumPy for in-memory input (NumPy, pandas, a
        NumPy-backed DataArray), a persisted dask array for dask input.
    threshold_ : float
        ``numpy.percentile(decision_scores_, 100 * (1 - contamination))``, as
        PyOD computes it, for in-memory input; for dask input, that percentile
        over a keyed sample of at most 65,536 training scores (as the depth
        estimators' ``fit_predict`` sets ``offset_``).
    labels_ : ndarray or dask array of shape (n_samples,)
        1 for the training rows whose score is above ``threshold_``, else 0;
        the same container as ``decision_scores_``.

    See Also
    --------
    daskdepth.outlier_auroc : the scorer for the scikit-learn conventions.

    Notes
    -----
    ``cross_val_score(PyODAdapter(...), X, y, scoring="roc_auc")`` with ``y``
    1 for anomalies gives the AUROC, as for a PyOD detector.  Rows that are
    not scored (NaN under ``nan_policy='omit'``) get a NaN score, label 0 and
    NaN probabilities.

    Examples
    --------
    >>> import numpy as np, daskdepth
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(size=(200, 2)), [[6.0, 6.0], [-6.0, 5.0]]])
    >>> clf = daskdepth.PyODAdapter(daskdepth.AIIRW(random_state=0), contamination=0.01)
    >>> clf = clf.fit(X)
    >>> clf.labels_[-2:].tolist()
    [1, 1]
    >>> bool(clf.threshold_ == np.percentile(clf.decision_scores_, 99))
    True
    >>> clf.predict([[0.0, 0.0], [7.0, -7.0]]).tolist()
    [0, 1]
    >>> clf.predict_proba([[7.0, -7.0]]).round(2).tolist()
    [[0.0, 1.0]]
    """

    def __init__(self, estimator: DepthDetector | None = None, contamination: float = 0.1):
        self.estimator = estimator
        self.contamination = contamination

    def _check_params(self) -> DepthDetector:
        c = self.contamination
        if isinstance(c, bool) or not isinstance(c, Real) or not 0.0 < float(c) <= 0.5:
            raise ParameterError(
                f"contamination must be a number in (0, 0.5], the share of outliers in the "
                f"training rows (PyOD's convention, default 0.1); got {c!r}")
        if self.estimator is None:
            return AIIRW()
        if not isinstance(self.estimator, DepthDetector):
            raise ParameterError(
                f"estimator must be a daskdepth depth estimator such as "
                f"daskdepth.AIIRW(covariance='mcd'), got {type(self.estimator).__name__}; "
                "PyOD's own detectors need no adapter")
        return clone(self.estimator)

    def fit(self, X: Any, y: Any = None, *, sample_dim: Any = None) -> PyODAdapter:
        """Fit the depth estimator on ``X`` and set PyOD's attributes on its rows.

        Parameters
        ----------
        X : array-like, pandas or dask DataFrame, dask array or xarray.DataArray
            The training rows, as for :meth:`daskdepth.AIIRW.fit`.
        y : ignored
            Unsupervised, as in PyOD.
        sample_dim : str, optional
            DataArray only: the dimension that holds the samples.

        Returns
        -------
        self
        """
        estimator = self._check_params().fit(X, sample_dim=sample_dim)
        data = estimator._check_input(X, sample_dim)
        scores = -estimator._score(data)  # the training depths, known from the fit
        q = 100.0 * (1.0 - float(self.contamination))
        with keep_placement():
            if data.in_memory:
                values = np.asarray(scores.compute())
                sample = values
                stats = [np.nanmin(values), np.nanmax(values), np.nanmean(values),
                         np.nanstd(values)]
            else:
                values = scores.persist()
                if any(math.isnan(c) for c in values.chunks[0]):  # a dask DataFrame's rows
                    values.compute_chunk_sizes()
                rate = SAMPLE_SIZE / max(1, int(estimator.n_samples_fit_))
                picked = values.map_blocks(offset_sample, rate, dtype=np.float64,
                                           chunks=((np.nan,) * values.numblocks[0],))
                sample, *stats = dask.compute(picked, da.nanmin(values), da.nanmax(values),
                                              da.nanmean(values), da.nanstd(values))
        self.estimator_ = estimator
        self.threshold_ = float(np.nanpercentile(sample, q))
        self.decision_scores_ = values
        self.labels_ = (values > self.threshold_).astype(np.int64)
        self._score_range = (float(stats[0]), float(stats[1]))
        self._mu, self._sigma = float(stats[2]), float(stats[3])
        self.n_features_in_ = estimator.n_features_in_
        if hasattr(estimator, "feature_names_in_"):
            self.feature_names_in_ = estimator.feature_names_in_
        return self

    def fit_predict(self, X: Any, y: Any = None, **kwargs: Any) -> Any:
        """Fit on ``X`` and return ``labels_`` (1 outlier, 0 inlier), as PyOD does."""
        return self.fit(X, y, **kwargs).labels_

    def _scores(self, X: Any, sample_dim: Any) -> tuple[Any, da.Array]:
        check_is_fitted(self, "estimator_")
        data = self.estimator_._check_input(X, sample_dim)
        return data, -self.estimator_._score(data)

    def decision_function(self, X: Any, *, sample_dim: Any = None) -> Any:
        """Outlier score of each row of ``X``, minus its depth: higher is more abnormal.

        Returns the kind of ``X`` as :meth:`daskdepth.AIIRW.score_samples`
        does (lazy for dask input).
        """
        data, scores = self._scores(X, sample_dim)
        return data.wrap(scores, name="outlier_score")

    def predict(self, X: Any, *, sample_dim: Any = None) -> Any:
        """1 for rows whose outlier score is above ``threshold_`` (outliers), else 0."""
        data, scores = self._scores(X, sample_dim)
        return data.wrap((scores > self.threshold_).astype(np.int64), name="label")

    def predict_proba(self, X: Any, method: str = "linear", *, sample_dim: Any = None) -> Any:
        """Probability of each row of ``X`` being an inlier (column 0) or an outlier (column 1).

        As PyOD's ``BaseDetector.predict_proba``.

        Parameters
        ----------
        X : array-like, dask array, DataFrame or DataArray
        method : {"linear", "unify"}, default="linear"
            ``"linear"``: the score min-max scaled by the training scores'
            range and clipped to [0, 1] (PyOD's default).  ``"unify"``:
            ``erf((score - mean) / (std * sqrt(2)))`` clipped to [0, 1], with
            the training scores' mean and standard deviation (Kriegel et al.,
            2011).
        sample_dim : str, optional
            DataArray only: the dimension that holds the samples.

        Returns
        -------
        ndarray or dask array of shape (n_samples, 2)
            NumPy for in-memory input, a lazy dask array for dask input.
        """
        if method not in PROBA_METHODS:
            raise ParameterError(f"method must be one of {PROBA_METHODS} (as in PyOD), got "
                                 f"{method!r}")
        data, scores = self._scores(X, sample_dim)
        if method == "linear":
            lo, hi = self._score_range
            scale = hi - lo if hi > lo else 1.0  # as scikit-learn's MinMaxScaler for no range
            outlier = da.clip((scores - lo) / scale, 0.0, 1.0)
        else:
            sigma = self._sigma if self._sigma > 0 else 1.0
            outlier = da.clip(((scores - self._mu) / (sigma * math.sqrt(2.0))).map_blocks(erf),
                              0.0, 1.0)
        proba = da.stack([1.0 - outlier, outlier], axis=1)
        if data.in_memory:
            with keep_placement():
                return np.asarray(proba.compute())
        return proba
