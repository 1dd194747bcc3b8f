"""The half-space mass outlier detector (Chen, Ting, Washio & Haffari, 2015)."""

from __future__ import annotations

from typing import Any

from sklearn.utils import check_random_state

from ..fitting.mass import fit_mass
from ..summary.mass import MassSummary
from ..summary.statistics import WHOLE
from .base import Capabilities, DepthDetector, FittedDepth
from .inputs import Input
from .params import CONSTRAINTS, no_auto_directions

#: Number of half-spaces ``t`` when ``n_directions=None``.
DEFAULT_HALFSPACES = 1000


class HalfspaceMass(DepthDetector):
    """Half-space mass outlier detector (Chen, Ting, Washio & Haffari, 2015).

    Algorithm 1 of B. Chen, K. M. Ting, T. Washio and G. Haffari, "Half-space
    mass: a maximally robust and efficient data depth method", *Machine
    Learning* 100 (2015), 677-699, https://doi.org/10.1007/s10994-015-5524-x:
    ``t`` random half-spaces, each drawn from its own random subsample of
    ``psi`` reference rows: a direction uniform on the sphere, a split point
    uniform within ``lambda`` times the subsample's projected range around the
    range's middle, and the share of the subsample on each side.  The score of
    ``x`` is the mean, over the half-spaces, of the share on ``x``'s side: in
    [0, 1], higher is more central; low scores mean outlying.  It is exact
    given the half-spaces (``error_bound_`` is 0).

    Distributed: the fit makes one pass over the row chunks, which draws a
    row sample keyed on global row indices (all finite rows up to 65,536 of
    them, or more with many half-spaces); the subsamples are drawn from it on
    the client, so the half-spaces do not depend on the chunking.  Scoring is
    one task per row chunk (a compiled loop over rows and half-spaces).

    Defaults: the paper's experimental settings of ``t``, ``psi`` and
    ``lambda`` could not be checked here (its text was not available, only its
    abstract).  ``subsample_size=32`` and ``scope=0.5`` are those of the public
    NumPy implementation by the AI-IRW authors' group (``DataDepth.halfspace_mass``),
    the kind of implementation behind the HM column of the AI-IRW paper
    (Staerman, Mozharovskyi & Clemencon, 2022), whose experiments set every
    method's parameters "by default"; ``t = 1000`` half-spaces is this
    package's choice (that implementation takes ``t`` from its caller).  An R
    implementation of Algorithm 1 (a public R package, 2017) defaults to
    ``lambda = 1``, i.e. split points anywhere in the subsample's range.

    Parameters
    ----------
    n_directions : int or None, default=None
        Number of half-spaces ``t`` (each has its own random direction); None
        means 1000.
    subsample_size : int, default=32
        Rows in each half-space's subsample (``psi``); all finite rows when
        there are fewer.
    scope : float, default=0.5
        ``lambda``: split points are uniform in ``[mid - scope * range / 2,
        mid + scope * range / 2]`` of the subsample's projections.  Above 1
        they may fall beyond the subsample, which extends the mass's
        variation (and its concave region) beyond the data.  At most 100:
        only about one split point in ``scope`` falls within the subsample,
        so beyond that every score tends to 1.
    contamination : float in (0, 0.5], default=0.1
        Expected share of outliers; sets ``offset_``.
    random_state : int, RandomState or None, default=None
        Seeds the directions, subsamples and split points (on the client) and
        the keyed row sample: results do not depend on chunking, workers or
        scheduler.
    nan_policy : {'raise', 'omit'}, default='raise'
        'raise' rejects rows with NaN or inf, naming how many and which;
        'omit' leaves them out of the fit and gives them NaN scores.
    verbose : int, default=0
        0 prints nothing; 1 or more prints the phases of ``fit`` as they run
        (see :class:`AIIRW`).

    Attributes
    ----------
    location_ : ndarray of shape (n_features,)
        Mean of the row sample; projections are centred on it (for precision
        only: the half-spaces, and so the scores, do not depend on it).
    directions_ : ndarray of shape (n_directions, n_features)
        Unit normal ``v_j`` of each half-space.
    split_points_ : ndarray of shape (n_directions,)
        Split point ``s_j`` on ``<x - location_, v_j>``.
    left_mass_ : ndarray of shape (n_directions,)
        Share of half-space ``j``'s subsample with ``<row - location_, v_j> <
        s_j``: the mass of a point below the split; a point at or above it
        gets ``1 - left_mass_[j]``.
    subsample_indices_ : ndarray of shape (n_directions, psi)
        Global row indices (rows of the fitted ``X``, counting non-finite ones)
        of each half-space's subsample (``psi`` is ``subsample_size_``).
    subsample_size_ : int
        ``psi`` used: ``min(subsample_size, rows sampled)``.
    n_directions_ : int
        Number of half-spaces ``t``.
    n_samples_fit_ : int
        Number of finite reference rows.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when the input had string feature names.
    error_bound_ : float
        0.0: scores are exact for the drawn half-spaces.
    offset_ : float
        ``contamination`` quantile of the training scores (of a row sample of
        at most 65,536 rows when there are more).
    n_passes_ : int
        Passes over the data after the first (sampling) pass: 0.
    summary_ : MassSummary
        The half-spaces used for scoring.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> model = daskdepth.HalfspaceMass(random_state=0).fit(X)
    >>> mass = model.score_samples(np.array([[0.0, 0.0, 0.0], [6.0, 6.0, 6.0]]))
    >>> bool(mass[0] > 0.65 > 0.55 > mass[1])
    True
    >>> model.split_points_.shape, model.subsample_indices_.shape
    ((1000,), (1000, 32))
    """

    depth_name = "halfspace-mass"
    display_name = "halfspace mass"
    long_name = "half-space mass"
    summary_type = MassSummary
    summary_types = (MassSummary,)
    # exact for its half-spaces (no tol), no covariance, no per-direction depths to explain
    # or to take a standard error of
    capabilities = Capabilities(directions=True)
    _statistic = WHOLE
    _why_no_partial_fit = ("its half-spaces and masses are fitted on subsamples drawn from all "
                           "the reference rows at once, and do not add over batches")
    _summary_fields = {"split_points_": "splits", "left_mass_": "left"}
    _why_not = {"covariance": "the half-space mass does not whiten",
                "support_fraction": "the half-space mass does not whiten",
                "tol": "the half-space mass is exact for its half-spaces"}
    _no_whitening = "none (directions uniform on the sphere)"
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "subsample_size", "scope", "contamination", "random_state", "nan_policy", "verbose")}
    # 'auto' picks m for a standard error of a mean over directions; the mass has none.
    _parameter_constraints["n_directions"], _hints = no_auto_directions(
        f"{DEFAULT_HALFSPACES} half-spaces")

    _fitted_attributes = (
        "n_features_in_", "location_", "directions_", "split_points_", "left_mass_",
        "subsample_indices_", "subsample_size_", "n_directions_", "n_samples_fit_",
        "error_bound_", "n_passes_", "summary_", "_sample_depth", "_fit_token", "offset_")
    _optional_fitted_attributes = ("feature_names_in_",)

    def __init__(self, n_directions: int | None = None, subsample_size: int = 32,
                 scope: float = 0.5, contamination: float = 0.1, random_state: Any = None,
                 nan_policy: str = "raise", verbose: int = 0) -> None:
        self.n_directions = n_directions
        self.subsample_size = subsample_size
        self.scope = scope
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.verbose = verbose

    def _fit_model(self, data: Input) -> None:
        rng = check_random_state(self.random_state)
        t = DEFAULT_HALFSPACES if self.n_directions is None else int(self.n_directions)
        fitted = fit_mass(data.array, n_halfspaces=t, psi=int(self.subsample_size),
                          scope=float(self.scope), rng=rng, nan_policy=self.nan_policy)
        summary = fitted.summary
        self._set_fitted(FittedDepth(
            summary=summary, location=summary.location, n=fitted.n,
            error_bound=self._error_bound(summary), passes=0,
            sample_depth=fitted.sample_depth, token=fitted.token,
            directions=summary.directions))
        self.subsample_indices_ = fitted.subsamples
        self.subsample_size_ = int(fitted.subsamples.shape[1])

    def _error_bound(self, summary: Any) -> float:
        return 0.0  # exact given its half-spaces

    def _fitted_rows(self, state: dict[str, Any]) -> list[tuple[str, str]]:
        return [("t (half-spaces)", f"{state['n_directions_']:,}"),
                ("subsample size (psi)", str(state["subsample_size_"])),
                ("scope (lambda)", f"{state.get('scope')}")]

    def score_samples(self, X: Any, return_std: bool = False, *,
                      sample_dim: Any = None) -> Any:
        """Half-space mass of each row of ``X``: in [0, 1], higher is more central.

        NumPy in gives NumPy out, a pandas DataFrame a pandas Series with its
        index, dask in gives a lazy dask array with the same row chunks (a dask
        DataFrame a dask Series), and a DataArray gives a DataArray over its
        sample dimension (``sample_dim``, as for :meth:`fit`) with that
        dimension's coordinates.  Rows with NaN or inf raise under
        ``nan_policy='raise'`` and get NaN under ``'omit'``.  ``return_std=True``
        is refused: the mass has no standard error.
        """
        return super().score_samples(X, return_std, sample_dim=sample_dim)
