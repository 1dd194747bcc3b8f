"""The depth estimators on the leaf-summary engine: AI-IRW, IRW and the halfspace depth."""

from __future__ import annotations

from numbers import Integral
from typing import Any

from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval

from ..covariance.estimate import covariance_spec
from ..errors import ParameterError
from ..fitting.fit import fit_depth
from ..runtime.progress import show_phases
from ..summary.depth import DepthSummary
from ..summary.leaves import BlockLeaves
from ..summary.sorted import BlockSorted
from ..summary.statistics import MEAN, MIN
from .base import Capabilities, DepthDetector, FittedDepth
from .inputs import Input
from .params import CONSTRAINTS, DEFAULT_TOL, no_auto_directions
from .streaming import first_batch, update

#: The fitted attributes that describe a stream (set by ``partial_fit``, ``template``, ``merge``).
STREAM_ATTRIBUTES = ("n_batches_", "batch_rows_")

#: ``window=``: the number of most recent batches the summary holds (None: all).
WINDOW_CONSTRAINT = [Interval(Integral, 1, None, closed="left"), None]
#: ... and what to pass instead of an invalid one.
WINDOW_HINT = ("window is the number of most recent batches partial_fit keeps (at least 1), "
               "or None for all")


class LeafDepth(DepthDetector):
    """The depths on the leaf-summary engine: per-direction summaries of the projections.

    A mean (AI-IRW, IRW) or minimum (the halfspace depth) of univariate depths
    along random directions, fitted by :func:`daskdepth.fitting.fit.fit_depth`
    into a :class:`~daskdepth.summary.depth.DepthSummary` within ``tol``.
    """

    summary_type = DepthSummary
    summary_types = (DepthSummary, BlockLeaves, BlockSorted)
    capabilities = Capabilities(directions=True, tol=True, covariance=True, explains=True,
                                std=True, partial_fit=True)
    _statistic = MEAN
    _hints = {"window": WINDOW_HINT}
    _optional_fitted_attributes = ("feature_names_in_", *STREAM_ATTRIBUTES)
    _fitted_attributes = (
        "n_features_in_", "location_", "covariance_", "directions_", "n_directions_",
        "n_samples_fit_", "covariance_rank_", "error_bound_", "n_passes_", "summary_",
        "_sample_depth", "_fit_token", "_train_depth", "_train_token", "offset_")

    def partial_fit(self, X: Any, y: Any = None, *, sample_dim: Any = None) -> LeafDepth:
        """Add the rows ``X`` to the model: one pass over ``X``, no earlier row read again.

        The first call on an unfitted model fits it (as :meth:`fit`, plus one
        pass over ``X`` for the content-keyed row sample that sets ``offset_``
        later) and fixes its frame: location, covariance or whitening,
        directions and leaf keys.  Its leaves are planned with head room:
        they hold at most about 0.4 of the row limit for ``tol`` where
        ``fit``'s hold up to it, so the first bound is about 0.4 x ``tol``
        and batches of the same distribution keep it well within 2 x ``tol``
        (measured: 1.63 x ``tol`` after 50 batches of 10,000 rows on a first
        fit of 50,000, where ``fit``'s leaves reach 2.54 x ``tol``); that is
        2.5 times ``fit``'s leaves, about ``1.25 / tol`` per direction of some
        15 bytes each (87 MiB against ``fit``'s 33 MiB at ``tol=1e-4`` with
        500 directions).  Each later call projects the new rows on
        those directions, counts them into the existing leaves (a new key at
        each direction's new smallest and largest value, so points beyond all
        the data stay exact) and retabulates the scores: the depths are then
        those with respect to every row the model holds (the last ``window``
        batches, or all), in the first fit's frame, within ``error_bound_``.
        The bound stays certified for every point; it grows when new rows
        fall in few of the first fit's leaves (drift), and a
        :class:`daskdepth.StreamBoundWarning` says so (once per model) when
        it passes twice ``tol``: ``fit`` on recent data brings it back to
        ``tol``.  A first fit small enough to be exact (sorted projections)
        stays exact while the rows held stay within the size at which ``fit``
        keeps sorted projections (about ``3 / tol`` rows): each batch's rows
        are added to them (``error_bound_`` 0, the depths of the union), and
        past that size the summary is converted once to leaves planned on all
        the rows held (the streaming page of the documentation states the
        bound of such a stream on stationary data); blocks updated by
        ``partial_fit`` keep their leaf counts (4 bytes per leaf up to 2**23
        rows, 8 beyond), which the next batch adds to.
        ``offset_`` is recomputed after every batch: the
        ``contamination`` quantile of the depths, under the updated summary,
        of a content-keyed sample of at most 4,096 of the rows the model
        holds (fewer beyond 255 features: at most 8 MiB of rows; a model
        fitted by ``fit`` samples from its next batch on).

        Works on NumPy, pandas, dask and xarray input (a dask batch is read
        once, chunk by chunk, when ``partial_fit`` runs) and on a cluster,
        where a summary kept on the workers is updated where it is.
        ``nan_policy``, the features and their names are checked as by
        :meth:`fit`.  A batch refused (non-finite rows under
        ``nan_policy='raise'``, no finite rows) leaves the model as it was.

        Parameters
        ----------
        X : array-like, pandas or dask DataFrame, dask array or xarray.DataArray
            A batch of rows, of shape (n_samples, n_features).
        y : ignored
        sample_dim : str, optional
            DataArray only, as for :meth:`fit`.

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np, daskdepth
        >>> rng = np.random.default_rng(0)
        >>> model = daskdepth.IRW(n_directions=50, tol=0.01, random_state=0)
        >>> for day in range(5):
        ...     model = model.partial_fit(rng.normal(size=(1000, 2)))
        >>> model.n_samples_fit_, model.n_batches_, bool(model.error_bound_ <= 0.02)
        (5000, 5, True)
        """
        if "summary_" not in self.__dict__:
            first_batch(self, X, sample_dim)
        else:
            with show_phases(f"updating {str(self.depth_name).upper()}", self.verbose):
                update(self, X, sample_dim)
        return self

    def _fit_model(self, data: Input) -> None:
        # a fit starts a new stream: nothing of an earlier one is kept
        for name in ("n_batches_", "batch_rows_", "_stream", "_bound_warned"):
            self.__dict__.pop(name, None)
        rng = check_random_state(self.random_state)
        fitted = fit_depth(data.array, depth=self.depth_name, n_directions=self.n_directions,
                           covariance=self._covariance_spec(), tol=float(self.tol), rng=rng,
                           nan_policy=self.nan_policy, whiten=self._whitens(),
                           statistic=self._statistic,
                           frame=getattr(self, "frame", "correlation"),
                           overfull=getattr(self, "_pilot_overfull", 1.0),
                           fill=self.__dict__.get("_stream_fill", 1.0))
        # The training rows' depths, when the fit computed them, for scoring the same
        # rows again: keyed on their content, never on the object's identity.
        known = fitted.train_depth is not None
        self._set_fitted(FittedDepth(
            summary=fitted.summary, location=fitted.location, n=fitted.n,
            error_bound=self._error_bound(fitted.summary), passes=fitted.info.passes,
            sample_depth=fitted.sample_depth, token=fitted.token,
            directions=fitted.directions, covariance=fitted.covariance, rank=fitted.rank,
            basis=fitted.basis,
            frame_eigenvalues=None if fitted.frame is None else fitted.frame.eigenvalues,
            train_depth=fitted.train_depth,
            train_token=data.content_token if known else None))


