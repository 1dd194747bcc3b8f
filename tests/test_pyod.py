"""daskdepth.PyODAdapter: PyOD's conventions (higher score = more abnormal, 0/1 labels).

Each check compares with what PyOD's ``BaseDetector`` computes from the same scores
(``numpy.percentile`` threshold, ``>`` labels, min-max and erf probabilities), written out
here, so that a sign, a percentile or a scaling that differs fails.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from scipy.special import erf
from sklearn.ensemble import IsolationForest
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.preprocessing import MinMaxScaler

import daskdepth
from daskdepth.errors import ParameterError


@pytest.fixture(scope="module")
def planted() -> tuple[np.ndarray, np.ndarray]:
    """2,000 correlated Gaussian rows and 40 planted outliers; y = 1 marks the outliers."""
    rng = np.random.default_rng(0)
    inliers = rng.normal(size=(2000, 3)) @ np.array([[2.0, 0.0, 0.0], [1.0, 0.5, 0.0],
                                                      [0.0, 0.3, 1.0]])
    direction = rng.normal(size=(40, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    outliers = direction * rng.uniform(7.0, 9.0, size=(40, 1))
    X = np.vstack([inliers, outliers])
    y = np.r_[np.zeros(2000, int), np.ones(40, int)]
    order = rng.permutation(X.shape[0])
    return X[order], y[order]


@pytest.fixture(scope="module")
def fitted(planted) -> daskdepth.PyODAdapter:
    X, _ = planted
    return daskdepth.PyODAdapter(daskdepth.AIIRW(random_state=0), contamination=0.02).fit(X)


def test_scores_follow_pyod_sign(planted, fitted):
    X, y = planted
    scores = fitted.decision_function(X)
    assert roc_auc_score(y, scores) > 0.9  # PyOD's habit: higher score = anomaly
    assert roc_auc_score(y, fitted.decision_scores_) > 0.9
    np.testing.assert_array_equal(scores, -fitted.estimator_.score_samples(X))
    np.testing.assert_array_equal(fitted.decision_scores_, scores)  # the training rows


def test_threshold_and_labels_follow_contamination(planted, fitted):
    scores = fitted.decision_scores_
    assert fitted.threshold_ == np.percentile(scores, 100 * (1 - 0.02))
    np.testing.assert_array_equal(fitted.labels_, (scores > fitted.threshold_).astype(int))
    assert set(np.unique(fitted.labels_)) == {0, 1}
    assert abs(fitted.labels_.mean() - 0.02) <= 1 / scores.size
    X, _ = planted
    np.testing.assert_array_equal(fitted.predict(X), fitted.labels_)
    np.testing.assert_array_equal(fitted.fit_predict(X), fitted.labels_)


def test_predict_proba_is_pyods_linear_and_unify(planted, fitted):
    X, _ = planted
    test = np.vstack([X[:50], [[30.0, -30.0, 0.0]]])
    scores = fitted.decision_function(test)
    linear = fitted.predict_proba(test)
    expected = MinMaxScaler().fit(fitted.decision_scores_.reshape(-1, 1)).transform(
        scores.reshape(-1, 1)).ravel().clip(0, 1)
    np.testing.assert_allclose(linear[:, 1], expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(linear.sum(axis=1), 1.0)
    assert linear[-1, 1] == 1.0  # far away: surely an outlier
    unify = fitted.predict_proba(test, method="unify")
    mu, sigma = fitted.decision_scores_.mean(), fitted.decision_scores_.std()
    np.testing.assert_allclose(unify[:, 1], erf((scores - mu) / (sigma * np.sqrt(2))).clip(0, 1),
                               rtol=0, atol=1e-12)
    with pytest.raises(ParameterError, match=r"method must be one of \('linear', 'unify'\)"):
        fitted.predict_proba(test, method="sigmoid")


def test_dask_input_gives_lazy_results(planted, fitted):
    X, _ = planted
    Xd = da.from_array(X, chunks=(500, 3))
    lazy = daskdepth.PyODAdapter(daskdepth.AIIRW(random_state=0), contamination=0.02).fit(Xd)
    assert isinstance(lazy.decision_scores_, da.Array)
    assert isinstance(lazy.labels_, da.Array)
    # fewer rows than the threshold's sample: every training score is in it
    assert lazy.threshold_ == pytest.approx(fitted.threshold_, abs=1e-12)
    np.testing.assert_allclose(lazy.decision_scores_.compute(), fitted.decision_scores_,
                               atol=1e-12)
    np.testing.assert_array_equal(lazy.labels_.compute(), fitted.labels_)
    for result in (lazy.decision_function(Xd), lazy.predict(Xd), lazy.predict_proba(Xd),
                   lazy.predict_proba(Xd, method="unify")):
        assert isinstance(result, da.Array)
        assert result.chunks[0] == Xd.chunks[0]
    np.testing.assert_array_equal(lazy.predict(Xd).compute(), fitted.predict(X))
    np.testing.assert_allclose(lazy.predict_proba(Xd).compute(), fitted.predict_proba(X),
                               atol=1e-12)


def test_pandas_input_keeps_its_index(planted):
    X, _ = planted
    frame = pd.DataFrame(X[:300], columns=["a", "b", "c"], index=np.arange(300) * 10)
    clf = daskdepth.PyODAdapter(daskdepth.IRW(random_state=0)).fit(frame)
    scores = clf.decision_function(frame)
    assert isinstance(scores, pd.Series) and scores.name == "outlier_score"
    assert scores.index.equals(frame.index)
    assert list(clf.feature_names_in_) == ["a", "b", "c"]
    assert clf.predict(frame).isin([0, 1]).all()


def test_cross_val_score_roc_auc_is_the_auroc(planted):
    """scikit-learn's roc_auc scorer with y = 1 for anomalies: right with the adapter."""
    X, y = planted
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    adapted = cross_val_score(daskdepth.PyODAdapter(daskdepth.AIIRW(random_state=0)), X, y,
                              scoring="roc_auc", cv=cv)
    assert adapted.min() > 0.9
    # the scikit-learn convention of the estimator itself gives 1 - AUROC for this y
    plain = cross_val_score(daskdepth.AIIRW(random_state=0), X, y, scoring="roc_auc", cv=cv)
    np.testing.assert_allclose(plain, 1 - adapted, atol=1e-12)


def test_default_estimator_and_clone(planted):
    X, _ = planted
    given = daskdepth.AIIRW(random_state=0)
    clf = daskdepth.PyODAdapter(given).fit(X[:500])
    assert not hasattr(given, "summary_")  # cloned: the estimator given stays unfitted
    default = daskdepth.PyODAdapter().fit(X[:500])
    assert type(default.estimator_) is daskdepth.AIIRW
    assert clf.get_params()["estimator__random_state"] == 0


@pytest.mark.parametrize("contamination", [0.0, 0.7, "auto", True])
def test_bad_contamination_is_refused(contamination):
    with pytest.raises(ParameterError, match=r"contamination must be a number in \(0, 0.5\]"):
        daskdepth.PyODAdapter(contamination=contamination).fit(np.zeros((10, 2)))


def test_non_depth_estimator_is_refused():
    with pytest.raises(ParameterError, match="PyOD's own detectors need no adapter"):
        daskdepth.PyODAdapter(IsolationForest()).fit(np.zeros((10, 2)))
