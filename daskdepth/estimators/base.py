"""The scikit-learn outlier-detector base class shared by the depth estimators."""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass
from typing import Any, ClassVar

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from sklearn.base import BaseEstimator, OutlierMixin, _fit_context
from sklearn.utils.validation import check_is_fitted

from ..errors import ParameterError, ZeroCovarianceError
from ..fitting.offset import SAMPLE_SIZE, offset_sample
from ..passes.scoring import score_array
from ..runtime.client import keep_placement, phase
from ..runtime.keys import key_name
from ..runtime.progress import show_phases
from ..runtime.shards import check_kept, fitting_on_cluster
from ..storage.modelformat import save_model
from ..summary.statistics import WHOLE, Statistic
from .explain import explain_rows, explained
from .inputs import Input, as_input, check_feature_names, wide_integer_message
from .known import DEPTHS, ESTIMATORS
from .params import check_param
from .warmup import warm_workers

#: Fitted attributes the model format records for every depth (they bound its stored arrays:
#: :func:`daskdepth.storage.modelformat.read_model` refuses a store without them).
STORED_COUNTS = ("n_samples_fit_", "n_features_in_", "n_directions_")


@dataclass
class FittedDepth:
    """What a fit found, in one record that :meth:`DepthDetector._set_fitted` sets as attributes.

    Every depth's ``_fit_model`` makes one (the fields a depth has not, e.g. the
    half-space mass's covariance, stay None) instead of setting its attributes one by
    one; the attributes set are those the class lists (``_fitted_attributes`` and
    ``_optional_fitted_attributes``), so a class never sets one it does not declare.
    """

    #: The fitted summary (``summary_``) the scores are computed from.
    summary: Any
    #: ``location_``: the centre of the projections.
    location: np.ndarray
    #: ``n_samples_fit_``: the finite reference rows.
    n: int
    #: ``error_bound_``: the certified bound of the scores.
    error_bound: float
    #: ``n_passes_``: passes over the data after the moments pass.
    passes: int
    #: The training depths ``offset_`` is the quantile of (kept, possibly a row sample).
    sample_depth: np.ndarray
    #: ``_fit_token``: what the fit's graph keys are named after.
    token: str
    #: ``directions_`` (and ``n_directions_``, their number), for a depth with directions.
    directions: np.ndarray | None = None
    #: ``covariance_`` and ``covariance_rank_``, for a depth that fits a covariance.
    covariance: np.ndarray | None = None
    rank: int | None = None
    #: ``basis_`` (whitened directions) and ``frame_eigenvalues_`` (``frame='invariant'``).
    basis: np.ndarray | None = None
    frame_eigenvalues: np.ndarray | None = None
    #: The training rows' depths when the fit computed them, and their content's token.
    train_depth: np.ndarray | None = None
    train_token: str | None = None

    def attributes(self) -> dict[str, Any]:
        """The fitted attributes it gives, by name, in the order they are set."""
        return {
            "location_": self.location, "covariance_": self.covariance,
            "directions_": self.directions,
            "n_directions_": None if self.directions is None else self.directions.shape[0],
            "n_samples_fit_": self.n, "covariance_rank_": self.rank, "basis_": self.basis,
            "frame_eigenvalues_": self.frame_eigenvalues, "error_bound_": self.error_bound,
            "n_passes_": self.passes, "summary_": self.summary,
            "_sample_depth": self.sample_depth, "_fit_token": self.token,
            "_train_depth": self.train_depth, "_train_token": self.train_token}


@dataclass(frozen=True)
class Capabilities:
    """What a depth can do, declared once by its class (``DepthDetector.capabilities``).

    Each field says the depth has it (all False by default: a class names what it has).

    :func:`daskdepth.estimators.register` checks the declaration against the
    class (its parameters, fitted attributes, summary and statistic) and
    refuses one that disagrees; the command line's options, the model loader,
    the explanations, the scikit-learn checks and the documentation's lists
    read it instead of naming depths.

    Examples
    --------
    >>> import daskdepth
    >>> daskdepth.HalfspaceMass.capabilities.explains
    False
    >>> daskdepth.IRW.capabilities.std, daskdepth.Projection.capabilities.tol
    (True, False)
    """

    #: It draws directions: takes ``n_directions`` and sets ``directions_`` and
    #: ``n_directions_``.
    directions: bool = False
    #: It takes ``tol``, the certified bound on the depth error.
    tol: bool = False
    #: It fits a covariance (``covariance_``, ``covariance_rank_``).
    covariance: bool = False
    #: ``explain`` gives its least-deep directions (its score is made of per-direction
    #: univariate depths).
    explains: bool = False
    #: ``score_samples(X, return_std=True)`` gives Monte Carlo standard errors.
    std: bool = False
    #: ``partial_fit`` adds batches of rows to a fitted model (one pass over each batch),
    #: :func:`daskdepth.merge` combines models started from one :func:`daskdepth.template`,
    #: and ``window=`` keeps the most recent batches.
    partial_fit: bool = False