class AIIRW(LeafDepth):
    """Affine-invariant integrated rank-weighted (AI-IRW) depth outlier detector.

    The depth of ``x`` averages, over directions ``v_j = W u_j`` with ``u_j``
    uniform on the sphere and ``W W^T = Sigma^{-1}``, the smaller of the shares
    of reference points on either side of ``x`` along ``v_j``.  Low depth means
    outlying.  Works on NumPy, dask and xarray input; large inputs are fitted in
    a few chunked passes and scored with one ``map_blocks``.

    Parameters
    ----------
    n_directions : int, 'auto' or None, default=None
        Number of random directions ``m``; None means ``100 * n_features``, the
        paper's choice; 'auto' picks the smallest ``m`` (between 50 and 2,500)
        for which the depth's Monte Carlo standard error (see
        ``score_samples(X, return_std=True)``) is at most 0.005 for every point
        of a pilot (100 directions, 2,000 points of the row sample against up
        to 16,384 of its rows).  ``n_directions_`` is the ``m`` used.
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
    frame : {'correlation', 'invariant'}, default='correlation'
        Axes in which the directions ``u_j`` are drawn.  The whitening ``W`` is
        only defined up to a rotation, and with finitely many directions the
        depth depends on it: 'correlation' uses the whitening's own axes (the
        eigenvectors of the correlation matrix), which makes the depth
        invariant under translations and rescaling of single features, but
        only approximately under other affine maps (Kendall's tau about 0.95
        between the depths of ``X`` and ``A X + b`` at ``m = 300``).
        'invariant' rotates ``W`` into an affine-equivariant frame (the
        eigenvectors of the fourth-moment scatter ``E[|z|^2 z z^T]`` of the
        whitened rows, with signs from a third moment), at the cost of one or
        two more passes in which ``W`` is also refined exactly: then, for the
        same ``random_state``, the depths of ``A X + b`` equal those of ``X``
        up to rounding, in and out of sample, for any invertible ``A``, with
        ``covariance='sample'`` or ``'mcd'`` (affine equivariant estimates);
        with 'ledoit-wolf' and 'oas' for rotations, uniform scaling and
        translations only (shrinkage is not affine equivariant); with a
        precomputed matrix when it is transformed as ``A C A^T`` too.  A
        :class:`daskdepth.FrameWarning` says when the data do not fix the frame
        (exact symmetries).  The default stays 'correlation': the same
        directions as earlier versions for the same ``random_state``, no extra
        pass (each pass re-reads the data of an out-of-core job), and the
        depths' distribution is the same in any frame, so accuracy and outlier
        detection do not change; choose 'invariant' when results must agree
        across units or coordinate systems at finite ``m``.
    tol : float, default=1e-4
        Certified bound on the absolute difference between the computed depth and
        the exact depth for the same directions; ``error_bound_ <= tol`` after
        fitting.  ``tol=0`` gives the exact depth, at a memory cost that grows with
        the number of distinct reference values (the mode for moderate n).
    contamination : float in (0, 0.5], default=0.1
        Expected share of outliers; sets ``offset_``.
    random_state : int, RandomState or None, default=None
        Seeds the directions and the row sample, on the client only: results do
        not depend on chunking, workers or scheduler.
    nan_policy : {'raise', 'omit'}, default='raise'
        'raise' rejects rows with NaN or inf, naming how many and which;
        'omit' leaves them out of the fit and gives them NaN depth.
    verbose : int, default=0
        0 prints nothing; 1 or more prints the phases of ``fit`` and
        ``fit_predict`` to stdout as they run, named as the command line names
        them (``moments``, ``histogram``, ...): with dask's local schedulers on
        a terminal or in a notebook, a progress bar per phase that stays with
        the phase's time when it ends; otherwise (a distributed client, or
        output to a file) a line when each phase starts and one when it ends,
        with its time.  A last line gives the total time and the passes over
        the data.  It does not change any result.
    window : int or None, default=None
        For :meth:`partial_fit`: the number of most recent batches the model
        holds (its first fit counts as one); when a batch arrives and the
        window is full, the counts of the oldest batch are subtracted, exactly,
        so ``error_bound_`` stays certified.  Each batch kept costs 8 bytes
        per leaf, 16 per direction and its row sample (at most 4,096 rows of
        ``8 (n_features + 1)`` bytes), held with the model.  None keeps every
        batch.  Set it before the first batch.

    Attributes
    ----------
    location_ : ndarray of shape (n_features,)
        Mean of the reference rows, or their robust location for
        ``covariance='mcd'`` (projections are centred on it).
    covariance_ : ndarray of shape (n_features, n_features)
        Covariance estimate that defines the whitening.
    directions_ : ndarray of shape (n_directions, n_features)
        Directions ``v_j`` in input coordinates: the exact depth of ``x`` is the
        symmetric, tie-aware rank formula applied to ``<X_i, v_j>`` and ``<x, v_j>``.
    n_directions_ : int
        Number of directions ``m`` used.
    covariance_rank_ : int
        Rank of ``covariance_`` used for whitening (AI-IRW).
    basis_ : ndarray of shape (n_features, rank)
        AI-IRW only (``rank`` is ``covariance_rank_``): the whitening in the
        frame of ``frame=``, ``basis_ @ basis_.T`` the (pseudo-)inverse of the
        covariance; the directions are ``directions_ = u @ basis_.T`` with ``u``
        uniform on the sphere.  With ``frame='invariant'`` it is equivariant:
        ``A X + b`` has the basis ``inv(A).T @ basis_``.
    frame_eigenvalues_ : ndarray of shape (rank,)
        ``frame='invariant'`` only (``rank`` is ``covariance_rank_``): eigenvalues
        of the fourth-moment scatter of the whitened rows (mean 1, decreasing)
        whose eigenvectors are the frame.
    n_samples_fit_ : int
        Number of finite reference rows.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when the input had string feature names (DataFrame columns or a
        DataArray feature coordinate).
    error_bound_ : float
        Certified bound on ``|computed - exact|`` depth for the same
        directions, at most ``tol``: the summary's approximation.  The Monte
        Carlo error of using ``m`` random directions at all is another matter,
        estimated per point by ``score_samples(X, return_std=True)``.
    offset_ : float
        ``contamination`` quantile of the training depths (estimated on a row
        sample of at most 65,536 rows when there are more: within about 1e-3 in
        rank).
    n_passes_ : int
        Leaf passes over the data after the moments pass: one histogram pass
        per wave of directions (more than one when the workers' memory cannot
        hold all directions' leaf counts at once) and one refinement pass if
        any (0 when the data fits the in-memory exact path).
    n_batches_ : int
        After :meth:`partial_fit` (or :func:`daskdepth.template`,
        :func:`daskdepth.merge`): the batches added, the first fit counting as
        one (0 for a template).
    batch_rows_ : ndarray of shape (n_kept_batches,)
        After :meth:`partial_fit`: the finite rows of each batch the model
        holds, oldest first (with ``window``, the last ``window`` batches).
    summary_ : DepthSummary
        The merged per-direction summaries used for scoring.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> model = daskdepth.AIIRW(random_state=0).fit(X)
    >>> depth = model.score_samples(np.array([[0.0, 0.0, 0.0], [6.0, 6.0, 6.0]]))
    >>> bool(depth[0] > 0.4 and depth[1] < 0.05)
    True
    >>> model.predict(np.array([[6.0, 6.0, 6.0]]))
    array([-1])
    """

    depth_name = "ai-irw"
    display_name = "AI-IRW"
    long_name = "AI-IRW depth"
    _optional_fitted_attributes = ("feature_names_in_", "basis_", "frame_eigenvalues_",
                                   *STREAM_ATTRIBUTES)
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "n_directions", "covariance", "tol", "contamination", "random_state", "nan_policy",
        "support_fraction", "frame", "verbose")}
    _parameter_constraints["window"] = WINDOW_CONSTRAINT

    def __init__(self, n_directions: int | str | None = None, covariance: object = "sample",
                 tol: float = DEFAULT_TOL, contamination: float = 0.1, random_state: Any = None,
                 nan_policy: str = "raise", support_fraction: float | None = None,
                 frame: str = "correlation", verbose: int = 0,
                 window: int | None = None) -> None:
        self.n_directions = n_directions
        self.covariance = covariance
        self.tol = tol
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.support_fraction = support_fraction
        self.frame = frame
        self.verbose = verbose
        self.window = window

    def _whitens(self) -> bool:
        return True

    def _covariance_spec(self) -> object:
        return whitening_spec(self.covariance, self.support_fraction)


