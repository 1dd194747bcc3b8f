"""Parameter constraints, declared once for the estimators, the one-call functions and the CLI.

Constraints follow scikit-learn's ``_parameter_constraints`` (checked by
``_fit_context`` when fitting); :func:`check_param` checks one value against the
same declaration, so the CLI's argument types and :func:`daskdepth.score` say
exactly what ``fit`` would.  Each message ends with a hint on what to pass.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    StrOptions,
    make_constraint,
    validate_parameter_constraints,
)

from ..covariance.estimate import COVARIANCE_METHODS
from .inputs import NAN_POLICIES

#: The default ``tol`` of the depths that take one: the certified bound on the depth error.
DEFAULT_TOL = 1e-4


def short_number(value: float) -> str:
    """``value`` as the docs write it: ``1e-4`` for 1e-4, ``0.5`` for 0.5.

    Examples
    --------
    >>> short_number(DEFAULT_TOL), short_number(0.5), short_number(2.5e-7)
    ('1e-4', '0.5', '2.5e-7')
    """
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:g}"
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"

#: The values of AI-IRW's ``frame=``.
FRAMES = ("correlation", "invariant")

#: The largest half-space mass ``scope``: about one split point in ``scope`` falls within a
#: subsample's range, so beyond this few of the half-spaces split the data and every score
#: tends to 1 (at 1e6 all are exactly 1; 1e308 overflows to infinite split points).
MAX_SCOPE = 100

#: Every parameter of the estimators and of :func:`daskdepth.score`, declared once.
CONSTRAINTS: dict[str, list[Any]] = {
    "n_directions": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
    "covariance": [StrOptions(set(COVARIANCE_METHODS)), "array-like"],
    "support_fraction": [Interval(Real, 0, 1, closed="right"), None],
    "affine_invariant": ["boolean"],
    "subsample_size": [Interval(Integral, 2, None, closed="left")],
    "scope": [Interval(Real, 0, MAX_SCOPE, closed="right")],
    "tol": [Interval(Real, 0, 0.5, closed="left")],
    "contamination": [Interval(Real, 0, 0.5, closed="right")],
    "random_state": ["random_state"],
    "nan_policy": [StrOptions(set(NAN_POLICIES))],
    "frame": [StrOptions(set(FRAMES))],
    "verbose": ["verbose"],
}

#: What to pass instead, appended to scikit-learn's message.
HINTS = {
    "random_state": "pass an int, a numpy RandomState or None",
    "n_directions": ("None means 100 x n_features, the paper's choice; 'auto' picks m for a "
                     "standard error of at most 0.005"),
    "covariance": ("covariance must be one of "
                   + ", ".join(repr(m) for m in COVARIANCE_METHODS) + " or a (d, d) array"),
    "support_fraction": ("support_fraction must be a number in (0, 1] or None (then "
                         "(n + d + 1) / 2n, as scikit-learn's MinCovDet)"),
    "tol": f"tol=0 gives the exact depth; the default is {short_number(DEFAULT_TOL)}",
    "nan_policy": "'raise' rejects rows with NaN or inf, 'omit' gives them NaN depth",
    "affine_invariant": "pass True (directions whitened by the covariance) or False",
    "subsample_size": ("the number of rows of each half-space's subsample (psi in Chen et al., "
                       "2015), at least 2"),
    "scope": ("split points are drawn within scope times the subsample's projected range around "
              f"its middle (lambda in Chen et al., 2015): a positive number up to {MAX_SCOPE}; "
              "only about 1 in scope split points falls within the data, so a larger scope "
              "leaves every score near 1: use the default 0.5, or 1 to 10 to extend the "
              "mass beyond the data"),
    "verbose": ("0 (the default) prints nothing; 1 prints each phase of the fit with its "
                "time, and a progress bar per phase on a terminal"),
    "frame": ("'correlation' (default) draws the directions in the whitening's own axes; "
              "'invariant' in an affine-equivariant frame (invariant at any m)"),
}


def no_auto_hint(default: str) -> str:
    """The ``n_directions`` hint of a depth that does not take ``'auto'``; None means ``default``.

    Examples
    --------
    >>> no_auto_hint("1000 half-spaces")
    "pass an int, or None for 1000 half-spaces; 'auto' (m picked for a standard error of at \
most 0.005) is taken only by IRW and AIIRW"
    """
    return (f"pass an int, or None for {default}; 'auto' (m picked for a standard error of at "
            "most 0.005) is taken only by IRW and AIIRW")


def no_auto_directions(default: str) -> tuple[list[Any], dict[str, str]]:
    """The ``n_directions`` constraints and hints of a depth that does not take ``'auto'``.

    ``'auto'`` picks ``m`` for a standard error of a mean over directions, which
    a minimum, a maximum or the half-space mass has not; None means ``default``.

    Examples
    --------
    >>> constraints, hints = no_auto_directions("100 x n_features")
    >>> any(isinstance(c, StrOptions) for c in constraints), sorted(hints)
    (False, ['n_directions'])
    """
    return ([c for c in CONSTRAINTS["n_directions"] if not isinstance(c, StrOptions)],
            {"n_directions": no_auto_hint(default)})


def contamination_message(value: Any) -> str:
    """What is wrong with a ``contamination`` outside (0, 0.5], and what to pass.

    Examples
    --------
    >>> contamination_message(0.7)
    'contamination must be a float in (0, 0.5], the expected share of outliers (e.g. 0.01 \
for 1%); got 0.7'
    """
    why = ("; 'auto' (scikit-learn's IsolationForest default) has no meaning for a depth, "
           "whose offset_ is the contamination quantile of the training depths"
           if isinstance(value, str) and value == "auto" else "")
    return (f"contamination must be a float in (0, 0.5], the expected share of outliers (e.g. "
            f"0.01 for 1%); got {value!r}{why}")


#: Parameters whose whole message is written here (the problem and the fix) rather than
#: scikit-learn's, which reads oddly for them.
MESSAGES = {"contamination": contamination_message}

#: Numeric parameters: ``True``/``False`` are numbers to Python, never a meaningful value here.
NUMERIC = ("n_directions", "support_fraction", "tol", "contamination", "subsample_size",
           "scope")


def check_param(name: str, value: Any, caller: str = "daskdepth",
                constraints: list[Any] | None = None, hint: str | None = None) -> None:
    """Raise :class:`~sklearn.utils._param_validation.InvalidParameterError` unless valid.

    ``InvalidParameterError`` is a ``ValueError`` (and a ``TypeError``).
    ``constraints`` and ``hint`` replace the declared ones (:data:`CONSTRAINTS`,
    :data:`HINTS`).

    Examples
    --------
    >>> check_param("tol", 1e-3)
    >>> check_param("tol", -1)
    Traceback (most recent call last):
    ...
    sklearn.utils._param_validation.InvalidParameterError: The 'tol' parameter of daskdepth \
must be a float in the range [0.0, 0.5). Got -1 instead; tol=0 gives the exact depth; \
the default is 1e-4
    """
    if name in MESSAGES and (isinstance(value, bool) or not any(
            make_constraint(c).is_satisfied_by(value)
            for c in (CONSTRAINTS[name] if constraints is None else constraints))):
        raise InvalidParameterError(MESSAGES[name](value))
    if name in NUMERIC and isinstance(value, bool):
        raise InvalidParameterError(f"The {name!r} parameter of {caller} must be a number, not a "
                                    f"bool. Got {value!r} instead; {HINTS[name]}")
    try:
        validate_parameter_constraints(
            {name: CONSTRAINTS[name] if constraints is None else constraints}, {name: value},
            caller)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{str(exc).rstrip('.')}; "
                                    f"{HINTS[name] if hint is None else hint}") from None