class _CapableOnly:
    """``partial_fit`` of the depths that declare it; for the others an AttributeError saying why.

    ``hasattr(model, 'partial_fit')`` is then False for a depth whose summary
    does not add over batches (scikit-learn's checks call a ``partial_fit``
    they find), and calling it names the reason and what to do instead.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self.fn
        if not owner.capabilities.partial_fit:
            raise AttributeError(
                f"{owner.__name__} has no partial_fit: {owner._why_no_partial_fit}. Fit it on "
                f"all the rows (fit), or use a depth whose summary adds up over batches "
                f"({', '.join(capable('partial_fit'))})")
        return self.fn.__get__(obj, owner)


class DepthDetector(OutlierMixin, BaseEstimator):
    """Base class of the depth outlier detectors: fit, scoring, labels, saving, display.

    Neutral: it assumes no engine.  Each subclass owns its depth: the class
    attributes below say what it is called, what it can do (``capabilities``)
    and how it scores, its ``__init__`` and ``_parameter_constraints`` declare
    its parameters, :meth:`_check_rules` the rules between them, and
    ``_fit_model`` fits it, handing one :class:`FittedDepth` to
    :meth:`_set_fitted`.  The registry (:mod:`daskdepth.estimators.registry`),
    ``score(depth=...)``, the command line's ``--depth`` and the model files
    derive from them.  The depths on the leaf-summary engine (AI-IRW, IRW,
    halfspace) share :class:`daskdepth.estimators.depths.LeafDepth`.
    """

    #: The name ``depth=`` and the command line's ``--depth`` take (None: not registered).
    depth_name: str | None = None
    #: How displays and messages name the depth.
    display_name = "depth"
    #: What the attributes of a depth output call it (netCDF's ``long_name``).
    long_name = "depth"
    #: The type of the fitted ``summary_`` (set by each depth).
    summary_type: type = object
    #: Every dataclass a saved ``summary_`` holds, ``summary_type`` first: registration adds
    #: them to the classes a model store may hold
    #: (:data:`daskdepth.storage.codec.MODEL_CLASSES`).
    summary_types: tuple[type, ...] = ()
    #: What the depth can do (:class:`Capabilities`; nothing unless the class says).
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: How the summary's values become a score (its bound, how parts combine).
    _statistic: Statistic = WHOLE
    #: What the display says of the covariance of a depth that does not whiten.
    _no_whitening = "none (IRW does not whiten)"
    #: Fitted attributes that are copies of the summary's fields (attribute: field).
    _summary_fields: dict[str, str] = {}
    #: Why this depth does not take a parameter some other depth takes (by parameter; the
    #: default reason: the estimator has no such parameter).
    _why_not: dict[str, str] = {}
    #: What to pass instead of an invalid value, where this depth's hint differs from the
    #: shared one (:data:`daskdepth.estimators.params.HINTS`), by parameter.
    _hints: dict[str, str] = {}
    #: Why the depth has no ``partial_fit`` (its summary's parts do not add over batches).
    _why_no_partial_fit = "its fitted summary is not made of counts that add over batches"

    #: The attributes ``fit`` always sets: a saved model holds these (and the parameters).
    _fitted_attributes: tuple[str, ...] = (
        "n_features_in_", "location_", "n_samples_fit_", "error_bound_", "summary_",
        "_sample_depth", "offset_")
    #: Fitted attributes set only for some inputs (string feature names) or options.
    _optional_fitted_attributes: tuple[str, ...] = ("feature_names_in_",)

    def __new__(cls, *args: Any, **kwargs: Any) -> DepthDetector:
        # A keyword the depth does not take is refused here, before __init__ would raise
        # Python's bare "unexpected keyword argument": a ParameterError (also a TypeError)
        # that names the depths that take it.
        if kwargs:
            names = cls._get_param_names()
            for name in kwargs:
                if name not in names:
                    raise parameter_not_taken(cls, name, kwargs[name])
        return super().__new__(cls)

    # ---------------------------------------------------------------- fitting

    def _covariance_spec(self) -> object:
        return "sample"

    def _whitens(self) -> bool:
        """Whether the directions are whitened by the covariance (affine invariance)."""
        return False

    def _check_rules(self) -> None:
        """Refuse parameters that are valid alone but not together (a ValueError says the fix).

        Run by ``fit`` and by :func:`daskdepth.estimators.make_estimator` (so that
        the one-call functions and the command line refuse them before any work).
        """
        self._covariance_spec()

    def _validate_params(self) -> None:
        # Run by scikit-learn's _fit_context: each of the subclass's _parameter_constraints,
        # with the hint of what to pass instead, then the rules between them.
        for name, constraints in self._parameter_constraints.items():
            check_param(name, getattr(self, name), type(self).__name__, constraints,
                        hint=self._hints.get(name))
        self._check_rules()

    def _error_bound(self, summary: Any) -> float:
        """The certified bound of the scores of ``summary`` (``error_bound_``)."""
        return summary.error_bound(self._statistic)

    def _fit(self, X: Any, sample_dim: Any = None) -> Input:
        data = as_input(X, what="X", min_samples=2, nan_policy=self.nan_policy,
                        sample_dim=sample_dim)
        # on a cluster: every worker has the kernels before the passes plan their memory
        warm_workers(self, data.n_features)
        try:
            with fitting_on_cluster():  # a restart meanwhile: said in the fit's terms
                self._fit_model(data)
        except ZeroCovarianceError as exc:
            # Zero covariance from 64-bit integers: float64 may have rounded them together
            # (a uint64 id or a nanosecond timestamp): say so instead of "constant".
            dtype = data.source_dtype
            if dtype.kind in "iu" and dtype.itemsize == 8:
                raise ZeroCovarianceError(f"{exc}. {wide_integer_message(dtype, 'X')}") from exc
            raise
        self.n_features_in_ = data.n_features
        if data.feature_names is not None:
            self.feature_names_in_ = data.feature_names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return data

    def _fit_model(self, data: Input) -> None:
        """Fit on the checked input and set the fitted attributes (all but the features').

        Each depth implements it, ending with ``self._set_fitted(FittedDepth(...))``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement _fit_model, "
                                  "which fits the depth (see DepthDetector)")

    def _set_fitted(self, fitted: FittedDepth) -> None:
        """Set the fitted attributes the class declares from ``fitted``, in one place.

        Those of ``_fitted_attributes`` always; those of ``_optional_fitted_attributes``
        when ``fitted`` has them, and removed when an earlier fit left one this fit has
        not (``basis_`` of a fit with another ``frame``); the summary's copies
        (``_summary_fields``) after ``directions_``.
        """
        values = fitted.attributes()
        copies = {name: getattr(fitted.summary, field)
                  for name, field in self._summary_fields.items()}
        required, optional = set(self._fitted_attributes), set(self._optional_fitted_attributes)
        for name, value in values.items():
            if name in required:
                setattr(self, name, value)
            elif name in optional:
                if value is not None:
                    setattr(self, name, value)
                elif name in self.__dict__:  # from an earlier fit with other options
                    delattr(self, name)
            if name == "directions_":
                for copy, value in copies.items():
                    setattr(self, copy, value)

    def _progress_label(self) -> str:
        """What the progress displays call a fit of this depth, e.g. ``fitting AI-IRW``."""
        return f"fitting {str(self.depth_name).upper()}"

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None, *, sample_dim: Any = None) -> DepthDetector:
        """Fit the depth on the reference rows ``X``.

        Parameters
        ----------
        X : array-like, pandas or dask DataFrame, dask array or xarray.DataArray
            Reference data of shape (n_samples, n_features).  Dask arrays are
            processed chunk by chunk.  pandas' nullable columns and object
            columns of numbers are converted to float64 (``pd.NA`` as NaN).
        y : ignored
        sample_dim : str, optional
            DataArray only: the dimension that holds the samples.  By default
            the one named ``'sample'``, else the one not named ``'feature'``,
            else the first; an orientation the names leave open and the shape
            contradicts (fewer samples than features) is refused.

        Returns
        -------
        self

        Examples
        --------
        ``verbose=1`` names each phase as it runs (here printed to a file-like
        stdout, so as lines; on a terminal, a progress bar per phase):

        >>> import numpy as np, daskdepth
        >>> X = np.random.default_rng(0).normal(size=(500, 2))
        >>> model = daskdepth.AIIRW(random_state=0, verbose=1).fit(X)  # doctest: +ELLIPSIS
        fitting AI-IRW: moments started
        fitting AI-IRW: moments done in ... s
        fitting AI-IRW: exact started
        ...
        fitting AI-IRW: done in ... s, 1 pass over the data (moments 1)
        """
        with show_phases(self._progress_label(), self.verbose):
            self._fit(X, sample_dim)
        self.offset_ = float(np.percentile(self._sample_depth, 100 * self.contamination))
        return self

    def _no_partial_fit(self, X: Any, y: Any = None, *,
                        sample_dim: Any = None) -> DepthDetector:
        """Add the rows ``X`` to the model (depths with ``capabilities.partial_fit`` only)."""
        raise NotImplementedError(f"{type(self).__name__} declares partial_fit but does not "
                                  "implement it")  # pragma: no cover - register() checks

    #: A depth without ``capabilities.partial_fit`` has no ``partial_fit`` (scikit-learn's
    #: checks and ``hasattr`` see none); asking for it says why and what to do instead.
    partial_fit = _CapableOnly(_no_partial_fit)

    # ---------------------------------------------------------------- scoring

    def _check_input(self, X: Any, sample_dim: Any = None) -> Input:
        check_is_fitted(self, "summary_")
        if self.__dict__.get("n_samples_fit_") == 0:
            raise ValueError(
                f"this {type(self).__name__} holds no rows yet (a template from "
                "daskdepth.template, whose depths are not defined): add rows with "
                "partial_fit(X) before scoring")
        # a summary kept on a cluster that dropped it (client.restart(), a closed client)
        check_kept(getattr(self.summary_, "blocks", ()))
        fitted = getattr(self, "feature_names_in_", None)
        data = as_input(X, what="X", min_samples=0, nan_policy=self.nan_policy, lengths=False,
                        check_names=lambda names: check_feature_names(fitted, names,
                                                                      type(self).__name__),
                        sample_dim=sample_dim, n_features=self.n_features_in_)
        if data.n_features != self.n_features_in_:
            raise ValueError(
                f"X has {data.n_features} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input; score data with the columns the "
                "model was fitted on"
            )
        return data

    def _score(self, data: Input, std: bool = False) -> Any:
        token = tokenize(data.array.name, getattr(self, "_fit_token", id(self.summary_)),
                         self.nan_policy)
        known = None if std else self._known_depth(data)
        if known is not None:
            return da.from_array(known.copy(), chunks=(data.array.chunks[0],),
                                 name=key_name("score", token, "known"))
        return score_array(data.array, self.summary_, raise_nan=self.nan_policy == "raise",
                           token=token, statistic=self._statistic, std=std)

    def _known_depth(self, data: Input) -> np.ndarray | None:
        """The depths of ``data`` computed while fitting, if it holds the training rows.

        They are the same bits as scoring the rows afresh (the in-memory fit
        counts them exactly from each direction's sorted projections, or scores
        them to set ``offset_``).  Recognised by the rows' content token, checked
        only when the shape matches; not used when rows that are not finite
        must raise.
        """
        depth = getattr(self, "_train_depth", None)
        token = getattr(self, "_train_token", None)
        if depth is None or token is None or data.array.shape[0] != depth.shape[0]:
            return None
        if self.nan_policy == "raise" and np.isnan(depth).any():
            return None
        return depth if data.content_token == token else None

    def score_samples(self, X: Any, return_std: bool = False, *, sample_dim: Any = None) -> Any:
        """Depth of each row of ``X``; higher is more central.

        In [0, 1/2] for points not tied with reference rows (a reference row
        counts on both sides of itself: in-sample depth is at most (n + 1) / 2n,
        plus half the share of rows it is tied with).

        NumPy in gives NumPy out; a pandas DataFrame gives a pandas Series
        with the DataFrame's index (earlier versions gave NumPy, which
        ``.to_numpy()`` gives back); a dask array gives a lazy dask array with the same
        row chunks, a dask DataFrame a lazy dask Series aligned with its index,
        and a DataArray gives a DataArray over its sample dimension with that
        dimension's coordinates.  Rows with NaN or inf raise under
        ``nan_policy='raise'`` and get NaN under ``'omit'``.  The other
        scoring methods give their results back alike.

        The training rows of an in-memory fit are not scored again: their
        depths were counted while fitting (the same bits), and rows with the
        same content are recognised by a hash of it.

        Parameters
        ----------
        X : array-like, dask array or xarray.DataArray of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return each depth's Monte Carlo standard error over the
            directions (as scikit-learn's ``GaussianProcessRegressor.predict``).
        sample_dim : str, optional
            DataArray only: the dimension that holds the samples (as for
            :meth:`fit`; a DataArray whose first dimension has the model's
            feature count, and the second not, is refused unless given).

        Returns
        -------
        depth : same container kind as ``X``, shape (n_samples,)
        std : same kind and shape, only with ``return_std=True``
            ``s / sqrt(m)`` with ``s`` the standard deviation (``ddof=1``) of the
            point's ``m`` per-direction depths: the spread that drawing other
            directions (another ``random_state``) would give, so that about 95%
            of the depths lie within two standard errors of the depth for
            infinitely many directions (less for points far outside the data, whose
            depths are near the lower bound 0 and whose per-direction depths are
            skewed: there the symmetric interval covers noticeably less, and
            :func:`daskdepth.depth_interval` gives a bounded, asymmetric one; see
            docs/accuracy.md).  It covers the direction sampling
            only, not the estimation of the covariance or location from the
            reference rows; the summary's approximation is bounded separately
            by ``error_bound_`` (at most ``tol``).  0 with one direction.

        Examples
        --------
        >>> import numpy as np, daskdepth
        >>> X = np.random.default_rng(0).normal(size=(1000, 2))
        >>> model = daskdepth.AIIRW(n_directions=400, random_state=0).fit(X)
        >>> depth, std = model.score_samples(X[:3], return_std=True)
        >>> bool((std > 0).all() and (std < 0.02).all())
        True
        """
        if return_std and not self.capabilities.std:
            raise ParameterError(
                f"return_std=True does not apply to {type(self).__name__}: it has no standard "
                f"errors (they are those of a mean over directions); standard errors exist for "
                f"{', '.join(capable('std'))}: call score_samples(X), or use one of those",
                name="return_std", value=True, depth=str(self.depth_name or ""),
                why="it has no standard errors", takers=capable("std"))
        data = self._check_input(X, sample_dim)
        if not return_std:
            return data.wrap(self._score(data))
        depth, std = self._score(data, std=True)
        if data.in_memory:
            # one computation for both (wrapping each would score the rows twice)
            with keep_placement():
                computed = dask.compute(depth, std)
            depth, std = (da.from_array(a, chunks=depth.chunks) for a in computed)
        return data.wrap(depth), data.wrap(std, name="depth_std")

    def explain(self, X: Any, n_top: int = 3, *, sample_dim: Any = None) -> Any:
        """Why each row of ``X`` is outlying: its least-deep directions and feature contributions.

        A row's depth is made of its univariate depths ``D_j = min(L_j, G_j) / n``
        along the directions ``v_j`` (their mean for IRW and AI-IRW, their minimum
        for the halfspace depth; for the projection depth ``D_j = 1 / (1 +
        |<x - location_, v_j> - med_j| / mad_j)``, whose minimum is the depth);
        the directions along which it is least deep are those in which it is
        outlying.  For every row this gives the ``n_top``
        directions of smallest ``D_j`` (among equal ``D_j``, e.g. the many
        directions along which a far outlier lies beyond all the data, the one
        along which it lies farthest out, ``|<x - location_, v_j>| / sigma_j``,
        first; then the smaller index), those
        ``D_j``, the side of each direction's median the row lies on, and each
        feature's contribution:

        ``contribution_f = sum_q w_q s_q (x_f - location_f) v_{j_q f} / sigma_{j_q}``

        with ``s_q`` the side (+1 above the median, -1 below), ``sigma_j =
        sqrt(v_j' covariance_ v_j)`` the spread of the reference projections on
        ``v_j``, and weights ``w_q = max(1/2 - D_q, 0)`` normalised to add up to 1
        (the less deep a direction, the more it counts; equal weights when all
        are 1/2).  The projection depth's ``D_j`` runs up to 1 (at ``med_j``),
        so its weights are ``w_q = 1 - D_q = O_q / (1 + O_q)``, ``O_q`` the
        outlyingness in MADs, normalised the same way (equal weights when all
        ``D_q`` are 1); the properties below hold alike.  ``(x_f - location_f)
        v_{jf}`` is feature ``f``'s term of the row's projection on ``v_j``, so:

        - the contributions add up to ``sum_q w_q s_q <x - location_, v_{j_q}> /
          sigma_{j_q}``: how far, in standard deviations, the row lies from the
          centre towards the side it is outlying on, along its least-deep
          directions;
        - a feature's contribution is positive when its deviation pushes the
          row out along those directions, negative when it pulls it back, and 0
          when the feature is at ``location_``;
        - it is in the features' own terms: rescaling or shifting a feature
          leaves the contributions of AI-IRW, ``Halfspace(affine_invariant=True)``
          and ``Projection(affine_invariant=True)`` unchanged (their directions
          rescale inversely); IRW and the other depths without whitening depend
          on the features' scales, and so do their explanations.

        The directions are those of the model's own summary: ``depth`` holds the
        very values the score is made of (``depth[:, 0]`` is a halfspace or
        projection model's score, bit for bit), each within ``error_bound``
        (the summary's largest per-direction bound; 0 for an exact summary) of
        the exact univariate depth, and the results are the same bits for any
        chunking, scheduler or cluster.

        Parameters
        ----------
        X : array-like, pandas or dask DataFrame, dask array or xarray.DataArray
            Rows to explain, as for :meth:`score_samples`.
        n_top : int, default=3
            Directions reported per row, at most the model's
            ``n_directions_``: a larger ``n_top`` reports every direction
            (the results then have ``n_directions_`` columns, as with
            ``n_top=model.n_directions_``).
        sample_dim : str, optional
            DataArray only, as for :meth:`score_samples`.

        Returns
        -------
        Explanation or xarray.Dataset
            An :class:`~daskdepth.estimators.explain.Explanation` whose
            ``direction``, ``depth``, ``side`` (n_samples, n_top) and
            ``contribution`` (n_samples, n_features) are NumPy arrays for NumPy
            input, lazy dask arrays with ``X``'s row chunks for a dask array,
            pandas DataFrames with ``X``'s index (and its columns for the
            contributions) for pandas, dask DataFrames for a dask DataFrame;
            ``axes`` holds every direction as a unit vector in the features'
            space.  A DataArray gives a Dataset with ``explain_direction``,
            ``explain_depth``, ``explain_side`` (sample, ``top``) and
            ``contribution`` (sample, feature), coordinates kept.

        Raises
        ------
        TypeError
            For a depth that is not built from univariate depths (HalfspaceMass).

        Examples
        --------
        >>> import numpy as np, daskdepth
        >>> X = np.random.default_rng(0).normal(size=(500, 3))
        >>> model = daskdepth.AIIRW(random_state=0).fit(X)
        >>> why = model.explain(np.array([[0.0, 0.0, 8.0]]), n_top=2)
        >>> why.direction.shape, int(np.argmax(why.contribution[0]))
        ((1, 2), 2)
        >>> bool(why.depth[0, 0] <= why.depth[0, 1])
        True
        """
        if not self.capabilities.explains:
            raise TypeError(
                f"{type(self).__name__} has no per-direction depths to explain: explanations "
                f"exist for {', '.join(explained())} (and depths scored from univariate depths "
                "along directions); score it with score_samples")
        return explain_rows(self, X, n_top, sample_dim=sample_dim)

    def decision_function(self, X: Any, *, sample_dim: Any = None) -> Any:
        """``score_samples(X) - offset_``: negative for outliers."""
        data = self._check_input(X, sample_dim)
        return data.wrap(self._score(data) - self.offset_, name="decision")

    def predict(self, X: Any, *, sample_dim: Any = None) -> Any:
        """-1 for outliers (depth below ``offset_``), 1 for inliers.

        Rows with NaN or inf under ``nan_policy='omit'`` get 0 (not scored).
        """
        data = self._check_input(X, sample_dim)
        return data.wrap(_labels(self._score(data) - self.offset_), name="label")

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_predict(self, X: Any, y: Any = None, *, sample_dim: Any = None) -> Any:
        """Fit on ``X`` and label its rows, scoring the training rows only once.

        ``offset_`` is the exact ``contamination`` quantile of the training depths
        for in-memory input, and that quantile over a bounded row sample of the
        (persisted) depths for dask input.
        """
        with show_phases(self._progress_label(), self.verbose), fitting_on_cluster():
            data = self._fit(X, sample_dim)
            depth = self._score(data)
            with phase("score"):
                if data.in_memory:
                    with keep_placement():
                        values = np.asarray(depth.compute())
                    out = da.from_array(values, chunks=depth.chunks)
                else:
                    with keep_placement():
                        out = depth.persist()
                    values = out.map_blocks(
                        offset_sample, SAMPLE_SIZE / max(1, out.shape[0]), dtype=np.float64,
                        chunks=((np.nan,) * out.numblocks[0],)).compute()
        self.offset_ = float(np.nanpercentile(values, 100 * self.contamination))
        return data.wrap(_labels(out - self.offset_), name="label")

    def save(self, path: Any, *, overwrite: bool = False) -> Any:
        """Save the fitted model as a Zarr group of arrays and JSON attributes (no pickle).

        Parameters
        ----------
        path : str or path-like
            Local directory to create, by convention ending in ``.zarr``.  It is
            written to a temporary sibling and moved into place when complete.
        overwrite : bool, default=False
            Replace an existing model (or other Zarr store) at ``path``.

        Returns
        -------
        pathlib.Path
            Absolute path of the saved model; :func:`daskdepth.load` reads it back
            into a model that scores identically.

        Examples
        --------
        >>> import os, tempfile, numpy as np, daskdepth
        >>> X = np.random.default_rng(0).normal(size=(300, 2))
        >>> model = daskdepth.AIIRW(random_state=0).fit(X)
        >>> path = model.save(os.path.join(tempfile.mkdtemp(), "model.zarr"))
        >>> bool((daskdepth.load(path).score_samples(X) == model.score_samples(X)).all())
        True
        """
        if "summary_" in self.__dict__:
            self._check_loadable()  # before any file is written
            check_kept(getattr(self.summary_, "blocks", ()))
        return save_model(self, path, overwrite=overwrite)

    @classmethod
    def _why_not_saved(cls) -> str | None:
        """Why no fitted model of this class can be saved to be loaded back (None: it can)."""
        name = cls.__name__
        if ESTIMATORS.get(name) is not cls:
            return (f"it is not a registered depth, and daskdepth.load builds only those "
                    f"({', '.join(sorted(ESTIMATORS))}); register it first "
                    f"(daskdepth.estimators.register({name}))")
        if not cls.capabilities.directions:
            return (f"a model store records {', '.join(STORED_COUNTS)} (they bound its "
                    f"arrays), and {name} has no directions; only depths with directions are "
                    "saved yet: fit it where it is used")
        return None

    def _check_loadable(self) -> None:
        """Refuse to save a fitted model that :func:`daskdepth.load` could not build back.

        The loader builds only registered classes (:data:`~daskdepth.estimators.ESTIMATORS`),
        reads only the summary types registration allows, and needs the counts that
        bound a store's arrays (:data:`STORED_COUNTS`); a ``TypeError`` says which is
        missing, before any file is written.
        """
        cls = type(self)
        name = cls.__name__
        why = cls._why_not_saved()
        if why is not None:
            raise TypeError(f"cannot save a {name}: {why}")
        summary = type(self.__dict__["summary_"])
        if summary not in cls.summary_types:
            raise TypeError(f"cannot save this {name}: its summary_ is a {summary.__name__}, "
                            f"not one of the summary types {name} declares (summary_types), "
                            "the only ones a loaded model may hold")
        missing = [count for count in STORED_COUNTS if count not in self.__dict__]
        if missing:
            raise TypeError(f"cannot save this {name}: a model store records "
                            f"{', '.join(STORED_COUNTS)} (they bound its arrays), and it has "
                            f"no {', '.join(missing)}")

    # ---------------------------------------------------------------- display

    def _covariance_kind(self) -> str:
        if not self._whitens():
            return self._no_whitening
        cov = self.__dict__.get("covariance", "sample")
        if isinstance(cov, str):
            fraction = self.__dict__.get("support_fraction")
            return cov if fraction is None or cov != "mcd" else f"mcd (support_fraction={fraction})"
        shape = getattr(cov, "shape", None)
        return f"precomputed {shape[0]} x {shape[1]}" if shape and len(shape) == 2 else \
            type(cov).__name__

    def _summary_html(self) -> str:
        """The fitted model in a few rows, from attributes already computed (no Dask work)."""
        state = self.__dict__  # plain attributes only: no property, nothing computed
        rows = [("depth", self._display_name()), ("covariance", self._covariance_kind())]
        if state.get("frame", "correlation") != "correlation":
            rows.append(("frame", str(state["frame"])))
        if "summary_" not in state:
            rows.append(("status", "not fitted"))
        else:
            rows += [("n (reference rows)", f"{state['n_samples_fit_']:,}"),
                     ("d (features)", str(state["n_features_in_"])),
                     *self._fitted_rows(state)]
            rank = state.get("covariance_rank_")
            if self._whitens() and rank is not None and rank < state["n_features_in_"]:
                rows.append(("covariance rank", str(rank)))
            if "n_passes_" in state:
                # n_passes_ counts the leaf passes only: named so, not "passes over the data",
                # which the progress lines count in all (moments and covariance passes too).
                rows.append(("leaf passes (after moments)", str(state["n_passes_"])))
            if "offset_" in state:
                rows.append(("offset", f"{state['offset_']:.4g} (contamination "
                                       f"{state.get('contamination')})"))
        cells = "".join(
            f'<tr><th style="text-align:left;padding-right:1em">{html.escape(k)}</th>'
            f'<td style="text-align:left">{html.escape(v)}</td></tr>' for k, v in rows)
        return (f'<div class="daskdepth-summary"><details open><summary>daskdepth '
                f'{html.escape(type(self).__name__)}</summary><table>{cells}</table>'
                f'</details></div>')

    def _display_name(self) -> str:
        return self.display_name

    def _fitted_rows(self, state: dict[str, Any]) -> list[tuple[str, str]]:
        """Rows of the display that describe the fitted directions and their accuracy."""
        rows = [("m (directions)", f"{state['n_directions_']:,}")] \
            if self.capabilities.directions else []
        tol = f" (tol {state.get('tol')})" if self.capabilities.tol else ""
        return [*rows, ("error bound", f"{state['error_bound_']:.3g}{tol}")]

    def _with_summary(self, diagram: str) -> str:
        # scikit-learn's diagram (parameters, fitted attributes), then the summary,
        # inside the diagram's <body> when it has one.
        tail = "</body>"
        if diagram.rstrip().endswith(tail):
            head = diagram.rstrip()[:-len(tail)]
            return head + self._summary_html() + tail
        return diagram + self._summary_html()

    def _get_fitted_attr_html(self, doc_link: str = "") -> Any:
        # scikit-learn's table of fitted attributes cuts each value's repr to 30 characters,
        # which left a fragment such as "DepthSummary(...200)], n=1000)": the summary is
        # shown by a description that fits instead.
        attrs = super()._get_fitted_attr_html(doc_link)
        entry = attrs.get("summary_") if hasattr(attrs, "get") else None
        summary = self.__dict__.get("summary_")
        if isinstance(entry, dict) and "value" in entry and summary is not None:
            entry["value"] = _Brief(summary)
        return attrs

    def _repr_html_inner(self) -> str:
        return self._with_summary(super()._repr_html_inner())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, str]:
        output = super()._repr_mimebundle_(**kwargs)
        if "text/html" in output:  # only when scikit-learn's display is 'diagram'
            output["text/html"] = self._with_summary(output["text/html"])
        return output


