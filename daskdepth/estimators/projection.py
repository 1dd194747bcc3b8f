"""The projection depth outlier detector (Zuo & Serfling, 2000; Liu, 1992)."""

from __future__ import annotations

from typing import Any

from sklearn.utils import check_random_state

from ..fitting.projection import fit_projection
from ..summary.projection import ProjectionSummary
from ..summary.statistics import WHOLE
from .base import Capabilities, DepthDetector, FittedDepth
from .depths import affine_covariance_spec, affine_display_name, affine_whitens
from .inputs import Input
from .params import CONSTRAINTS, no_auto_directions


class Projection(DepthDetector):
    """Projection depth outlier detector over random directions.

    The depth of ``x`` is ``1 / (1 + O(x))`` with the outlyingness
    ``O(x) = max_j |<x - location_, v_j> - med_j| / mad_j`` over ``m`` random
    directions ``v_j``: ``med_j`` is the median of the reference rows'
    projections on ``v_j`` (the mean of the two middle ones for an even count,
    as NumPy's ``median``) and ``mad_j`` the median of their absolute
    deviations from ``med_j`` (unscaled).  This is the projection depth of
    Zuo and Serfling (2000) (after Liu, 1992, and Stahel and Donoho's
    outlyingness) restricted to the drawn directions, so it is at least the
    depth over all directions.  In (0, 1]; low depth means outlying.

    ``med_j`` and ``mad_j`` are found exactly by selection (from the row
    sample when it holds every finite row, else in a few passes over the row
    chunks), so the depths are exact for the drawn directions
    (``error_bound_`` is 0) and do not depend on chunking, scheduler or
    workers.  A direction whose ``mad_j`` is 0 (more than half the reference
    projections tie at the median) gives outlyingness 0 to a point at the
    median and infinity (depth 0) to any other, the limit of the ratio as the
    spread vanishes.

    With ``affine_invariant=True`` the directions are drawn as AI-IRW draws
    them (``v_j = W u_j``, ``W W^T = Sigma^{-1}``), which makes the depth
    invariant under affine maps of the data.

    Parameters
    ----------
    n_directions : int or None, default=None
        Number of random directions ``m``; None means ``100 * n_features``.
    affine_invariant : bool, default=False
        Draw the directions whitened by the covariance, as :class:`AIIRW`
        does; ``covariance`` and ``support_fraction`` apply only then.
    covariance : {'sample', 'mcd', 'ledoit-wolf', 'oas'} or array of shape \
(n_features, n_features), default='sample'
        Covariance estimate that defines the whitening.  'mcd' is the reweighted
        Minimum Covariance Determinant (robust to outliers, as scikit-learn's
        ``MinCovDet``; its robust location also becomes ``location_``), computed
        with a bounded in-memory sample and a few chunked passes; 'ledoit-wolf'
        and 'oas' are shrinkage estimates.  A singular covariance is handled in
        its principal subspace (with a warning).
    support_fraction : float in (0, 1] or None, default=None
        Share of rows in the raw MCD support (``covariance='mcd'`` only); None
        means ``(n + d + 1) / 2n``, as scikit-learn.
    contamination : float in (0, 0.5], default=0.1
        Expected share of outliers; sets ``offset_``.
    random_state : int, RandomState or None, default=None
        Seeds the directions and the row sample, on the client only.
    nan_policy : {'raise', 'omit'}, default='raise'
        'raise' rejects rows with NaN or inf, naming how many and which;
        'omit' leaves them out of the fit and gives them NaN depth.
    verbose : int, default=0
        0 prints nothing; 1 or more prints the phases of ``fit`` as they run
        (see :class:`AIIRW`).

    Attributes
    ----------
    location_ : ndarray of shape (n_features,)
        Mean of the reference rows (robust location for ``covariance='mcd'``
        with ``affine_invariant=True``); projections are centred on it.
    covariance_ : ndarray of shape (n_features, n_features)
        Covariance estimate (that defines the whitening with
        ``affine_invariant=True``).
    directions_ : ndarray of shape (n_directions, n_features)
        Directions ``v_j`` in input coordinates.
    medians_ : ndarray of shape (n_directions,)
        ``med_j``, the median of the reference projections on ``v_j``.
    mads_ : ndarray of shape (n_directions,)
        ``mad_j``, the median of their absolute deviations from ``med_j``.
    covariance_rank_ : int
    basis_ : ndarray of shape (n_features, rank)
        ``affine_invariant=True`` only (``rank`` is ``covariance_rank_``): the whitening.
    n_directions_ : int
    n_samples_fit_ : int
        Number of finite reference rows.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when the input had string feature names.
    error_bound_ : float
        0.0: the medians and MADs are exact.
    offset_ : float
        ``contamination`` quantile of the training depths (of a row sample of
        at most 65,536 rows when there are more).
    n_passes_ : int
        Passes over the data after the moments pass (and the covariance's):
        those of the medians and of the MADs (0 when the row sample holds
        every finite row).
    summary_ : ProjectionSummary
        Location, directions, medians and MADs.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(500, 2))
    >>> model = daskdepth.Projection(random_state=0).fit(X)
    >>> depth = model.score_samples(np.array([[0.0, 0.0], [6.0, 6.0]]))
    >>> bool(depth[0] > 0.7 and depth[1] < 0.15), model.error_bound_
    (True, 0.0)
    """

    depth_name = "projection"
    display_name = "projection"
    long_name = "projection depth"
    summary_type = ProjectionSummary
    summary_types = (ProjectionSummary,)
    # exact medians and MADs (no tol); a maximum over directions has no standard error
    capabilities = Capabilities(directions=True, covariance=True, explains=True)
    _statistic = WHOLE
    _why_no_partial_fit = ("its summary holds each direction's exact median and MAD, which do "
                           "not add over batches: a new batch moves them, and every row's "
                           "outlyingness with them")
    _summary_fields = {"medians_": "medians", "mads_": "mads"}
    _why_not = {"tol": "the projection depth's medians and MADs are exact",
                "frame": "the projection depth takes the maximum over directions, in any frame"}
    _no_whitening = "none (affine_invariant=False: directions uniform on the sphere)"
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "affine_invariant", "covariance", "contamination", "random_state", "nan_policy",
        "support_fraction", "verbose")}
    # 'auto' picks m for a standard error of a mean over directions; a maximum has none.
    _parameter_constraints["n_directions"], _hints = no_auto_directions("100 x n_features")

    _fitted_attributes = (
        "n_features_in_", "location_", "covariance_", "directions_", "medians_", "mads_",
        "n_directions_", "n_samples_fit_", "covariance_rank_", "error_bound_", "n_passes_",
        "summary_", "_sample_depth", "_fit_token", "_train_depth", "_train_token", "offset_")
    _optional_fitted_attributes = ("feature_names_in_", "basis_")

    def __init__(self, n_directions: int | None = None, affine_invariant: bool = False,
                 covariance: object = "sample", contamination: float = 0.1,
                 random_state: Any = None, nan_policy: str = "raise",
                 support_fraction: float | None = None, verbose: int = 0) -> None:
        self.n_directions = n_directions
        self.affine_invariant = affine_invariant
        self.covariance = covariance
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.support_fraction = support_fraction
        self.verbose = verbose

    _whitens = affine_whitens
    _display_name = affine_display_name
    _covariance_spec = affine_covariance_spec

    def _error_bound(self, summary: Any) -> float:
        return 0.0  # exact medians and MADs

    def _fit_model(self, data: Input) -> None:
        fitted = fit_projection(data.array, n_directions=self.n_directions,
                                covariance=self._covariance_spec(),
                                rng=check_random_state(self.random_state),
                                nan_policy=self.nan_policy, whiten=self._whitens())
        fr, summary = fitted.frame, fitted.summary
        self._set_fitted(FittedDepth(
            summary=summary, location=summary.location, n=fitted.n,
            error_bound=self._error_bound(summary), passes=fitted.passes,
            sample_depth=fitted.sample_depth, token=fr.token, directions=summary.directions,
            covariance=fr.cfit.covariance, rank=fr.rank, basis=fr.basis,
            train_depth=fitted.train_depth,
            train_token=data.content_token if fitted.train_depth is not None else None))

    def _fitted_rows(self, state: dict[str, Any]) -> list[tuple[str, str]]:
        return [("m (directions)", f"{state['n_directions_']:,}"),
                ("error bound", "0 (exact medians and MADs)")]

    def score_samples(self, X: Any, return_std: bool = False, *,
                      sample_dim: Any = None) -> Any:
        """Projection depth of each row of ``X``: in (0, 1], higher is more central.

        NumPy in gives NumPy out, a pandas DataFrame a pandas Series with its
        index, dask in gives a lazy dask array with the same row chunks (a dask
        DataFrame a dask Series), and a DataArray gives a DataArray over its
        sample dimension (``sample_dim``, as for :meth:`fit`).  Rows with NaN
        or inf raise under ``nan_policy='raise'`` and get NaN under ``'omit'``.
        A point at ``location_`` far beyond the data has depth near 0; the
        depth is 0 only where a direction's MAD is 0 (see the class).
        ``return_std=True`` is refused: a maximum over directions has no
        standard error.
        """
        return super().score_samples(X, return_std, sample_dim=sample_dim)