class IRW(LeafDepth):
    """Integrated rank-weighted (IRW) depth outlier detector.

    Like :class:`AIIRW` with directions uniform on the sphere of the input
    space (no whitening): cheaper, but not affine invariant, so features should
    be on comparable scales.

    Parameters
    ----------
    n_directions : int, 'auto' or None, default=None
        Number of random directions ``m``; None means ``100 * n_features``, the
        paper's choice; 'auto' picks the smallest ``m`` (between 50 and 2,500)
        for which the depth's Monte Carlo standard error (see
        ``score_samples(X, return_std=True)``) is at most 0.005 for every point
        of a pilot (100 directions, 2,000 points of the row sample against up
        to 16,384 of its rows).  ``n_directions_`` is the ``m`` used.
    tol : float, default=1e-4
        Certified bound on the absolute difference between the computed depth and
        the exact depth for the same directions; ``error_bound_ <= tol`` after
        fitting.  ``tol=0`` gives the exact depth, at a memory cost that grows with
        the number of distinct reference values (the mode for moderate n).
    contamination : float in (0, 0.5], default=0.1
        Expected share of outliers; sets ``offset_``.
    random_state : int, RandomState or None, default=None
        Seeds the directions and the row sample, on the client only: results do
        not depend on chunking, workers or scheduler.
    nan_policy : {'raise', 'omit'}, default='raise'
        'raise' rejects rows with NaN or inf, naming how many and which;
        'omit' leaves them out of the fit and gives them NaN depth.
    verbose : int, default=0
        0 prints nothing; 1 or more prints the phases of ``fit`` and
        ``fit_predict`` to stdout as they run, named as the command line names
        them (``moments``, ``histogram``, ...): with dask's local schedulers on
        a terminal or in a notebook, a progress bar per phase that stays with
        the phase's time when it ends; otherwise (a distributed client, or
        output to a file) a line when each phase starts and one when it ends,
        with its time.  A last line gives the total time and the passes over
        the data.  It does not change any result.
    window : int or None, default=None
        For :meth:`partial_fit`: the number of most recent batches the model
        holds (its first fit counts as one); when a batch arrives and the
        window is full, the counts of the oldest batch are subtracted, exactly,
        so ``error_bound_`` stays certified.  Each batch kept costs 8 bytes
        per leaf, 16 per direction and its row sample (at most 4,096 rows of
        ``8 (n_features + 1)`` bytes), held with the model.  None keeps every
        batch.  Set it before the first batch.

    Attributes
    ----------
    location_ : ndarray of shape (n_features,)
        Mean of the reference rows, or their robust location for
        ``covariance='mcd'`` (projections are centred on it).
    covariance_ : ndarray of shape (n_features, n_features)
        Covariance estimate (informative; IRW does not whiten).
    directions_ : ndarray of shape (n_directions, n_features)
        Directions ``v_j`` in input coordinates: the exact depth of ``x`` is the
        symmetric, tie-aware rank formula applied to ``<X_i, v_j>`` and ``<x, v_j>``.
    n_directions_ : int
        Number of directions ``m`` used.
    covariance_rank_ : int
        Rank of ``covariance_`` used for whitening (AI-IRW).
    n_samples_fit_ : int
        Number of finite reference rows.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when the input had string feature names (DataFrame columns or a
        DataArray feature coordinate).
    error_bound_ : float
        Certified bound on ``|computed - exact|`` depth for the same
        directions, at most ``tol``: the summary's approximation.  The Monte
        Carlo error of using ``m`` random directions at all is another matter,
        estimated per point by ``score_samples(X, return_std=True)``.
    offset_ : float
        ``contamination`` quantile of the training depths (estimated on a row
        sample of at most 65,536 rows when there are more: within about 1e-3 in
        rank).
    n_passes_ : int
        Leaf passes over the data after the moments pass: one histogram pass
        per wave of directions (more than one when the workers' memory cannot
        hold all directions' leaf counts at once) and one refinement pass if
        any (0 when the data fits the in-memory exact path).
    n_batches_ : int
        After :meth:`partial_fit` (or :func:`daskdepth.template`,
        :func:`daskdepth.merge`): the batches added, the first fit counting as
        one (0 for a template).
    batch_rows_ : ndarray of shape (n_kept_batches,)
        After :meth:`partial_fit`: the finite rows of each batch the model
        holds, oldest first (with ``window``, the last ``window`` batches).
    summary_ : DepthSummary
        The merged per-direction summaries used for scoring.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> depth = daskdepth.IRW(random_state=0).fit(X).score_samples(X)
    >>> depth.shape, bool(0 <= depth.min() and depth.max() <= 0.5)
    ((500,), True)
    """

    depth_name = "irw"
    display_name = "IRW"
    long_name = "IRW depth"
    _why_not = {"covariance": "IRW does not whiten", "support_fraction": "IRW does not whiten"}
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "n_directions", "tol", "contamination", "random_state", "nan_policy", "verbose")}
    _parameter_constraints["window"] = WINDOW_CONSTRAINT

    def __init__(self, n_directions: int | str | None = None, tol: float = DEFAULT_TOL,
                 contamination: float = 0.1, random_state: Any = None,
                 nan_policy: str = "raise", verbose: int = 0,
                 window: int | None = None) -> None:
        self.n_directions = n_directions
        self.tol = tol
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.verbose = verbose
        self.window = window