def parameter_not_taken(cls: type[DepthDetector], name: str, value: Any) -> ParameterError:
    """The error for ``cls(name=value)``, a parameter ``cls`` does not take.

    It names the depths that take it (and why this one does not, where its
    class says), or the closest parameter ``cls`` takes.

    Examples
    --------
    >>> import daskdepth
    >>> print(parameter_not_taken(daskdepth.Projection, "tol", 1e-3))
    Projection takes no parameter 'tol' (the projection depth's medians and MADs are exact); \
tol is a parameter of AIIRW, IRW and Halfspace: leave it out, or use one of those
    >>> print(parameter_not_taken(daskdepth.IRW, "n_direction", 10))  # doctest: +ELLIPSIS
    IRW takes no parameter 'n_direction'; did you mean 'n_directions'? ...
    """
    takers = [(depth, other) for depth, other in DEPTHS.items()
              if name in other._get_param_names()]
    own = sorted(cls._get_param_names())
    message = f"{cls.__name__} takes no parameter {name!r}"
    why = cls._why_not.get(name, "")
    if takers:
        listed = [other.__name__ for _, other in takers]
        names = listed[0] if len(listed) == 1 else \
            f"{', '.join(listed[:-1])} and {listed[-1]}"
        message += (f"{f' ({why})' if why else ''}; {name} is a parameter of {names}: leave it "
                    f"out, or use {'it' if len(listed) == 1 else 'one of those'}")
    else:
        close = difflib.get_close_matches(name, own, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        message += f"{hint} {cls.__name__}'s parameters: {', '.join(own)}"
    return ParameterError(message, name=name, value=value, depth=str(cls.depth_name or ""),
                          why=why, takers=tuple(depth for depth, _ in takers))


def capable(capability: str) -> tuple[str, ...]:
    """The registered depths that have ``capability`` (a field of :class:`Capabilities`).

    Examples
    --------
    >>> capable("std")
    ('ai-irw', 'irw')
    """
    return tuple(name for name, cls in DEPTHS.items() if getattr(cls.capabilities, capability))


class _Brief:
    """A fitted summary in at most 30 characters: ``n=1,000,000, m=4,000`` (rows, directions)."""

    def __init__(self, summary: Any) -> None:
        self.summary = summary

    def __repr__(self) -> str:
        directions = getattr(self.summary, "directions", None)
        if directions is None:
            return f"n={int(self.summary.n):,}"
        return f"n={int(self.summary.n):,}, m={int(directions.shape[0]):,}"


def _labels(decision: da.Array) -> da.Array:
    # Rows that could not be scored (NaN under nan_policy='omit') get 0, not a verdict.
    return da.where(da.isnan(decision), 0, da.where(decision >= 0, 1, -1)).astype(np.int64)


