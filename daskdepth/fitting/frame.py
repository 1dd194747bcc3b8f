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
    ONE_PASS_TOL,
    FrameReport,
    canonical,
    fourth_moment_scatter,
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
        moments = frame_pass(x, fit.location, w0, rows=True, support=rows.support,
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
    f, report = invariant_frame(s, g)
    return Frame(np.ascontiguousarray(w @ f), report, passes)


def frame_message(report: FrameReport, d: int) -> str:
    """The warning for a frame that the data do not fix completely."""
    parts = []
    for grp in report.tied:
        parts.append(f"{len(grp)} equal eigenvalues ({report.eigenvalues[grp[0]]:.6g}) of the "
                     "fourth-moment scatter")
    if report.unsigned:
        parts.append(f"{len(report.unsigned)} axis/axes whose sign no third moment decides")
    return (
        "frame='invariant': the invariant frame is not unique for these data ("
        + "; ".join(parts) + "): the depth is invariant under affine maps of the "
        f"{d} features only up to rotations or reflections within those eigenspaces. This "
        "happens for data with exact symmetries (e.g. a sample and its mirror image, or a "
        "regular grid); depths remain correct AI-IRW depths for the directions drawn"
    )