def whitening_spec(covariance: object, support_fraction: Any) -> object:
    """The covariance a whitened depth fits; ``support_fraction`` only with ``'mcd'``."""
    if support_fraction is not None and not (isinstance(covariance, str)
                                             and covariance == "mcd"):
        raise ParameterError(f"support_fraction={support_fraction!r} applies only with "
                         "covariance='mcd' (the share of rows in the MCD support); pass "
                         "covariance='mcd' or leave support_fraction out",
                             name="support_fraction", value=support_fraction)
    return covariance_spec(covariance, support_fraction)


# The option ``affine_invariant`` of the depths that whiten only when asked (Halfspace,
# Projection): their methods, shared.

def affine_whitens(self: Any) -> bool:
    return bool(self.affine_invariant)


def affine_display_name(self: Any) -> str:
    return f"affine-invariant {self.display_name}" if self._whitens() else self.display_name


def affine_covariance_spec(self: Any) -> object:
    if self.affine_invariant:
        return whitening_spec(self.covariance, self.support_fraction)
    cov = self.covariance
    if not (isinstance(cov, str) and cov == "sample") or self.support_fraction is not None:
        given = (f"covariance={cov!r}" if not (isinstance(cov, str) and cov == "sample")
                 else f"support_fraction={self.support_fraction!r}")
        raise ParameterError(f"{given} applies only with affine_invariant=True (the directions "
                             "are whitened by the covariance only then); pass "
                             "affine_invariant=True or leave it out", name=given.split("=")[0])
    return "sample"


