"""Evaluating a detector against anomaly labels: :func:`outlier_auroc`, a ready ``scoring=``.

Depth is higher for more central rows, as scikit-learn's outlier detectors
score normal rows higher: ``roc_auc_score(y, model.score_samples(X))`` with
``y = 1`` for anomalies therefore gives ``1 - AUROC`` (0.015 for a detector
whose AUROC is 0.985).  :func:`outlier_auroc` ranks low depth as anomalous.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

#: What ``y`` may hold, said by every refusal.
LABELS = ("y must mark the anomalies: 1 (anomaly) / 0 (normal), True / False, or "
          "scikit-learn's outlier convention -1 (anomaly) / 1 (normal)")


def _computed(values: Any) -> np.ndarray:
    """Labels or scores as a 1-D NumPy array (dask collections are computed)."""
    if hasattr(values, "compute") and not isinstance(values, np.ndarray):
        values = values.compute()
    values = getattr(values, "to_numpy", lambda: values)()  # pandas
    return np.asarray(getattr(values, "values", values)).ravel()  # xarray


def anomaly_labels(y: Any) -> np.ndarray:
    """``y`` as booleans, True for the anomalies; see :func:`outlier_auroc` for the conventions.

    Raises
    ------
    ValueError
        ``y`` holds other values, missing values, or one class only.

    Examples
    --------
    >>> anomaly_labels([0, 1, 0]).tolist(), anomaly_labels([1, -1, 1]).tolist()
    ([False, True, False], [False, True, False])
    >>> anomaly_labels([-1, 0, 1])
    Traceback (most recent call last):
    ...
    ValueError: y must mark the anomalies: 1 (anomaly) / 0 (normal), True / False, or \
scikit-learn's outlier convention -1 (anomaly) / 1 (normal); y holds [-1, 0, 1]
    """
    labels = _computed(y)
    if labels.dtype.kind == "b":
        anomaly = labels.astype(bool)
    elif labels.dtype.kind in "iuf":
        if labels.dtype.kind == "f" and not np.isfinite(labels).all():
            raise ValueError(f"y has NaN or inf labels; {LABELS}")
        present = set(np.unique(labels).tolist())
        if present <= {0, 1}:
            anomaly = labels == 1
        elif present <= {-1, 1}:
            anomaly = labels == -1
        else:
            shown = sorted(present)
            listed = shown if len(shown) <= 5 else [*shown[:5], "..."]
            raise ValueError(f"{LABELS}; y holds {listed}")
    else:
        raise ValueError(f"{LABELS}; y has dtype {labels.dtype}")
    if anomaly.all() or not anomaly.any():
        value = labels[0].item() if labels.size else None
        raise ValueError(f"y holds one label only ({value!r} in all {labels.size} rows): the "
                         "AUROC needs anomalies and normal rows; evaluate on data with both "
                         "(in cross-validation, a stratified split keeps both in every fold)")
    return anomaly


def outlier_auroc(estimator: Any, X: Any, y: Any) -> float:
    """AUROC of a fitted detector's low scores as anomalies: a scorer for ``scoring=``.

    Called as scikit-learn calls a scorer, ``outlier_auroc(estimator, X, y)``,
    so that ``cross_val_score(AIIRW(), X, y, scoring=daskdepth.outlier_auroc)``
    and ``GridSearchCV(..., scoring=daskdepth.outlier_auroc)`` evaluate depth
    as an anomaly detector.  ``scoring="roc_auc"`` instead ranks high depth
    (central rows) as the positive class and gives ``1 - AUROC``.

    Parameters
    ----------
    estimator : fitted detector
        Anything with ``score_samples`` where higher means more normal: the
        daskdepth estimators, scikit-learn's ``IsolationForest``,
        ``LocalOutlierFactor(novelty=True)``, ...
    X : array-like, DataFrame, dask array or DataArray
        Rows to score (any input ``score_samples`` takes; dask results are
        computed).
    y : array-like of shape (n_samples,)
        Which rows are anomalies: 1 (anomaly) and 0 (normal), as the ODDS
        benchmark data sets give them; booleans, True for anomalies; or
        scikit-learn's ``predict`` convention, -1 (anomaly) and 1 (normal).
        The convention is read from the values, which is unambiguous as long
        as both classes occur (which the AUROC needs anyway).

    Returns
    -------
    float
        The area under the ROC curve of ``-score_samples(X)`` for the
        anomalies: 1 when every anomaly is less deep than every normal row,
        0.5 for a random ranking.

    Raises
    ------
    ValueError
        ``y`` holds other labels or one class only, or some rows have no
        depth (NaN or inf under ``nan_policy='omit'``: drop them from ``X``
        and ``y`` first).

    Examples
    --------
    >>> import numpy as np, daskdepth
    >>> from sklearn.model_selection import StratifiedKFold, cross_val_score
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(size=(400, 2)), rng.normal(6, 1, size=(20, 2))])
    >>> y = np.r_[np.zeros(400), np.ones(20)]  # 1 = anomaly
    >>> folds = StratifiedKFold(3, shuffle=True, random_state=0)
    >>> auc = cross_val_score(daskdepth.AIIRW(random_state=0), X, y, cv=folds,
    ...                       scoring=daskdepth.outlier_auroc)
    >>> bool(auc.min() > 0.95)
    True
    >>> inverted = cross_val_score(daskdepth.AIIRW(random_state=0), X, y, cv=folds,
    ...                            scoring="roc_auc")  # central rows ranked as positives
    >>> np.allclose(auc + inverted, 1)
    True
    >>> model = daskdepth.AIIRW(random_state=0).fit(X)
    >>> daskdepth.outlier_auroc(model, X, y) == daskdepth.outlier_auroc(model, X, 1 - 2 * y)
    True
    """
    anomaly = anomaly_labels(y)
    depth = _computed(estimator.score_samples(X)).astype(np.float64)
    if depth.shape != anomaly.shape:
        raise ValueError(f"y has {anomaly.size} labels but X has {depth.size} rows; pass one "
                         "label per row of X")
    missing = ~np.isfinite(depth)
    if missing.any():
        rows = np.flatnonzero(missing)
        raise ValueError(f"{rows.size} rows of X have no depth (NaN or inf under "
                         f"nan_policy='omit'; rows {rows[:5].tolist()}); drop them from X and "
                         "y before evaluating")
    return float(roc_auc_score(anomaly, -depth))
