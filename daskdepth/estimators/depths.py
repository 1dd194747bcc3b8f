"""The depth estimators on the leaf-summary engine: AI-IRW, IRW and the halfspace depth."""

from __future__ import annotations

import re
from typing import Any

from sklearn.utils._param_validation import StrOptions

from ..covariance.estimate import covariance_spec
from ..errors import ParameterError
from ..summary.statistics import MIN
from .base import _PARAMS_DOC, DepthDetector
from .params import CONSTRAINTS, DEFAULT_TOL, short_number


def _without_auto(doc: str) -> str:
    """The parameters' text for a depth that has no ``n_directions='auto'``."""
    out, count = re.subn(r"int, 'auto' or None(.*?); 'auto' picks .*?is the ``m`` used\.",
                         r"int or None\1.", doc, count=1, flags=re.S)
    if count != 1:  # pragma: no cover - the shared text changed: update this pattern
        raise RuntimeError("the n_directions text of _PARAMS_DOC no longer mentions 'auto'")
    return out

#: AI-IRW's frame parameter.
_FRAME_DOC = """    frame : {'correlation', 'invariant'}, default='correlation'
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
"""

#: AI-IRW's covariance parameters, also the halfspace depth's (with ``affine_invariant``).
_COVARIANCE_DOC = """    covariance : {'sample', 'mcd', 'ledoit-wolf', 'oas'} or array of shape \
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
"""


class AIIRW(DepthDetector):
    __doc__ = (
        """Affine-invariant integrated rank-weighted (AI-IRW) depth outlier detector.

    The depth of ``x`` averages, over directions ``v_j = W u_j`` with ``u_j``
    uniform on the sphere and ``W W^T = Sigma^{-1}``, the smaller of the shares
    of reference points on either side of ``x`` along ``v_j``.  Low depth means
    outlying.  Works on NumPy, dask and xarray input; large inputs are fitted in
    a few chunked passes and scored with one ``map_blocks``.
"""
        + _PARAMS_DOC.format(cov=_COVARIANCE_DOC + _FRAME_DOC,
                             cov_attr=" that defines the whitening", tol=short_number(DEFAULT_TOL))
        + """
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
    )

    depth_name = "ai-irw"
    display_name = "AI-IRW"
    long_name = "AI-IRW depth"
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "n_directions", "covariance", "tol", "contamination", "random_state", "nan_policy",
        "support_fraction", "frame", "verbose")}

    def __init__(self, n_directions: int | str | None = None, covariance: object = "sample",
                 tol: float = DEFAULT_TOL, contamination: float = 0.1, random_state: Any = None,
                 nan_policy: str = "raise", support_fraction: float | None = None,
                 frame: str = "correlation", verbose: int = 0) -> None:
        self.n_directions = n_directions
        self.covariance = covariance
        self.tol = tol
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.support_fraction = support_fraction
        self.frame = frame
        self.verbose = verbose

    def _whitens(self) -> bool:
        return True

    def _covariance_spec(self) -> object:
        return whitening_spec(self.covariance, self.support_fraction)


class IRW(DepthDetector):
    __doc__ = (
        """Integrated rank-weighted (IRW) depth outlier detector.

    Like :class:`AIIRW` with directions uniform on the sphere of the input
    space (no whitening): cheaper, but not affine invariant, so features should
    be on comparable scales.
"""
        + _PARAMS_DOC.format(cov="", cov_attr=" (informative; IRW does not whiten)",
                             tol=short_number(DEFAULT_TOL))
        + """
    Examples
    --------
    >>> import numpy as np
    >>> import daskdepth
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> depth = daskdepth.IRW(random_state=0).fit(X).score_samples(X)
    >>> depth.shape, bool(0 <= depth.min() and depth.max() <= 0.5)
    ((500,), True)
"""
    )

    depth_name = "irw"
    display_name = "IRW"
    long_name = "IRW depth"
    _why_not = {"covariance": "IRW does not whiten", "support_fraction": "IRW does not whiten"}
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "n_directions", "tol", "contamination", "random_state", "nan_policy", "verbose")}

    def __init__(self, n_directions: int | str | None = None, tol: float = DEFAULT_TOL,
                 contamination: float = 0.1, random_state: Any = None,
                 nan_policy: str = "raise", verbose: int = 0) -> None:
        self.n_directions = n_directions
        self.tol = tol
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.verbose = verbose


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


class Halfspace(DepthDetector):
    __doc__ = (
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
"""
        + _without_auto(_PARAMS_DOC).format(
            cov="""    affine_invariant : bool, default=False
        Draw the directions whitened by the covariance, as :class:`AIIRW`
        does; ``covariance`` and ``support_fraction`` apply only then.
""" + _COVARIANCE_DOC,
            cov_attr=" (that defines the whitening with ``affine_invariant=True``)",
            tol=short_number(DEFAULT_TOL),
        )
        + """
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
    )

    depth_name = "halfspace"
    display_name = "halfspace (Tukey)"
    long_name = "random halfspace (Tukey) depth"
    _statistic = MIN
    _no_whitening = "none (affine_invariant=False: directions uniform on the sphere)"
    _parameter_constraints = {name: CONSTRAINTS[name] for name in (
        "affine_invariant", "covariance", "tol", "contamination", "random_state",
        "nan_policy", "support_fraction", "verbose")}
    # 'auto' picks m for a standard error of a mean over directions; a minimum has none.
    _parameter_constraints["n_directions"] = [
        c for c in CONSTRAINTS["n_directions"] if not isinstance(c, StrOptions)]

    def __init__(self, n_directions: int | None = None, affine_invariant: bool = False,
                 covariance: object = "sample", tol: float = DEFAULT_TOL,
                 contamination: float = 0.1, random_state: Any = None, nan_policy: str = "raise",
                 support_fraction: float | None = None, verbose: int = 0) -> None:
        self.n_directions = n_directions
        self.affine_invariant = affine_invariant
        self.covariance = covariance
        self.tol = tol
        self.contamination = contamination
        self.random_state = random_state
        self.nan_policy = nan_policy
        self.support_fraction = support_fraction
        self.verbose = verbose

    _whitens = affine_whitens
    _display_name = affine_display_name
    _covariance_spec = affine_covariance_spec
