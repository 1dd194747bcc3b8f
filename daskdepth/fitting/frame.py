"""AI-IRW's invariant frame: the whitening refined over the rows, its rotation fixed by the data.

``frame='invariant'`` draws the directions ``v = W F u`` where ``W`` whitens
the covariance exactly (not only up to the rounding of
:func:`daskdepth.kernels.whitening.canonical_covariance`) and ``F`` is the
equivariant frame of :func:`daskdepth.kernels.frame.invariant_frame`.  Both
come from chunked passes in whitened coordinates (:func:`frame_pass`):

1. with ``W0`` the usual (rounded) whitening, one pass recomputes the
   covariance from its rows as ``K = W0^T Sigma W0`` (near the identity) and
   the fourth-moment sums; ``W = W0 K^-1/2``;
2. a second pass recomputes the fourth moments in ``W`` coordinates, unless
   ``K`` is so close to the identity that a first-order correction of the
   first pass's is as good (:data:`daskdepth.kernels.frame.ONE_PASS_TOL`).

A precomputed covariance needs no rows for ``K`` (one pass).  Everything
that decides ``W`` and ``F`` is rounded in whitened units, so that the result
does not depend on the chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask.array as da
import numpy as np

from ..covariance.estimate import CovarianceFit
from ..kernels.frame import (
    NOISE_MARGIN,
    ONE_PASS_TOL,
    SIGN_TOL,
    FrameReport,
    canonical,
    fourth_moment_scatter,
    frame_noise,
    invariant_frame,
    inverse_sqrt,
    row_covariance,
)
from ..passes.frame import frame_pass


@dataclass
class Frame:
    """The invariant basis ``W F`` (d x r), what decided it, and the passes it took."""

    basis: np.ndarray
    report: FrameReport
    passes: int


def invariant_basis(x: da.Array, fit: CovarianceFit, w0: np.ndarray, token: str) -> Frame:
    """The whitening ``W F`` of ``fit.covariance`` in the invariant frame.

    ``w0`` (d x r) is the whitening of the rounded covariance; the result
    spans the same subspace and satisfies ``B B^T = covariance^+`` there.
    """
    r = w0.shape[1]
    rows = fit.rows
    if rows is None:
        # A precomputed covariance has no chunking noise: no rounding needed.
        k = w0.T @ fit.covariance @ w0
        w = w0 @ inverse_sqrt(k)
        moments = frame_pass(x, fit.location, w, rows=False, support=None, token=token, k=0)
        s, g = fourth_moment_scatter(moments)
        passes = 1
    else:
        moments = first = frame_pass(x, fit.location, w0, rows=True, support=rows.support,
                                     token=token, k=0)
        k = row_covariance(moments.rows, rows.factor, rows.ddof)
        if rows.ridge:
            k = k + rows.ridge * (w0.T @ w0)
        k = canonical(k)
        k_inv_sqrt = inverse_sqrt(k)
        w = w0 @ k_inv_sqrt
        if np.abs(k - np.eye(r)).max() <= ONE_PASS_TOL:
            s, g = fourth_moment_scatter(moments, k_inv_sqrt)
            passes = 1
        else:
            moments = frame_pass(x, fit.location, w, rows=False, support=None, token=token,
                                 k=1)
            s, g = fourth_moment_scatter(moments)
            passes = 2
    noise = frame_noise(moments, w, fit.location)
    if rows is None:  # no covariance refined from rows
        noise = noise._replace(k2=0.0)
    elif passes == 2:  # K came from the first pass's rows
        noise = noise._replace(k2=frame_noise(first, w0, fit.location).k2)
    f, report = invariant_frame(s, g, noise)
    return Frame(np.ascontiguousarray(w @ f), report, passes)


def frame_message(report: FrameReport, d: int) -> str:
    """The warning for a frame that the data do not fix completely, or fix only within rounding."""
    parts = []
    for grp in report.tied:
        parts.append(f"{len(grp)} equal eigenvalues ({report.eigenvalues[grp[0]]:.6g}) of the "
                     "fourth-moment scatter")
    exact = [k for k in report.unsigned
             if report.sign_tol is None or report.sign_tol[k] <= SIGN_TOL]
    near = [k for k in report.unsigned if k not in exact]
    if exact:
        parts.append(f"{len(exact)} axis/axes whose sign no third moment decides")
    if near:
        tol = max(float(report.sign_tol[k]) for k in near)  # type: ignore[index]
        parts.append(f"{len(near)} axis/axes whose third-moment sign criterion is within its "
                     f"numerical perturbation (|criterion| <= {tol:.2g}, {NOISE_MARGIN:g} times "
                     "the estimated effect of rounding in whitened coordinates)")
    causes = []
    if report.tied or exact:
        causes.append("data with exact symmetries (e.g. a sample and its mirror image, or a "
                      "regular grid)")
    if near:
        causes.append("nearly singular data (a feature almost a combination of others) or "
                      "data in very ill-conditioned coordinates, whose whitened rows carry "
                      "rounding noise of that size: the sign was decided within that noise, so "
                      "an affine image of the data may get the other one and rank differently")
    return (
        "frame='invariant': the invariant frame is not unique for these data ("
        + "; ".join(parts) + "): the depth is invariant under affine maps of the "
        f"{d} features only up to rotations or reflections within those eigenspaces. This "
        "happens for " + ", and for ".join(causes) + "; depths remain correct AI-IRW depths "
        "for the directions drawn"
    )
