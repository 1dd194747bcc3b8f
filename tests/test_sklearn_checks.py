"""scikit-learn's estimator checks, with the deliberate departures listed."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from daskdepth.estimators import DEPTHS

#: Checks that fail by design: daskdepth writes its own messages, naming the
#: problem and the fix, instead of scikit-learn's stock wording.  (check_dtype_object
#: passes: object arrays of numbers are converted, text is refused.)
DESIGN = {
    "check_estimators_empty_data_messages": (
        "zero-feature input is refused with daskdepth's own message ('X has 0 features "
        "(shape (12, 0)); depth needs at least one'), not scikit-learn's wording"
    ),
    "check_fit2d_predict1d": (
        "1-D input is refused with daskdepth's own message suggesting X.reshape(-1, 1) or "
        "X.reshape(1, -1), not scikit-learn's 'Reshape your data' wording"
    ),
}

def _expected_failed_checks(estimator):
    return dict(DESIGN)


def checked_estimators() -> list:
    """One estimator of every registered depth, small enough for the checks.

    Fifty directions for a depth that draws them (its class declares it:
    ``capabilities.directions``) and a fixed seed for a random one; any other
    depth as it comes.
    """
    out = []
    for cls in DEPTHS.values():
        params = {"n_directions": 50} if cls.capabilities.directions else {}
        if "random_state" in cls._get_param_names():
            params["random_state"] = 0
        out.append(cls(**params))
    return out


@parametrize_with_checks(
    checked_estimators(),
    expected_failed_checks=_expected_failed_checks,
    xfail_strict=True,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