class Halfspace(LeafDepth):
    """Random halfspace (Tukey) depth outlier detector.

    The depth of ``x`` is the smallest, over ``m`` random directions ``v_j``,
    share of reference points on the smaller side of ``x`` along ``v_j``:
    ``min_j min(L_j, G_j) / n`` with ``L_j`` (``G_j``) the reference points
    whose projection is ``<=`` (``>=``) that of ``x``: the random Tukey depth
    of Cuesta-Albertos and Nieto-Reyes (2008), the paper's column T (with
    ``m = 100 d``).  It is the halfspace depth restricted to the drawn
    directions, so it is at least the exact Tukey depth; it is 0 outside the
    data's range along any direction, so points beyond the data tie at 0.

    The same summaries as :class:`AIIRW` and :class:`IRW` score it, taking the
    minimum over directions instead of the mean; its certified bound is
    therefore each direction's worst leaf at most, over all directions (not
    their mean), and the summaries are refined until that bound meets ``tol``.
    With ``affine_invariant=True`` the directions are drawn as AI-IRW draws
    them (``v_j = W u_j``, ``W W^T = Sigma^{-1}``), which makes the depth
    invariant under affine maps of the data.

    Parameters
    ----------
    n_directions : int or None, default=None
        Number of random directions ``m``; None means ``100 * n_features``, the
        paper's choice.
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
    tol : float, default=1e-4
        Certified bound on the absolute difference between the computed depth and
        the exact depth for the same directions; ``error_bound_ <= tol`` after
        fitting.  ``tol=0`` gives the exact depth, at a memory cost that grows with
        the number of distinct reference values (the mode for moderate n).
    contamination : float in (0, 0.5], default=0.1
        Expected share of outliers; sets ``offset_``.
    random_state : int, RandomState or None, default=None
        Seeds the directions and the row sample, on the client only: results do
        not depend on chunking, workers or scheduler.
    nan_policy : {'raise', 'omit'}, default='raise'
        'raise' rejects rows with NaN or inf, naming how many and which;
        'omit' leaves them out of the fit and gives them NaN depth.
    verbose : int, default=0
        0 prints nothing; 1 or more prints the phases of ``fit`` and
        ``fit_predict`` to stdout as they run, named as the command line names
        them (``moments``, ``histogram``, ...): with dask's local schedulers on
        a terminal or in a notebook, a progress bar per phase that stays with
        the phase's time when it ends; otherwise (a distributed client, or
        output to a file) a line when each phase starts and one when it ends,
        with its time.  A last line gives the total time and the passes over
        the data.  It does not change any result.
    window : int or None, default=None
        For :meth:`partial_fit`: the number of most recent batches the model
        holds (its first fit counts as one); when a batch arrives and the
        window is full, the counts of the oldest batch are subtracted, exactly,
        so ``error_bound_`` stays certified.  Each batch kept costs 8 bytes
        per leaf, 16 per direction and its row sample (at most 4,096 rows of
        ``8 (n_features + 1)`` bytes), held with the model.  None keeps every
        batch.  Set it before the first batch.

    Attributes
    ----------
    location_ : ndarray of shape (n_features,)
        Mean of the reference rows, or their robust location for
        ``covariance='mcd'`` (projections are centred on it).
    covariance_ : ndarray of shape (n_features, n_features)
        Covariance estimate (that defines the whitening with ``affine_invariant=True``).
    directions_ : ndarray of shape (n_directions, n_features)
        Directions ``v_j`` in input coordinates: the exact depth of ``x`` is the
        symmetric, tie-aware rank formula applied to ``<X_i, v_j>`` and ``<x, v_j>``.
    n_directions_ : int
        Number of directions ``m`` used.
    covariance_rank_ : int
        Rank of ``covariance_`` used for whitening (AI-IRW).
    basis_ : ndarray of shape (n_features, rank)
        ``affine_invariant=True`` only (``rank`` is ``covariance_rank_``): the
        whitening, ``basis_ @ basis_.T`` the (pseudo-)inverse of the covariance;
        the directions are ``directions_ = u @ basis_.T`` with ``u`` uniform on
        the sphere.
    n_samples_fit_ : int
        Number of finite reference rows.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined when the input had string feature names (DataFrame columns or a
        DataArray feature coordinate).
    error_bound_ : float
        Certified bound on ``|computed - exact|`` depth for the same
        directions, at most ``tol``: the summary's approximation.  The Monte
        Carlo error of using ``m`` random directions at all is another matter,
        estimated per point by ``score_samples(X, return_std=True)``.
    offset_ : float
        ``contamination`` quantile of the training depths (estimated on a row
        sample of at most 65,536 rows when there are more: within about 1e-3 in
        rank).
    n_passes_ : int
        Leaf passes over the data after the moments pass: one histogram pass
        per wave of directions (more than one when the workers' memory cannot
        hold all directions' leaf counts at once) and one refinement pass if
        any (0 when the data fits the in-memory exact path).
    n_batches_ : int
        After :meth:`partial_fit` (or :func:`daskdepth.template`,
        :func:`daskdepth.merge`): the batches added, the first fit counting as
        one (0 for a template).
    batch_rows_ : ndarray of shape (n_kept_batches,)
        After :meth:`partial_fit`: the finite rows of each batch the model
        holds, oldest first (with ``window``, the last ``window`` batches).
    summary_ : DepthSummary
        The merged per-direction summaries used for scoring.

    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(500, 2))
    >>> model = daskdepth.Halfspace(random_state=0, tol=0).fit(X)
    >>> depth = model.score_samples(np.array([[0.0, 0.0], [10.0, 10.0]]))
    >>> bool(depth[0] > 0.4), float(depth[1])
    (True, 0.0)
    >>> model.error_bound_
    0.0
    """

    depth_name = "halfspace"
    display_name = "halfspace (Tukey)"
    long_name = "random halfspace (Tukey) depth"
    # a minimum over directions has no Monte Carlo standard error
    capabilities = Capabilities(directions=True, tol=True, covariance=True, explains=True,
                                partial_fit=True)
    _optional_fitted_attributes = ("feature_names_in_", "basis_", *STREAM_ATTRIBUTES)
    _statistic = MIN
    _no_whitening = "none (affine_invariant=False: directions uniform on the sphere)"
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "affine_invariant", "covariance", "tol", "contamination", "random_state",
        "nan_policy", "support_fraction", "verbose")}
    # 'auto' picks m for a standard error of a mean over directions; a minimum has none.
    _parameter_constraints["n_directions"], _hints = no_auto_directions("100 x n_features")
    _parameter_constraints["window"] = WINDOW_CONSTRAINT
    _hints = {**_hints, "window": WINDOW_HINT}

    def __init__(self, n_directions: int | None = None, affine_invariant: bool = False,
                 covariance: object = "sample", tol: float = DEFAULT_TOL,
                 contamination: float = 0.1, random_state: Any = None, nan_policy: str = "raise",
                 support_fraction: float | None = None, verbose: int = 0,
                 window: int | None = None) -> None:
        self.n_directions = n_directions
        self.affine_invariant = affine_invariant
        self.covariance = covariance
        self.tol = tol
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.support_fraction = support_fraction
        self.verbose = verbose
        self.window = window

    _whitens = affine_whitens
    _display_name = affine_display_name
    _covariance_spec = affine_covariance_spec
